// MixUp and CutMix (train/step/mixing.h): the Beta draws, the choice between them, what each does
// to a batch and its targets, and that the step trains on the mixed batch against the mixed,
// smoothed targets. Against torchvision's MixUp and CutMix and timm's loss: tests/train/mixing_torchvision.py.
#include <catch2/catch.hpp>

#include <cmath>

#include "data/sample_rng.h"
#include "models/model.h"
#include "support/options.h"
#include "train/step/mixing.h"
#include "train/step/optim.h"
#include "train/step/step.h"

using namespace dlrun;
using train::MixDraw;

TEST_CASE("Beta(alpha, alpha) draws have the mean and variance of the distribution", "[train][mixing]") {
  for (const double alpha : {0.2, 1.0, 4.0}) {
    INFO("alpha " << alpha);
    const int n = 20000;
    double sum = 0, sq = 0;
    for (int i = 0; i < n; ++i) {
      const double b = train::beta_draw(data::mix64(static_cast<uint64_t>(i) + 1), alpha);
      REQUIRE(b >= 0.0);
      REQUIRE(b <= 1.0);
      sum += b;
      sq += b * b;
    }
    const double mean = sum / n, var = sq / n - mean * mean, want_var = 1.0 / (4.0 * (2.0 * alpha + 1.0));
    CHECK(std::abs(mean - 0.5) < 5 * std::sqrt(want_var / n));
    CHECK(var == Approx(want_var).epsilon(0.05));
  }
}

TEST_CASE("the choice of timm's Mixup: mix_prob, then CutMix with mix_switch_prob; keyed by the step", "[train][mixing]") {
  TrainOptions t;
  t.mixup_alpha = 0.2;
  t.cutmix_alpha = 1.0;
  t.mix_prob = 0.7;
  t.mix_switch_prob = 0.25;
  int none = 0, mixup = 0, cutmix = 0;
  const int n = 8000;
  for (int step = 1; step <= n; ++step) {
    const MixDraw d = train::draw_mix(t, 3, step, 0, 0, 24, 32);
    const MixDraw again = train::draw_mix(t, 3, step, 0, 0, 24, 32);
    REQUIRE(static_cast<int>(d.kind) == static_cast<int>(again.kind));
    REQUIRE(d.lam == again.lam);
    none += d.kind == MixDraw::Kind::kNone;
    mixup += d.kind == MixDraw::Kind::kMixUp;
    if (d.kind == MixDraw::Kind::kCutMix) {
      ++cutmix;
      REQUIRE(d.x1 >= 0);
      REQUIRE(d.x2 <= 32);
      REQUIRE(d.y1 >= 0);
      REQUIRE(d.y2 <= 24);
      REQUIRE(d.lam == 1.0 - static_cast<double>((d.x2 - d.x1) * (d.y2 - d.y1)) / (24.0 * 32.0));
    }
  }
  auto near = [&](int count, double p) { return std::abs(count - n * p) < 5 * std::sqrt(n * p * (1 - p)); };
  CHECK(near(none, 0.3));
  CHECK(near(mixup, 0.7 * 0.75));
  CHECK(near(cutmix, 0.7 * 0.25));
  // Another micro-batch, rank or seed draws anew.
  int differ = 0;
  for (int step = 1; step <= 50; ++step) {
    const double a = train::draw_mix(t, 3, step, 0, 0, 24, 32).lam;
    differ += a != train::draw_mix(t, 3, step, 1, 0, 24, 32).lam;
    differ += a != train::draw_mix(t, 3, step, 0, 1, 24, 32).lam;
    differ += a != train::draw_mix(t, 4, step, 0, 0, 24, 32).lam;
  }
  CHECK(differ > 100);
  // Off: never mixed.
  CHECK(train::draw_mix(TrainOptions{}, 3, 1, 0, 0, 8, 8).kind == MixDraw::Kind::kNone);
  t.mix_prob = 0;
  CHECK(train::draw_mix(t, 3, 1, 0, 0, 8, 8).kind == MixDraw::Kind::kNone);
}

TEST_CASE("MixUp blends each sample with the one before it; CutMix pastes its box", "[train][mixing]") {
  const auto x = torch::rand({4, 3, 6, 8});
  const auto y = torch::tensor({2, 0, 1, 2}, torch::kInt64);
  MixDraw d;
  d.kind = MixDraw::Kind::kMixUp;
  d.lam = 0.7;
  auto [mx, t] = train::apply_mix(d, x, y, 3);
  CHECK(torch::allclose(mx[1], 0.7 * x[1] + 0.3 * x[0]));
  CHECK(torch::allclose(mx[0], 0.7 * x[0] + 0.3 * x[3]));  // the first with the last
  CHECK(torch::allclose(t[0], torch::tensor({0.0f, 0.0f, 1.0f})));  // 0.7 of class 2, 0.3 of class 2
  CHECK(torch::allclose(t[1], torch::tensor({0.7f, 0.0f, 0.3f})));
  CHECK(torch::allclose(t.sum(1), torch::ones({4})));

  const MixDraw c = train::cutmix_box(0.5, 4, 3, 6, 8);  // r = 0.5 sqrt(0.5): half-sides 2 and 2
  CHECK((c.x1 == 2 && c.x2 == 6 && c.y1 == 1 && c.y2 == 5));
  CHECK(c.lam == 1.0 - 16.0 / 48.0);
  auto [cx, ct] = train::apply_mix(c, x, y, 3);
  using torch::indexing::Slice;
  CHECK(torch::equal(cx.index({Slice(1, 2), Slice(), Slice(1, 5), Slice(2, 6)}),
                     x.index({Slice(0, 1), Slice(), Slice(1, 5), Slice(2, 6)})));
  auto outside = torch::ones({6, 8}, torch::kBool);
  outside.index_put_({Slice(1, 5), Slice(2, 6)}, false);
  CHECK(torch::equal(cx.masked_select(outside), x.masked_select(outside)));
  CHECK(torch::allclose(ct[1], torch::tensor({static_cast<float>(c.lam), 0.0f, static_cast<float>(1 - c.lam)})));

  MixDraw none;
  auto [nx, nt] = train::apply_mix(none, x, y, 3);
  CHECK(nx.is_same(x));
  CHECK_FALSE(nt.defined());
}

TEST_CASE("a step with mixing trains on the mixed batch against the mixed, smoothed targets", "[train][mixing]") {
  TrainOptions t;
  t.mixup_alpha = 0.4;
  t.cutmix_alpha = 1.0;
  t.label_smoothing = 0.1;
  auto model = models::build(test::small_mlp(), 3, 4);
  OptimOptions o;
  o.lr = 0.1;
  auto optim = train::build_optimizer(o, *model);
  train::StepRunner runner(t, AmpOptions{}, *model, *optim, torch::kCPU);
  runner.use_mixing(5, 0, 3);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  int mixed = 0;
  for (int64_t step = 1; step <= 6; ++step) {
    data::Batch b{torch::randn({8, 1, 4, 4}, gen), torch::randint(0, 3, {8}, gen)};
    const MixDraw d = train::draw_mix(t, 5, step, 0, 0, 4, 4);
    mixed += d.kind != MixDraw::Kind::kNone;
    auto [mx, targets] = train::apply_mix(d, b.x, b.y, 3);
    // timm's mixup_target(smoothing) and SoftTargetCrossEntropy, written out.
    const auto probs = targets.defined() ? targets : torch::one_hot(b.y, 3).to(torch::kFloat32);
    const auto smooth = probs * (1 - 0.1) + 0.1 / 3;
    double want;
    {
      torch::NoGradGuard no_grad;
      want = (-(smooth * torch::log_softmax(model->forward(mx), 1)).sum(1)).mean().item<double>();
    }
    const auto r = runner.run({b}, 0.1, step);
    CHECK(r.loss.item<double>() == Approx(want).epsilon(1e-6));
  }
  CHECK(mixed == 6);  // mix_prob 1: every batch
}
