// The automatic augmentation policies of data.augment — trivial_augment (TrivialAugmentWide),
// rand_augment (RandAugment), auto_augment (AutoAugment's ImageNet, CIFAR-10 and SVHN policies)
// and augmix (AugMix) — and color_jitter (ColorJitter), as torchvision.transforms.v2 defines
// them: the same operations (data/image_ops.h),
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

enum class PolicyKind { kNone, kTrivialAugment, kRandAugment, kAutoAugment, kAugMix };

struct PolicyConfig {
  PolicyKind kind = PolicyKind::kNone;
  int64_t bins = 31;      ///< trivial_augment, rand_augment: magnitude bins
  int64_t num_ops = 2;    ///< rand_augment
  int64_t magnitude = 9;  ///< rand_augment: the bin
  AutoAugmentPolicy auto_policy = AutoAugmentPolicy::kImagenet;
  Sampling sampling = Sampling::kNearest;  ///< data.policy_interpolation
  // augmix (AugMix's severity, mixture_width, chain_depth, alpha; all_ops: true)
  int64_t severity = 3, width = 3, depth = -1;
  double alpha = 1.0;
  /// color_jitter: [brightness, contrast, saturation, hue] (ColorJitter's), applied after the
  /// policy, as timm applies it after its auto-augmentation
  bool jitter = false;
  std::vector<double> jitter_values = {0.4, 0.4, 0.4, 0.0};
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

/// One sample's AugMix, as AugMix.forward draws it: m = (original, mixed) ~ Dirichlet(alpha,
/// alpha), the chains' shares ~ Dirichlet(alpha, ...) (chain i weighs shares[i] x mixed, float32),
/// and each chain's operations.
struct AugMixDraw {
  float original = 0, mixed = 0;
  std::vector<float> shares;
  std::vector<std::vector<OpDraw>> chains;
};

/// AugMix's draws as its forward() makes them: Beta(alpha, alpha) weights of the original and the
/// mix (a 2-component Dirichlet), Dirichlet(alpha, ..., alpha) weights of the chains, then per
/// chain its depth (data.augmix_depth, or 1 to 3) and per step an operation of the 13 of its
/// space with a magnitude from the first `severity` bins of its 10-bin table.
AugMixDraw draw_augmix(const PolicyConfig& c, SampleRng& rng, int64_t h, int64_t w);

/// `img` replaced by its AugMix: original x img + sum of (shares[i] x mixed) x chain_i(img), in
/// float32 in that order (torchvision's forward), truncated back to uint8.
void apply_augmix(const AugMixDraw& d, U8Image& img, Sampling sampling);

/// ColorJitter's operations for one sample: a random order of the four, each enabled one with its
/// factor (brightness, contrast, saturation: uniform in [max(0, 1 - v), 1 + v], as magnitude
/// factor - 1; hue: uniform in [-v, v]), factors in float32 as torchvision draws them.
std::vector<OpDraw> draw_color_jitter(const PolicyConfig& c, SampleRng& rng);

/// data.augment's policy and its settings; PolicyKind::kNone when it names none. More than one
/// policy, a magnitude outside its table, or an image of other than 1 or 3 channels: exit 2
/// naming the key.
PolicyConfig policy_config(const DataOptions& opts, int64_t channels);

}  // namespace dlrun::data
