// Activation checkpointing (model.activation_checkpointing): run a segment of a model's
// forward without keeping its intermediate activations, and run it again in backward to get
// them — torch.utils.checkpoint's trade of compute for memory.
//
// A segment is a custom autograd function whose inputs are the segment's input and its
// parameters. Its forward runs with grad mode off and keeps only the input; its backward
// re-runs the segment with grad mode on, under the forward's CPU and CUDA RNG states and
// autocast state, and asks autograd for the gradients of the input and the parameters. The
// gradients it returns are those the plain graph would have produced, bit for bit (same
// kernels, same order, same dropout masks), and they reach the parameters through their usual
// accumulators, so DDP's gradient hooks, accumulation and the optimizers see nothing new.
// BatchNorm running statistics (and every other buffer of the segment) are put back after the
// recomputation, so they advance once per forward, as without checkpointing — unlike
// torch.utils.checkpoint, where a recomputed BatchNorm counts its batch twice.
//
// A segment must not modify its input in place (the input is what backward replays from);
// outside grad mode (evaluation) a segment is simply run.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace dlrun::models {

/// One segment of a forward pass: x -> y.
using SegmentFn = std::function<torch::Tensor(const torch::Tensor&)>;

/// fn(x), checkpointed when grad mode is on and x or a parameter of `modules` needs a
/// gradient. `modules` are the modules fn uses: their parameters become inputs of the
/// segment, their buffers are restored after the recomputation.
torch::Tensor checkpoint(const SegmentFn& fn, const torch::Tensor& x,
                         const std::vector<std::shared_ptr<torch::nn::Module>>& modules);

/// Modules [begin, end) of `seq` applied to x in order; as one checkpointed segment when
/// `checkpointed`.
torch::Tensor forward_span(torch::nn::Sequential& seq, size_t begin, size_t end, torch::Tensor x, bool checkpointed);

/// How many segment recomputations this process has run (backward passes through a
/// checkpointed segment). Tests use it to see that recomputation happens at all.
int64_t recomputations();

}  // namespace dlrun::models
