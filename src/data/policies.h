// The automatic augmentation policies of data.augment — trivial_augment (TrivialAugmentWide),
// rand_augment (RandAugment) and auto_augment (AutoAugment's ImageNet, CIFAR-10 and SVHN
// policies) — as torchvision.transforms.v2 defines them: the same operations (data/image_ops.h),
// the same magnitude tables (float32, torch.linspace's values), the same choices. The random
// numbers are dlrun's: each sample's operations are drawn from its own stream keyed by (seed,
// epoch, index), so they do not depend on workers or resume (data/sample_rng.h).
#pragma once

#include <cstdint>
#include <vector>

#include "config/options.h"
#include "data/image_ops.h"
#include "data/sample_rng.h"

namespace dlrun::data {

enum class PolicyKind { kNone, kTrivialAugment, kRandAugment, kAutoAugment };

struct PolicyConfig {
  PolicyKind kind = PolicyKind::kNone;
  int64_t bins = 31;      ///< trivial_augment, rand_augment: magnitude bins
  int64_t num_ops = 2;    ///< rand_augment
  int64_t magnitude = 9;  ///< rand_augment: the bin
  AutoAugmentPolicy auto_policy = AutoAugmentPolicy::kImagenet;
  Sampling sampling = Sampling::kNearest;  ///< data.policy_interpolation
};

/// One operation a sample gets, with its magnitude (0 for those that take none).
struct OpDraw {
  ImageOp op = ImageOp::kIdentity;
  double magnitude = 0;
};

/// What policy `kind` offers for `op` at `bins` bins on an h x w image: torchvision's table
/// (float32 values, as double), whether a drawn magnitude is negated half the time, and whether
/// the op is in the policy's space at all. No table: an operation without magnitude.
struct OpSpace {
  bool present = false;
  bool is_signed = false;
  std::vector<double> table;
};
OpSpace op_space(PolicyKind kind, ImageOp op, int64_t bins, int64_t h, int64_t w);

/// The operations of one sample on an h x w image, drawn with `rng` as the policy's forward()
/// draws them: trivial_augment one op and one bin, uniformly; rand_augment num_ops ops at bin
/// `magnitude`; auto_augment one of the policy's 25 sub-policies, each of its two ops with its
/// probability at its bin of a 10-bin table. Signed magnitudes are negated with probability 1/2.
std::vector<OpDraw> draw_policy(const PolicyConfig& c, SampleRng& rng, int64_t h, int64_t w);

/// data.augment's policy and its settings; PolicyKind::kNone when it names none. More than one
/// policy, a magnitude outside its table, or an image of other than 1 or 3 channels: exit 2
/// naming the key.
PolicyConfig policy_config(const DataOptions& opts, int64_t channels);

}  // namespace dlrun::data
