// The pipeline of transforms.h as batched tensor ops, for the device-resident loader mode:
// the whole set lives on the device and a batch is gathered and augmented there. Sample
// parameters still come from draw_params(), so randomness depends only on (seed, epoch,
// index). flip, vflip and crop give exactly the CPU path's result; rotate/translate match it
// up to float rounding; the base resize/resized crop uses bilinear grid sampling (no
// antialiasing), unlike the CPU path's antialiased filter.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "data/transforms.h"

namespace dlrun::data {

/// images: (B, C, H, W) uint8 on any device; params: one per sample.
/// Returns (B, C, out_h, out_w) float32 on the same device.
torch::Tensor augment_batch(const torch::Tensor& images, const Pipeline& p, const std::vector<SampleParams>& params);

/// A small host tensor (indices, per-sample parameters) on `d` without making the host wait
/// for the device: on CUDA through pinned memory and an asynchronous copy (the caching host
/// allocator keeps the pinned block until the copy has run). A plain pageable copy would
/// synchronise the stream, so each batch would wait for the previous step to finish and that
/// wait would be counted as data wait. Elsewhere `host.to(d)`.
torch::Tensor to_device_async(const torch::Tensor& host, const torch::Device& d);

}  // namespace dlrun::data
