// Resolving the pipeline from the options, and drawing each sample's random parameters.
// The draws follow torchvision's RandomResizedCrop / RandomErasing / RandomAffine recipes
// (RandomErasing's scale and ratio: data.erase_scale, data.erase_ratio);
// each transform reads its own stream keyed by (seed, epoch, index), so the result does not
// depend on which other transforms are on, on the worker, or on the batch.
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "config/choices.h"
#include "data/sample_rng.h"
#include "data/transforms.h"

namespace dlrun::data {

const std::vector<std::string>& augment_names() {
  static const std::vector<std::string> n = {"flip",  "vflip", "crop",            "resized_crop", "rotate",
                                             "translate", "erase", "trivial_augment", "rand_augment", "auto_augment",
                                             "augmix", "color_jitter"};
  return n;
}

namespace {
// data.augment takes these names (config/choices.h): the schema lists no transform of its own.
[[maybe_unused]] const bool kNamesRegistered =
    config::register_choices("data.augment", [] { return augment_names(); });
}  // namespace

Pipeline make_pipeline(const DataOptions& opts, const DatasetInfo& info, bool train) {
  Pipeline p;
  p.train = train;
  p.channels = info.channels;
  for (const std::string& a : opts.augment) {
    if (a == "flip") p.flip = true;
    else if (a == "vflip") p.vflip = true;
    else if (a == "crop") p.crop = true;
    else if (a == "resized_crop") p.resized_crop = true;
    else if (a == "rotate") p.rotate = true;
    else if (a == "translate") p.translate = true;
    else if (a == "erase") p.erase = true;
    else if (a == "trivial_augment" || a == "rand_augment" || a == "auto_augment" || a == "augmix" ||
             a == "color_jitter")
      continue;  // policy_config
    else {
      std::string valid;
      for (const auto& n : augment_names()) valid += (valid.empty() ? "" : ", ") + n;
      throw Error(ExitCode::kBadInput, fmt::format("data.augment: unknown transform '{}'", a), "valid: " + valid);
    }
  }
  if (opts.image_size > 0) {
    p.out_h = p.out_w = opts.image_size;
    p.resize = true;
  } else {
    DLRUN_CHECK_INPUT(info.height > 0 && info.width > 0,
                      "data.image_size must be > 0 for data.name={}: its images vary in size", opts.name);
    p.out_h = info.height;
    p.out_w = info.width;
  }
  if (!train && opts.eval_image_size > 0) {  // torchvision's --val-crop-size
    p.out_h = p.out_w = opts.eval_image_size;
    p.resize = true;
  }
  if (!train && opts.eval_resize_size > 0) p.resize_side = opts.eval_resize_size;  // --val-resize-size
  else if (!train && p.resized_crop) p.center_ratio = 0.875;
  if (!train) p.flip = p.vflip = p.crop = p.resized_crop = p.rotate = p.translate = p.erase = false;
  if (train) p.policy = policy_config(opts, p.channels);
  p.crop_padding = opts.crop_padding;
  if (opts.resized_crop_scale.size() == 2) {
    p.scale_lo = opts.resized_crop_scale[0];
    p.scale_hi = opts.resized_crop_scale[1];
  }
  p.rotate_degrees = opts.rotate_degrees;
  p.translate_frac = opts.translate_frac;
  p.erase_p = opts.erase_p;
  if (opts.erase_scale.size() == 2) {
    p.erase_scale_lo = opts.erase_scale[0];
    p.erase_scale_hi = opts.erase_scale[1];
  }
  if (opts.erase_ratio.size() == 2) {
    p.erase_ratio_lo = opts.erase_ratio[0];
    p.erase_ratio_hi = opts.erase_ratio[1];
  }
  p.erase_value = opts.erase_value;
  p.normalize = opts.normalize;
  const std::vector<double>& mean = opts.mean.empty() ? info.mean : opts.mean;
  const std::vector<double>& std = opts.std.empty() ? info.std : opts.std;
  if (p.normalize) {
    DLRUN_CHECK_INPUT(static_cast<int64_t>(mean.size()) == p.channels && static_cast<int64_t>(std.size()) == p.channels,
                      "data.mean/data.std: need {} values (the data has {} channel(s)), got {} and {}", p.channels,
                      p.channels, mean.size(), std.size());
    for (size_t c = 0; c < mean.size(); ++c) {
      DLRUN_CHECK_INPUT(std[c] > 0, "data.std: standard deviations must be > 0");
      p.mean.push_back(static_cast<float>(mean[c]));
      p.std.push_back(static_cast<float>(std[c]));
    }
  }
  return p;
}

namespace {

/// Center box of a resize-shorter-side-then-center-crop, in source pixels.
void center_box(const Pipeline& p, int64_t h, int64_t w, SampleParams& sp) {
  if (!p.resize) {
    sp.box_h = static_cast<double>(h);
    sp.box_w = static_cast<double>(w);
    return;
  }
  // Shorter side -> out / ratio; then an out_h x out_w window in the middle.
  double shorter = static_cast<double>(std::min(h, w));
  const double target = p.resize_side > 0 ? static_cast<double>(p.resize_side)
                                           : static_cast<double>(std::min(p.out_h, p.out_w)) / p.center_ratio;
  double k = target / shorter;  // output px per source px
  sp.box_h = std::min(static_cast<double>(h), p.out_h / k);
  sp.box_w = std::min(static_cast<double>(w), p.out_w / k);
  sp.box_y = (h - sp.box_h) / 2.0;
  sp.box_x = (w - sp.box_w) / 2.0;
}

void resized_crop_box(const Pipeline& p, SampleRng& rng, int64_t h, int64_t w, SampleParams& sp) {
  const double area = static_cast<double>(h * w);
  const double lr0 = std::log(3.0 / 4.0), lr1 = std::log(4.0 / 3.0);
  for (int attempt = 0; attempt < 10; ++attempt) {
    double target = area * rng.uniform(p.scale_lo, p.scale_hi);
    double ratio = std::exp(rng.uniform(lr0, lr1));
    int64_t cw = std::llround(std::sqrt(target * ratio));
    int64_t ch = std::llround(std::sqrt(target / ratio));
    if (cw > 0 && ch > 0 && cw <= w && ch <= h) {
      sp.box_y = static_cast<double>(rng.below(h - ch + 1));
      sp.box_x = static_cast<double>(rng.below(w - cw + 1));
      sp.box_h = static_cast<double>(ch);
      sp.box_w = static_cast<double>(cw);
      return;
    }
  }
  // Fallback: the whole image, clamped to the ratio range, centered.
  double in_ratio = static_cast<double>(w) / h;
  double cw = static_cast<double>(w), ch = static_cast<double>(h);
  if (in_ratio < 3.0 / 4.0) ch = std::round(cw / (3.0 / 4.0));
  else if (in_ratio > 4.0 / 3.0) cw = std::round(ch * (4.0 / 3.0));
  sp.box_h = ch;
  sp.box_w = cw;
  sp.box_y = std::floor((h - ch) / 2.0);
  sp.box_x = std::floor((w - cw) / 2.0);
}

void erase_box(const Pipeline& p, SampleRng& rng, SampleParams& sp) {
  if (!rng.bernoulli(p.erase_p)) return;
  const double area = static_cast<double>(p.out_h * p.out_w);
  const double lr0 = std::log(p.erase_ratio_lo), lr1 = std::log(p.erase_ratio_hi);
  for (int attempt = 0; attempt < 10; ++attempt) {
    double target = area * rng.uniform(p.erase_scale_lo, p.erase_scale_hi);
    double ratio = std::exp(rng.uniform(lr0, lr1));
    int64_t eh = std::llround(std::sqrt(target * ratio));
    int64_t ew = std::llround(std::sqrt(target / ratio));
    if (eh > 0 && ew > 0 && eh < p.out_h && ew < p.out_w) {
      sp.erase = true;
      sp.erase_y = rng.below(p.out_h - eh + 1);
      sp.erase_x = rng.below(p.out_w - ew + 1);
      sp.erase_h = eh;
      sp.erase_w = ew;
      sp.erase_key = rng.next();  // the fill's own stream (erase_value per_channel, per_pixel)
      return;
    }
  }
}

}  // namespace

SampleParams draw_params(const Pipeline& p, uint64_t seed, int64_t epoch, int64_t index, int64_t h, int64_t w) {
  SampleParams sp;
  if (p.train && p.resized_crop) {
    SampleRng rng(sample_key(seed, epoch, index, kStreamResizedCrop));
    resized_crop_box(p, rng, h, w, sp);
  } else {
    center_box(p, h, w, sp);
  }
  if (!p.train) return sp;
  auto stream = [&](Stream s) { return SampleRng(sample_key(seed, epoch, index, s)); };
  if (p.flip) sp.flip = stream(kStreamFlip).bernoulli(0.5);
  if (p.vflip) sp.vflip = stream(kStreamVFlip).bernoulli(0.5);
  if (p.rotate) sp.angle_deg = stream(kStreamRotate).uniform(-p.rotate_degrees, p.rotate_degrees);
  if (p.translate) {
    SampleRng rng = stream(kStreamTranslate);
    double max_x = p.translate_frac * p.out_w, max_y = p.translate_frac * p.out_h;
    sp.shift_x = std::round(rng.uniform(-max_x, max_x));
    sp.shift_y = std::round(rng.uniform(-max_y, max_y));
  }
  if (p.crop) {
    SampleRng rng = stream(kStreamCrop);
    sp.crop_y = rng.below(2 * p.crop_padding + 1);
    sp.crop_x = rng.below(2 * p.crop_padding + 1);
  } else {
    sp.crop_y = sp.crop_x = p.crop_padding;
  }
  if (p.erase) {
    SampleRng rng = stream(kStreamErase);
    erase_box(p, rng, sp);
  }
  if (p.policy.kind == PolicyKind::kAugMix) {
    SampleRng rng = stream(kStreamPolicy);
    sp.augmix = draw_augmix(p.policy, rng, p.out_h, p.out_w);
  } else if (p.policy.kind != PolicyKind::kNone) {
    SampleRng rng = stream(kStreamPolicy);
    sp.ops = draw_policy(p.policy, rng, p.out_h, p.out_w);
  }
  if (p.policy.jitter) {
    SampleRng rng = stream(kStreamColorJitter);
    for (const OpDraw& d : draw_color_jitter(p.policy, rng)) sp.ops.push_back(d);
  }
  return sp;
}

}  // namespace dlrun::data
