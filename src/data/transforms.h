// The per-sample image pipeline of the loader, shared by the CPU path (worker threads,
// transforms.cpp) and the device-resident path (device_augment.cpp).
//
// Order: base geometry (random resized crop, or resize + center crop when data.image_size
// > 0) -> flip -> vflip -> the automatic augmentation policy, then color_jitter (on the image
// rounded to uint8, as torchvision's and timm's presets apply them to the cropped PIL image) -> rotate/translate (one affine map) ->
// crop (zero padding) -> normalize -> erase. Every random parameter of a sample is drawn by draw_params() from
// (seed, epoch, dataset index) alone, one stream per transform.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/options.h"
#include "data/dataset.h"
#include "data/policies.h"

namespace dlrun::data {

/// What the pipeline does, resolved from DataOptions and the dataset's info.
struct Pipeline {
  bool train = false;  ///< false: no augmentation at all
  bool flip = false, vflip = false, crop = false, resized_crop = false, rotate = false, translate = false,
       erase = false;
  int64_t channels = 1;
  int64_t out_h = 0, out_w = 0;  ///< output size: data.image_size, or the native size
  bool resize = false;           ///< image_size > 0: resize shorter side + center crop
  /// Resize shorter side to out / center_ratio before the center crop (eval of a set trained
  /// with resized_crop uses the usual 0.875, i.e. 256 -> 224; otherwise 1).
  double center_ratio = 1.0;
  int64_t resize_side = 0;  ///< evaluation: data.eval_resize_size, the shorter side before the crop (0: center_ratio)
  int64_t crop_padding = 4;
  double scale_lo = 0.08, scale_hi = 1.0;
  double rotate_degrees = 15.0, translate_frac = 0.1, erase_p = 0.5;
  double erase_scale_lo = 0.02, erase_scale_hi = 0.33, erase_ratio_lo = 0.3, erase_ratio_hi = 3.3;
  EraseValue erase_value = EraseValue::kZero;
  PolicyConfig policy;  ///< data.augment's trivial_augment, rand_augment or auto_augment
  bool normalize = true;
  std::vector<float> mean, std;
};

/// Resolves the pipeline. Throws dlrun::Error (exit 2) for an unknown augment name, a
/// mean/std of the wrong length, or image_size 0 with a set of varying image sizes.
Pipeline make_pipeline(const DataOptions& opts, const DatasetInfo& info, bool train);

/// Names accepted in data.augment.
const std::vector<std::string>& augment_names();

/// One sample's random decisions.
struct SampleParams {
  double box_y = 0, box_x = 0, box_h = 0, box_w = 0;  ///< source box mapped onto the output
  bool flip = false, vflip = false;
  double angle_deg = 0, shift_y = 0, shift_x = 0;  ///< rotation about the center, then shift (pixels)
  int64_t crop_y = 0, crop_x = 0;                  ///< crop offset in the padded image, 0..2*padding
  bool erase = false;
  int64_t erase_y = 0, erase_x = 0, erase_h = 0, erase_w = 0;
  uint64_t erase_key = 0;  ///< the stream of the box's random values (erase_value per_channel, per_pixel)
  std::vector<OpDraw> ops;  ///< the policy's operations, then color_jitter's, in order (none: the image stays float)
  AugMixDraw augmix;        ///< augmix: its chains (before `ops`)
  bool identity_base(int64_t h, int64_t w, const Pipeline& p) const {
    return box_y == 0 && box_x == 0 && box_h == h && box_w == w && p.out_h == h && p.out_w == w;
  }
};

/// The parameters of dataset sample `index` of `epoch`, for a source image of h x w.
/// Deterministic in (seed, epoch, index); for an eval pipeline only the center box is set.
SampleParams draw_params(const Pipeline& p, uint64_t seed, int64_t epoch, int64_t index, int64_t h, int64_t w);

/// Applies the pipeline to one image. src: (C, h, w) uint8, or with `interleaved` (h, w, C) as
/// decoders write it; out: (C, out_h, out_w) float32.
void apply_transforms(const uint8_t* src, int64_t h, int64_t w, const Pipeline& p, const SampleParams& sp, float* out,
                      bool interleaved = false);

/// One image file (JPEG or PNG bytes) through the pipeline as dataset sample `index` of `epoch`:
/// its parameters drawn for its full size (from the header), then, with `roi`, only the part they
/// read decoded at the smallest DCT scale that covers the output (image_decode.h decode_region),
/// else the whole image; then apply_transforms into out (C, out_h, out_w). Exit 2 naming `name`
/// for an undecodable file.
/// `scale_num` (if given) receives the DCT scale used, in eighths (8: full size).
void transform_encoded(const std::vector<uint8_t>& bytes, const std::string& name, const Pipeline& p, uint64_t seed,
                       int64_t epoch, int64_t index, bool roi, float* out, int* scale_num = nullptr);

/// How the region decode compares with the full decode on a set's first `samples` samples,
/// through the training pipeline (without normalization): how many outputs are bit-identical,
/// how many were decoded at a reduced DCT scale, and the PSNR in dB (pixels in [0, 1]) of the
/// others against the full decode's.
struct RoiQuality {
  int64_t samples = 0, identical = 0, scaled = 0;
  double mean_psnr_db = 0, worst_psnr_db = 0;  ///< over the outputs that differ (0 when none does)
  double roi_s = 0, full_s = 0;  ///< decode + transform time of each, one thread
};
RoiQuality measure_roi_decode(const Dataset& ds, const DataOptions& opts, uint64_t seed, int64_t samples);

}  // namespace dlrun::data
