// Batch mixing: MixUp (train.mixup_alpha) and CutMix (train.cutmix_alpha) as
// torchvision.transforms.v2's MixUp and CutMix mix a batch — each sample with the one before it
// (the batch rolled by one), lambda ~ Beta(alpha, alpha); CutMix pastes a box of the rolled batch
// whose size follows lambda, and weighs the targets by the area it really covers — with the
// choice of timm's Mixup: a micro-batch is mixed with probability train.mix_prob, and with both
// alphas by CutMix with probability train.mix_switch_prob. The targets become probabilities, and
// the loss is the cross-entropy against them with train.label_smoothing applied to them (what
// timm's mixup_target and SoftTargetCrossEntropy compute).
//
// A micro-batch's draw is a function of (seed, step, micro-batch, rank) alone: a resumed run mixes
// its batches as the uninterrupted one did, and the split of train.micro_batch: auto (which cuts a
// micro-batch after mixing) changes nothing. The draw is on the host, so a mixing step cannot be
// captured as a CUDA graph.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <utility>

#include "config/options.h"

namespace dlrun::train {

struct MixDraw {
  enum class Kind { kNone, kMixUp, kCutMix };
  Kind kind = Kind::kNone;
  double lam = 1.0;                        ///< the weight of the batch itself (CutMix: after the box)
  int64_t x1 = 0, y1 = 0, x2 = 0, y2 = 0;  ///< CutMix's box, [x1, x2) x [y1, y2)
};

/// Whether `t` mixes at all.
inline bool mixing(const TrainOptions& t) { return t.mixup_alpha > 0 || t.cutmix_alpha > 0; }

/// The draw for micro-batch `micro` of step `step` on `rank`, of images h x w.
MixDraw draw_mix(const TrainOptions& t, uint64_t seed, int64_t step, int64_t micro, int64_t rank, int64_t h,
                 int64_t w);

/// CutMix's box and adjusted lambda as torchvision computes them from lambda and the box's center
/// (r_x, r_y), drawn uniformly in [0, w) x [0, h).
MixDraw cutmix_box(double lam, int64_t r_x, int64_t r_y, int64_t h, int64_t w);

/// The micro-batch (x: N, C, H, W; y: N class indices) mixed, and its targets (N, classes) as
/// float32 probabilities — torchvision's operations, so its arithmetic. kNone: x unchanged and no
/// targets (undefined: the class indices stand).
std::pair<torch::Tensor, torch::Tensor> apply_mix(const MixDraw& d, const torch::Tensor& x, const torch::Tensor& y,
                                                  int64_t classes);

/// A draw from Beta(alpha, alpha) by two Gamma(alpha) draws (Marsaglia and Tsang), for tests.
double beta_draw(uint64_t key, double alpha);

}  // namespace dlrun::train
