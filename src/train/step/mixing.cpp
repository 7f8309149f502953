// MixUp and CutMix (see mixing.h).
#include "train/step/mixing.h"

#include <algorithm>
#include <cmath>

#include "data/sample_rng.h"

namespace dlrun::train {
namespace {

double beta(data::SampleRng& rng, double alpha) {
  const double x = rng.gamma(alpha), y = rng.gamma(alpha);
  return x / (x + y);
}

}  // namespace

double beta_draw(uint64_t key, double alpha) {
  data::SampleRng rng(key);
  return beta(rng, alpha);
}

MixDraw cutmix_box(double lam, int64_t r_x, int64_t r_y, int64_t h, int64_t w) {
  MixDraw d;
  d.kind = MixDraw::Kind::kCutMix;
  const double r = 0.5 * std::sqrt(1.0 - lam);
  const auto rw = static_cast<int64_t>(r * static_cast<double>(w)), rh = static_cast<int64_t>(r * static_cast<double>(h));
  d.x1 = std::max<int64_t>(r_x - rw, 0);
  d.y1 = std::max<int64_t>(r_y - rh, 0);
  d.x2 = std::min<int64_t>(r_x + rw, w);
  d.y2 = std::min<int64_t>(r_y + rh, h);
  d.lam = 1.0 - static_cast<double>((d.x2 - d.x1) * (d.y2 - d.y1)) / static_cast<double>(w * h);
  return d;
}

MixDraw draw_mix(const TrainOptions& t, uint64_t seed, int64_t step, int64_t micro, int64_t rank, int64_t h,
                 int64_t w) {
  if (!mixing(t)) return {};
  data::SampleRng rng(data::sample_key(seed, step, (rank << 20) + micro, data::kStreamMix));
  if (!(rng.uniform() < t.mix_prob)) return {};
  const bool mixup = t.mixup_alpha > 0, cutmix = t.cutmix_alpha > 0;
  const bool use_cutmix = cutmix && (!mixup || rng.uniform() < t.mix_switch_prob);
  const double lam = beta(rng, use_cutmix ? t.cutmix_alpha : t.mixup_alpha);
  if (!use_cutmix) {
    MixDraw d;
    d.kind = MixDraw::Kind::kMixUp;
    d.lam = lam;
    return d;
  }
  const int64_t r_x = rng.below(w), r_y = rng.below(h);
  return cutmix_box(lam, r_x, r_y, h, w);
}

std::pair<torch::Tensor, torch::Tensor> apply_mix(const MixDraw& d, const torch::Tensor& x, const torch::Tensor& y,
                                                  int64_t classes) {
  if (d.kind == MixDraw::Kind::kNone) return {x, torch::Tensor()};
  torch::NoGradGuard no_grad;
  // torchvision's _mixup_label: one_hot, float, rolled * (1 - lam) + itself * lam.
  const auto hot = torch::nn::functional::one_hot(y, classes).to(torch::kFloat32);
  auto targets = hot.roll(1, 0).mul_(1.0 - d.lam).add_(hot.mul(d.lam));
  if (d.kind == MixDraw::Kind::kMixUp) return {x.roll(1, 0).mul_(1.0 - d.lam).add_(x.mul(d.lam)), targets};
  using torch::indexing::Slice;
  auto out = x.clone();
  const auto box = {torch::indexing::TensorIndex(torch::indexing::Ellipsis), torch::indexing::TensorIndex(Slice(d.y1, d.y2)),
                    torch::indexing::TensorIndex(Slice(d.x1, d.x2))};
  out.index_put_(box, x.roll(1, 0).index(box));
  return {out, targets};
}

}  // namespace dlrun::train
