// The image operations of the automatic augmentation policies (data/policies.h), on uint8 images,
// each computed as torchvision.transforms.v2.functional computes it on a uint8 tensor — the same
// float32 arithmetic in the same order (fused multiply-adds where ATen's CPU kernels fuse), the
// same truncation back to uint8 — so that an image and a magnitude give torchvision's pixels
// (tests/data/policy_ops.py compares every operation). Plain loops, no torch ops: they run in the
// loader's worker threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dlrun::data {

/// torchvision's operation names ("ShearX", ...), in the order of TrivialAugmentWide's space
/// with Invert (AutoAugment's) last.
enum class ImageOp {
  kIdentity,
  kShearX,
  kShearY,
  kTranslateX,
  kTranslateY,
  kRotate,
  kBrightness,
  kColor,
  kContrast,
  kSharpness,
  kPosterize,
  kSolarize,
  kAutoContrast,
  kEqualize,
  kInvert,
  kHue,  ///< color_jitter's alone (no policy has it): adjust_hue by `magnitude` of a turn
};
constexpr int kImageOps = 16;

/// "ShearX" for ImageOp::kShearX.
const char* op_name(ImageOp op);
/// The op named `name` (torchvision's spelling), or none.
std::optional<ImageOp> parse_op(const std::string& name);

/// A planar uint8 image: channel c's row y is px[(c * h + y) * w ...]; c is 1 or 3.
struct U8Image {
  std::vector<uint8_t> px;
  int64_t c = 0, h = 0, w = 0;
};

/// How the geometric operations sample the image: torchvision's InterpolationMode.NEAREST (its
/// policies' default) or BILINEAR (what torchvision's classification recipes pass them).
enum class Sampling { kNearest, kBilinear };

/// `op` with `magnitude` applied to `img` in place, as torchvision's automatic augmentations
/// apply it (_apply_image_or_video_transform: shears of atan(magnitude) about the top-left corner,
/// translations of int(magnitude) pixels, rotations of magnitude degrees about the center, all
/// sampled with `sampling` and 0 outside; factor 1 + magnitude for brightness, color (the
/// saturation), contrast and sharpness; int(magnitude) bits for posterize; a threshold of 255 x
/// magnitude for solarize; a hue shift of magnitude turns, in [-0.5, 0.5], for hue).
void apply_op(ImageOp op, double magnitude, U8Image& img, Sampling sampling = Sampling::kNearest);

}  // namespace dlrun::data
