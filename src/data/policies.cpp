// The automatic augmentation policies (see policies.h): torchvision.transforms.v2's spaces,
// tables and sub-policies (_auto_augment.py), drawn with dlrun's per-sample streams.
#include "data/policies.h"

#include <algorithm>
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

// (base - (torch.arange(n) / ((n - 1) / k))).round().int(): float32, ties to even (base 8 for
// the policies, 4 for AugMix).
std::vector<double> posterize_bits(int64_t n, double k, float base = 8.0f) {
  std::vector<double> v;
  const float d = static_cast<float>(static_cast<double>(n - 1) / k);
  for (int64_t i = 0; i < n; ++i) v.push_back(std::nearbyint(base - static_cast<float>(i) / d));
  return v;
}

// AugMix's space (all_ops), in the order of its dictionary.
constexpr std::array<Op, 13> kAugMixSpace = {Op::kShearX,    Op::kShearY,   Op::kTranslateX,   Op::kTranslateY,
                                             Op::kRotate,    Op::kPosterize, Op::kSolarize,    Op::kAutoContrast,
                                             Op::kEqualize,  Op::kBrightness, Op::kColor,      Op::kContrast,
                                             Op::kSharpness};
constexpr int64_t kAugMixBins = 10;  // AugMix's _PARAMETER_MAX: every table has 10 bins

// torch._sample_dirichlet([alpha] * k) in float32: Gamma(alpha) draws, normalised.
std::vector<float> dirichlet(SampleRng& rng, double alpha, int64_t k) {
  std::vector<double> g(static_cast<size_t>(k));
  double sum = 0;
  for (double& x : g) sum += (x = rng.gamma(alpha));
  std::vector<float> out;
  for (double x : g) out.push_back(static_cast<float>(x / sum));
  return out;
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
  const bool augmix = kind == PolicyKind::kAugMix;
  if (op == Op::kHue) return s;  // color_jitter's alone
  if (op == Op::kInvert && kind != PolicyKind::kAutoAugment) return s;  // AutoAugment's alone
  if (op == Op::kIdentity && (kind == PolicyKind::kAutoAugment || augmix)) return s;
  s.present = true;
  // AugMix's translations reach a third of the side; the others' 150/331 of it (TrivialAugmentWide: 32 px).
  const double reach_x = augmix ? static_cast<double>(w) / 3.0 : 150.0 / 331.0 * static_cast<double>(w);
  const double reach_y = augmix ? static_cast<double>(h) / 3.0 : 150.0 / 331.0 * static_cast<double>(h);
  switch (op) {
    case Op::kShearX:
    case Op::kShearY: s.table = linspace(0.0, wide ? 0.99 : 0.3, bins); break;
    case Op::kTranslateX: s.table = linspace(0.0, wide ? 32.0 : reach_x, bins); break;
    case Op::kTranslateY: s.table = linspace(0.0, wide ? 32.0 : reach_y, bins); break;
    case Op::kRotate: s.table = linspace(0.0, wide ? 135.0 : 30.0, bins); break;
    case Op::kBrightness:
    case Op::kColor:
    case Op::kContrast:
    case Op::kSharpness: s.table = linspace(0.0, wide ? 0.99 : 0.9, bins); break;
    case Op::kPosterize: s.table = posterize_bits(bins, wide ? 6.0 : 4.0, augmix ? 4.0f : 8.0f); break;
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
    case PolicyKind::kAugMix: break;  // draw_augmix
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

AugMixDraw draw_augmix(const PolicyConfig& c, SampleRng& rng, int64_t h, int64_t w) {
  AugMixDraw d;
  const std::vector<float> m = dirichlet(rng, c.alpha, 2);
  d.original = m[0];
  d.mixed = m[1];
  d.shares = dirichlet(rng, c.alpha, c.width);
  for (int64_t i = 0; i < c.width; ++i) {
    const int64_t depth = c.depth > 0 ? c.depth : 1 + rng.below(3);
    std::vector<OpDraw> chain;
    for (int64_t k = 0; k < depth; ++k) {
      const Op op = kAugMixSpace.at(static_cast<size_t>(rng.below(static_cast<int64_t>(kAugMixSpace.size()))));
      const OpSpace s = op_space(PolicyKind::kAugMix, op, kAugMixBins, h, w);
      chain.push_back({op, s.table.empty() ? 0.0 : signed_value(s, rng.below(c.severity), rng)});
    }
    d.chains.push_back(std::move(chain));
  }
  return d;
}

void apply_augmix(const AugMixDraw& d, U8Image& img, Sampling sampling) {
  const size_t n = img.px.size();
  thread_local std::vector<float> mix;
  thread_local U8Image aug;
  mix.resize(n);
  for (size_t i = 0; i < n; ++i) mix[i] = d.original * static_cast<float>(img.px[i]);
  for (size_t k = 0; k < d.chains.size(); ++k) {
    aug = img;
    for (const OpDraw& op : d.chains[k]) apply_op(op.op, op.magnitude, aug, sampling);
    const float wk = d.shares[k] * d.mixed;  // combined_weights: float32
    for (size_t i = 0; i < n; ++i) mix[i] += wk * static_cast<float>(aug.px[i]);  // mix.add_(w * aug)
  }
  for (size_t i = 0; i < n; ++i) img.px[i] = static_cast<uint8_t>(mix[i]);  // .to(uint8): truncation
}

std::vector<OpDraw> draw_color_jitter(const PolicyConfig& c, SampleRng& rng) {
  std::array<int, 4> order = {0, 1, 2, 3};  // torch.randperm(4)
  for (int i = 3; i > 0; --i) std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(rng.below(i + 1))]);
  std::array<double, 4> factor{};
  for (size_t k = 0; k < 4; ++k) {
    const double v = c.jitter_values.at(k);
    if (!(v > 0)) continue;
    const double lo = k == 3 ? -v : std::max(0.0, 1.0 - v), hi = k == 3 ? v : 1.0 + v;
    factor[k] = static_cast<double>(static_cast<float>(rng.uniform(lo, hi)));  // torch.empty(1).uniform_(): float32
  }
  static constexpr Op kOps[4] = {Op::kBrightness, Op::kContrast, Op::kColor, Op::kHue};
  std::vector<OpDraw> out;
  for (int k : order)
    if (c.jitter_values.at(static_cast<size_t>(k)) > 0)
      out.push_back({kOps[k], k == 3 ? factor[static_cast<size_t>(k)] : factor[static_cast<size_t>(k)] - 1.0});
  return out;
}

PolicyConfig policy_config(const DataOptions& o, int64_t channels) {
  PolicyConfig c;
  for (const std::string& a : o.augment) {
    PolicyKind k = PolicyKind::kNone;
    if (a == "trivial_augment") k = PolicyKind::kTrivialAugment;
    else if (a == "rand_augment") k = PolicyKind::kRandAugment;
    else if (a == "auto_augment") k = PolicyKind::kAutoAugment;
    else if (a == "augmix") k = PolicyKind::kAugMix;
    else if (a == "color_jitter") c.jitter = true;
    if (k == PolicyKind::kNone) continue;
    DLRUN_CHECK_INPUT(c.kind == PolicyKind::kNone,
                      "data.augment: one automatic augmentation policy at a time (trivial_augment, rand_augment, "
                      "auto_augment, augmix), got more");
    c.kind = k;
  }
  if (c.kind == PolicyKind::kNone && !c.jitter) return c;
  DLRUN_CHECK_INPUT(channels == 1 || channels == 3,
                    "data.augment: the augmentation policies and color_jitter take images of 1 or 3 channels, this "
                    "data has {}", channels);
  c.severity = o.augmix_severity;
  c.width = o.augmix_width;
  c.depth = o.augmix_depth;
  c.alpha = o.augmix_alpha;
  c.jitter_values = o.color_jitter;
  if (c.jitter)
    DLRUN_CHECK_INPUT(c.jitter_values.size() == 4 && c.jitter_values[3] <= 0.5,
                      "data.color_jitter: expected [brightness, contrast, saturation, hue] with hue at most 0.5");
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
