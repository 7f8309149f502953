// One optimizer step (StepRunner): what it returns stays on the device, accumulation splits a
// batch exactly, non-finite steps are flagged (stop) or skipped (skip), clipping bounds the
// gradient norm.
#include <ATen/autocast_mode.h>
#include <catch2/catch.hpp>

#include "base/error.h"
#include "models/model.h"
#include "support/options.h"
#include "train/optim.h"
#include "train/step.h"

using namespace dlrun;

namespace {

ModelOptions mlp() { return test::small_mlp(); }

OptimOptions sgd() {
  OptimOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  return o;
}

/// Samples [offset, offset + n) of one fixed set of 8.
data::Batch batch(int64_t n, int64_t offset = 0) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(42);
  auto x = torch::randn({8, 1, 4, 4}, gen).slice(0, offset, offset + n);
  auto y = torch::randint(0, 3, {8}, gen).slice(0, offset, offset + n);
  return {x.contiguous(), y.contiguous()};
}

std::vector<torch::Tensor> params_of(models::Model& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

struct Rig {
  std::shared_ptr<models::Model> model = models::build(mlp(), 3, 4);
  std::unique_ptr<torch::optim::Optimizer> optim;
  train::StepRunner runner;
  explicit Rig(const TrainOptions& t, OptimOptions o = sgd())
      : optim(train::build_optimizer(o, *model)), runner(t, AmpOptions{}, *model, *optim, torch::kCPU) {}
};

}  // namespace

TEST_CASE("a step returns its loss as a device tensor and updates the model", "[train][step]") {
  Rig r{TrainOptions{}};
  const auto b = batch(8);
  const double expected = torch::nn::functional::cross_entropy(r.model->forward(b.x), b.y).item<double>();
  const auto before = params_of(*r.model);
  const auto out = r.runner.run({b}, 0.05);
  CHECK(out.loss.scalar_type() == torch::kFloat64);
  CHECK(out.loss.dim() == 0);
  CHECK(out.loss.item<double>() == Approx(expected).epsilon(1e-6));
  CHECK_FALSE(out.nonfinite.item<bool>());
  CHECK_FALSE(out.nonfinite_read.has_value());  // nothing was read back inside the step
  CHECK_FALSE(out.skipped);
  CHECK_FALSE(same(before, params_of(*r.model)));
  for (auto& g : r.optim->param_groups()) CHECK(g.options().get_lr() == 0.05);
}

TEST_CASE("two accumulated half batches equal one full batch", "[train][step]") {
  Rig whole{TrainOptions{}};
  Rig halves{TrainOptions{}};
  const auto full = batch(8);
  const auto a = whole.runner.run({full}, 0.1);
  const auto b = halves.runner.run({batch(4, 0), batch(4, 4)}, 0.1);
  // The full batch's mean loss is the mean of the two halves' means (equal sizes).
  CHECK(a.loss.item<double>() == Approx(b.loss.item<double>()).epsilon(1e-6));
  const auto pa = params_of(*whole.model), pb = params_of(*halves.model);
  for (size_t i = 0; i < pa.size(); ++i) CHECK(torch::allclose(pa[i], pb[i], 1e-5, 1e-6));
}

TEST_CASE("non-finite steps: stop flags them on the device, skip leaves the model alone", "[train][step]") {
  auto nan_batch = batch(8);
  nan_batch.x[0][0][0][0] = std::numeric_limits<float>::quiet_NaN();
  {
    Rig r{TrainOptions{}};  // nonfinite: stop (the default)
    const auto out = r.runner.run({nan_batch}, 0.1);
    CHECK_FALSE(out.nonfinite_read.has_value());  // the loop reads it when it needs to
    CHECK(out.nonfinite.item<bool>());
    CHECK_FALSE(out.skipped);
  }
  TrainOptions skip;
  skip.nonfinite = NonfinitePolicy::kSkip;
  Rig r{skip};
  const auto before = params_of(*r.model);
  const auto out = r.runner.run({nan_batch}, 0.1);
  REQUIRE(out.nonfinite_read.has_value());
  CHECK(*out.nonfinite_read);
  CHECK(out.skipped);
  CHECK_THAT(out.skip_reason, Catch::Contains("non-finite"));
  CHECK(same(before, params_of(*r.model)));
  const auto fine = r.runner.run({batch(8)}, 0.1);  // the next good step trains normally
  CHECK_FALSE(fine.skipped);
  CHECK_FALSE(same(before, params_of(*r.model)));
}

TEST_CASE("clipping bounds the global gradient norm, on the device", "[train][step]") {
  auto grad_norm = [](models::Model& m) {
    double sq = 0;
    for (const auto& p : m.parameters()) sq += p.grad().pow(2).sum().item<double>();
    return std::sqrt(sq);
  };
  Rig free{TrainOptions{}};
  free.runner.run({batch(8)}, 0.1);
  REQUIRE(grad_norm(*free.model) > 0.05);
  TrainOptions t;
  t.clip_grad_norm = 0.05;
  Rig clipped{t};
  clipped.runner.run({batch(8)}, 0.1);
  CHECK(grad_norm(*clipped.model) == Approx(0.05).epsilon(1e-4));
  t.clip_grad_norm = 1e6;  // above the norm: the gradients are untouched
  Rig loose{t};
  loose.runner.run({batch(8)}, 0.1);
  CHECK(grad_norm(*loose.model) == Approx(grad_norm(*free.model)).epsilon(1e-6));
}

TEST_CASE("CPU bf16 autocast: matmuls in bf16 inside the scope, nested scopes restore the outer one", "[train][amp]") {
  const auto a = torch::randn({4, 8}), b = torch::randn({8, 3});
  REQUIRE(torch::mm(a, b).scalar_type() == torch::kFloat32);
  {
    train::AutocastScope outer(true, torch::kBFloat16, c10::DeviceType::CPU);
    CHECK(torch::mm(a, b).scalar_type() == torch::kBFloat16);
    {
      train::AutocastScope off(false, torch::kBFloat16, c10::DeviceType::CPU);  // disabled: changes nothing
      CHECK(torch::mm(a, b).scalar_type() == torch::kBFloat16);
    }
    {
      train::AutocastScope inner(true, torch::kHalf, c10::DeviceType::CPU);
      CHECK(at::autocast::get_autocast_dtype(at::kCPU) == torch::kHalf);
    }
    CHECK(at::autocast::get_autocast_dtype(at::kCPU) == torch::kBFloat16);
    CHECK(at::autocast::is_autocast_enabled(at::kCPU));
  }
  CHECK_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
  CHECK(torch::mm(a, b).scalar_type() == torch::kFloat32);
}

TEST_CASE("a CPU step under bf16 autocast computes a different, close loss; fp16 on the CPU is refused", "[train][amp]") {
  auto run = [](bool bf16) {
    auto model = models::build(mlp(), 7, 4);
    auto opt = train::build_optimizer(sgd(), *model);
    AmpOptions amp;
    amp.enabled = bf16;
    amp.dtype = AmpDtype::kBf16;
    train::StepRunner runner(TrainOptions{}, amp, *model, *opt, torch::kCPU);
    return runner.run({batch(8)}, 0.1).loss.item<double>();
  };
  const double fp32 = run(false), bf16 = run(true);
  CHECK(fp32 != bf16);  // autocast was on
  CHECK(std::abs(fp32 - bf16) < 0.05 * std::abs(fp32));
  auto model = models::build(mlp(), 7, 4);
  auto opt = train::build_optimizer(sgd(), *model);
  AmpOptions fp16;
  fp16.enabled = true;
  fp16.dtype = AmpDtype::kFp16;
  CHECK_THROWS_AS(train::StepRunner(TrainOptions{}, fp16, *model, *opt, torch::kCPU), Error);
}
