// The automatic augmentation policies (see policies.h): torchvision.transforms.v2's spaces,
// tables and sub-policies (_auto_augment.py), drawn with dlrun's per-sample streams.
#include "data/policies.h"

#include <array>
#include <cmath>
#include <string>

#include "base/error.h"

namespace dlrun::data {
namespace {

using Op = ImageOp;

// torch.linspace(start, end, n) in float32 as ATen's CPU kernel computes it: the step in float32,
// the first half start + step * i and the second end - step * (n - 1 - i), each one fused
// multiply-add (its compiled scalar loop; equal to torch's for every table here, a test checks).
std::vector<double> linspace(double start, double end, int64_t n) {
  const float a = static_cast<float>(start), b = static_cast<float>(end);
  const float step = n > 1 ? (b - a) / static_cast<float>(n - 1) : 0.0f;
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i)
    v.push_back(i < n / 2 ? std::fma(step, static_cast<float>(i), a)
                          : std::fma(-step, static_cast<float>(n - 1 - i), b));
  return v;
}

// (8 - (torch.arange(n) / ((n - 1) / k))).round().int(): float32, ties to even.
std::vector<double> posterize_bits(int64_t n, double k) {
  std::vector<double> v;
  const float d = static_cast<float>(static_cast<double>(n - 1) / k);
  for (int64_t i = 0; i < n; ++i) v.push_back(std::nearbyint(8.0f - static_cast<float>(i) / d));
  return v;
}

struct Step {
  Op op;
  double p;
  int magnitude;  // a bin of the 10-bin table, -1: none
};
using SubPolicy = std::array<Step, 2>;

const std::vector<SubPolicy>& sub_policies(AutoAugmentPolicy which) {
  constexpr int N = -1;
  static const std::vector<SubPolicy> imagenet = {
      {{{Op::kPosterize, 0.4, 8}, {Op::kRotate, 0.6, 9}}},      {{{Op::kSolarize, 0.6, 5}, {Op::kAutoContrast, 0.6, N}}},
      {{{Op::kEqualize, 0.8, N}, {Op::kEqualize, 0.6, N}}},     {{{Op::kPosterize, 0.6, 7}, {Op::kPosterize, 0.6, 6}}},
      {{{Op::kEqualize, 0.4, N}, {Op::kSolarize, 0.2, 4}}},     {{{Op::kEqualize, 0.4, N}, {Op::kRotate, 0.8, 8}}},
      {{{Op::kSolarize, 0.6, 3}, {Op::kEqualize, 0.6, N}}},     {{{Op::kPosterize, 0.8, 5}, {Op::kEqualize, 1.0, N}}},
      {{{Op::kRotate, 0.2, 3}, {Op::kSolarize, 0.6, 8}}},       {{{Op::kEqualize, 0.6, N}, {Op::kPosterize, 0.4, 6}}},
      {{{Op::kRotate, 0.8, 8}, {Op::kColor, 0.4, 0}}},          {{{Op::kRotate, 0.4, 9}, {Op::kEqualize, 0.6, N}}},
      {{{Op::kEqualize, 0.0, N}, {Op::kEqualize, 0.8, N}}},     {{{Op::kInvert, 0.6, N}, {Op::kEqualize, 1.0, N}}},
      {{{Op::kColor, 0.6, 4}, {Op::kContrast, 1.0, 8}}},        {{{Op::kRotate, 0.8, 8}, {Op::kColor, 1.0, 2}}},
      {{{Op::kColor, 0.8, 8}, {Op::kSolarize, 0.8, 7}}},        {{{Op::kSharpness, 0.4, 7}, {Op::kInvert, 0.6, N}}},
      {{{Op::kShearX, 0.6, 5}, {Op::kEqualize, 1.0, N}}},       {{{Op::kColor, 0.4, 0}, {Op::kEqualize, 0.6, N}}},
      {{{Op::kEqualize, 0.4, N}, {Op::kSolarize, 0.2, 4}}},     {{{Op::kSolarize, 0.6, 5}, {Op::kAutoContrast, 0.6, N}}},
      {{{Op::kInvert, 0.6, N}, {Op::kEqualize, 1.0, N}}},       {{{Op::kColor, 0.6, 4}, {Op::kContrast, 1.0, 8}}},
      {{{Op::kEqualize, 0.8, N}, {Op::kEqualize, 0.6, N}}},
  };
  static const std::vector<SubPolicy> cifar10 = {
      {{{Op::kInvert, 0.1, N}, {Op::kContrast, 0.2, 6}}},       {{{Op::kRotate, 0.7, 2}, {Op::kTranslateX, 0.3, 9}}},
      {{{Op::kSharpness, 0.8, 1}, {Op::kSharpness, 0.9, 3}}},   {{{Op::kShearY, 0.5, 8}, {Op::kTranslateY, 0.7, 9}}},
      {{{Op::kAutoContrast, 0.5, N}, {Op::kEqualize, 0.9, N}}}, {{{Op::kShearY, 0.2, 7}, {Op::kPosterize, 0.3, 7}}},
      {{{Op::kColor, 0.4, 3}, {Op::kBrightness, 0.6, 7}}},      {{{Op::kSharpness, 0.3, 9}, {Op::kBrightness, 0.7, 9}}},
      {{{Op::kEqualize, 0.6, N}, {Op::kEqualize, 0.5, N}}},     {{{Op::kContrast, 0.6, 7}, {Op::kSharpness, 0.6, 5}}},
      {{{Op::kColor, 0.7, 7}, {Op::kTranslateX, 0.5, 8}}},      {{{Op::kEqualize, 0.3, N}, {Op::kAutoContrast, 0.4, N}}},
      {{{Op::kTranslateY, 0.4, 3}, {Op::kSharpness, 0.2, 6}}},  {{{Op::kBrightness, 0.9, 6}, {Op::kColor, 0.2, 8}}},
      {{{Op::kSolarize, 0.5, 2}, {Op::kInvert, 0.0, N}}},       {{{Op::kEqualize, 0.2, N}, {Op::kAutoContrast, 0.6, N}}},
      {{{Op::kEqualize, 0.2, N}, {Op::kEqualize, 0.6, N}}},     {{{Op::kColor, 0.9, 9}, {Op::kEqualize, 0.6, N}}},
      {{{Op::kAutoContrast, 0.8, N}, {Op::kSolarize, 0.2, 8}}}, {{{Op::kBrightness, 0.1, 3}, {Op::kColor, 0.7, 0}}},
      {{{Op::kSolarize, 0.4, 5}, {Op::kAutoContrast, 0.9, N}}}, {{{Op::kTranslateY, 0.9, 9}, {Op::kTranslateY, 0.7, 9}}},
      {{{Op::kAutoContrast, 0.9, N}, {Op::kSolarize, 0.8, 3}}}, {{{Op::kEqualize, 0.8, N}, {Op::kInvert, 0.1, N}}},
      {{{Op::kTranslateY, 0.7, 9}, {Op::kAutoContrast, 0.9, N}}},
  };
  static const std::vector<SubPolicy> svhn = {
      {{{Op::kShearX, 0.9, 4}, {Op::kInvert, 0.2, N}}},         {{{Op::kShearY, 0.9, 8}, {Op::kInvert, 0.7, N}}},
      {{{Op::kEqualize, 0.6, N}, {Op::kSolarize, 0.6, 6}}},     {{{Op::kInvert, 0.9, N}, {Op::kEqualize, 0.6, N}}},
      {{{Op::kEqualize, 0.6, N}, {Op::kRotate, 0.9, 3}}},       {{{Op::kShearX, 0.9, 4}, {Op::kAutoContrast, 0.8, N}}},
      {{{Op::kShearY, 0.9, 8}, {Op::kInvert, 0.4, N}}},         {{{Op::kShearY, 0.9, 5}, {Op::kSolarize, 0.2, 6}}},
      {{{Op::kInvert, 0.9, N}, {Op::kAutoContrast, 0.8, N}}},   {{{Op::kEqualize, 0.6, N}, {Op::kRotate, 0.9, 3}}},
      {{{Op::kShearX, 0.9, 4}, {Op::kSolarize, 0.3, 3}}},       {{{Op::kShearY, 0.8, 8}, {Op::kInvert, 0.7, N}}},
      {{{Op::kEqualize, 0.9, N}, {Op::kTranslateY, 0.6, 6}}},   {{{Op::kInvert, 0.9, N}, {Op::kEqualize, 0.6, N}}},
      {{{Op::kContrast, 0.3, 3}, {Op::kRotate, 0.8, 4}}},       {{{Op::kInvert, 0.8, N}, {Op::kTranslateY, 0.0, 2}}},
      {{{Op::kShearY, 0.7, 6}, {Op::kSolarize, 0.4, 8}}},       {{{Op::kInvert, 0.6, N}, {Op::kRotate, 0.8, 4}}},
      {{{Op::kShearY, 0.3, 7}, {Op::kTranslateX, 0.9, 3}}},     {{{Op::kShearX, 0.1, 6}, {Op::kInvert, 0.6, N}}},
      {{{Op::kSolarize, 0.7, 2}, {Op::kTranslateY, 0.6, 7}}},   {{{Op::kShearY, 0.8, 4}, {Op::kInvert, 0.8, N}}},
      {{{Op::kShearX, 0.7, 9}, {Op::kTranslateY, 0.8, 3}}},     {{{Op::kShearY, 0.8, 5}, {Op::kAutoContrast, 0.7, N}}},
      {{{Op::kShearX, 0.7, 2}, {Op::kInvert, 0.1, N}}},
  };
  switch (which) {
    case AutoAugmentPolicy::kCifar10: return cifar10;
    case AutoAugmentPolicy::kSvhn: return svhn;
    default: return imagenet;
  }
}

// The value of a drawn bin, negated with probability 1/2 when signed (torch.rand(()) <= 0.5).
double signed_value(const OpSpace& s, int64_t bin, SampleRng& rng) {
  if (s.table.empty()) return 0.0;
  double m = s.table.at(static_cast<size_t>(bin));
  if (s.is_signed && rng.uniform() <= 0.5) m = -m;
  return m;
}

}  // namespace

OpSpace op_space(PolicyKind kind, ImageOp op, int64_t bins, int64_t h, int64_t w) {
  OpSpace s;
  const bool wide = kind == PolicyKind::kTrivialAugment;
  if (kind == PolicyKind::kNone) return s;
  if (op == Op::kInvert && kind != PolicyKind::kAutoAugment) return s;  // AutoAugment's alone
  if (op == Op::kIdentity && kind == PolicyKind::kAutoAugment) return s;
  s.present = true;
  switch (op) {
    case Op::kShearX:
    case Op::kShearY: s.table = linspace(0.0, wide ? 0.99 : 0.3, bins); break;
    case Op::kTranslateX: s.table = linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * static_cast<double>(w), bins); break;
    case Op::kTranslateY: s.table = linspace(0.0, wide ? 32.0 : 150.0 / 331.0 * static_cast<double>(h), bins); break;
    case Op::kRotate: s.table = linspace(0.0, wide ? 135.0 : 30.0, bins); break;
    case Op::kBrightness:
    case Op::kColor:
    case Op::kContrast:
    case Op::kSharpness: s.table = linspace(0.0, wide ? 0.99 : 0.9, bins); break;
    case Op::kPosterize: s.table = posterize_bits(bins, wide ? 6.0 : 4.0); break;
    case Op::kSolarize: s.table = linspace(1.0, 0.0, bins); break;
    default: break;
  }
  s.is_signed = !s.table.empty() && op != Op::kPosterize && op != Op::kSolarize;
  return s;
}

std::vector<OpDraw> draw_policy(const PolicyConfig& c, SampleRng& rng, int64_t h, int64_t w) {
  std::vector<OpDraw> out;
  // TrivialAugmentWide's and RandAugment's space: every op but Invert, in torchvision's order.
  constexpr int64_t kSpace = static_cast<int64_t>(Op::kEqualize) + 1;
  switch (c.kind) {
    case PolicyKind::kNone: break;
    case PolicyKind::kTrivialAugment: {
      const auto op = static_cast<Op>(rng.below(kSpace));
      const OpSpace s = op_space(c.kind, op, c.bins, h, w);
      const int64_t bin = rng.below(c.bins);
      out.push_back({op, signed_value(s, bin, rng)});
      break;
    }
    case PolicyKind::kRandAugment:
      for (int64_t i = 0; i < c.num_ops; ++i) {
        const auto op = static_cast<Op>(rng.below(kSpace));
        out.push_back({op, signed_value(op_space(c.kind, op, c.bins, h, w), c.magnitude, rng)});
      }
      break;
    case PolicyKind::kAutoAugment: {
      const auto& subs = sub_policies(c.auto_policy);
      const SubPolicy& sub = subs.at(static_cast<size_t>(rng.below(static_cast<int64_t>(subs.size()))));
      for (const Step& step : sub) {
        if (!(rng.uniform() <= step.p)) continue;
        const OpSpace s = op_space(c.kind, step.op, 10, h, w);
        out.push_back({step.op, step.magnitude < 0 ? 0.0 : signed_value(s, step.magnitude, rng)});
      }
      break;
    }
  }
  return out;
}

PolicyConfig policy_config(const DataOptions& o, int64_t channels) {
  PolicyConfig c;
  for (const std::string& a : o.augment) {
    PolicyKind k = PolicyKind::kNone;
    if (a == "trivial_augment") k = PolicyKind::kTrivialAugment;
    else if (a == "rand_augment") k = PolicyKind::kRandAugment;
    else if (a == "auto_augment") k = PolicyKind::kAutoAugment;
    if (k == PolicyKind::kNone) continue;
    DLRUN_CHECK_INPUT(c.kind == PolicyKind::kNone,
                      "data.augment: one automatic augmentation policy at a time (trivial_augment, rand_augment, "
                      "auto_augment), got more");
    c.kind = k;
  }
  if (c.kind == PolicyKind::kNone) return c;
  DLRUN_CHECK_INPUT(channels == 1 || channels == 3,
                    "data.augment: the augmentation policies take images of 1 or 3 channels, this data has {}",
                    channels);
  c.bins = o.magnitude_bins;
  c.num_ops = o.rand_augment_ops;
  c.magnitude = o.rand_augment_magnitude;
  c.auto_policy = o.auto_augment_policy;
  c.sampling = o.policy_interpolation == PolicyInterpolation::kBilinear ? Sampling::kBilinear : Sampling::kNearest;
  if (c.kind == PolicyKind::kRandAugment)
    DLRUN_CHECK_INPUT(c.magnitude < c.bins,
                      "data.rand_augment_magnitude: {} is outside the tables of data.magnitude_bins {} (0 to {})",
                      c.magnitude, c.bins, c.bins - 1);
  return c;
}

}  // namespace dlrun::data
