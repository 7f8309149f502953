// GPU paths of the step and the checkpoint snapshot (label `gpu`). Without a CUDA device each
// case prints "SKIP: no CUDA device" and ctest reports it skipped.
#include <catch2/catch.hpp>

#include <cstdio>

#include "models/model.h"
#include "train/optim.h"
#include "train/resume.h"
#include "train/step.h"

using namespace dlrun;

namespace {

bool no_cuda() {
  if (torch::cuda::is_available()) return false;
  std::printf("SKIP: no CUDA device\n");
  return true;
}

ModelOptions convnet() {
  ModelOptions m;
  m.name = "convnet";
  m.width = 8;
  return m;
}

/// A small convnet and its optimizer on `device`.
struct Rig {
  std::shared_ptr<models::Model> model;
  std::unique_ptr<torch::optim::Optimizer> optim;
  explicit Rig(const torch::Device& device) : model(models::build(convnet(), 1, 16)) {
    model->to(device);
    optim = train::build_optimizer(OptimOptions{}, *model);
  }
};

data::Batch batch(const torch::Device& d) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  return {torch::randn({16, 1, 16, 16}, gen).to(d), torch::randint(0, 10, {16}, gen).to(d)};
}

}  // namespace

TEST_CASE("a CUDA step computes the CPU step's loss", "[gpu][train][step]") {
  if (no_cuda()) return;
  const torch::Device cuda(torch::kCUDA, 0);
  double losses[2];
  int i = 0;
  for (const torch::Device& d : {torch::Device(torch::kCPU), cuda}) {
    Rig r(d);
    train::StepRunner runner(TrainOptions{}, AmpOptions{}, *r.model, *r.optim, d);
    const auto out = runner.run({batch(d)}, 0.1);
    CHECK(out.loss.device() == d);
    losses[i++] = out.loss.item<double>();
  }
  CHECK(losses[1] == Approx(losses[0]).epsilon(1e-4));
}

TEST_CASE("fp16 autocast: an overflowing step is skipped and the loss scale halves", "[gpu][train][step]") {
  if (no_cuda()) return;
  const torch::Device cuda(torch::kCUDA, 0);
  Rig r(cuda);
  AmpOptions amp;
  amp.enabled = true;
  amp.init_scale = 1e38;  // scaled gradients overflow fp16 at once
  train::StepRunner runner(TrainOptions{}, amp, *r.model, *r.optim, cuda);
  const auto before = models::state_dict(*r.model)[0].second.clone();
  const auto out = runner.run({batch(cuda)}, 0.1);
  REQUIRE(out.skipped.defined());
  CHECK(out.skipped.device() == cuda);  // decided on the device
  CHECK(out.skipped.item<bool>());
  CHECK_THAT(runner.skip_reason(), Catch::Contains("fp16 gradient overflow"));
  CHECK(runner.scaler().scale_value() == Approx(0.5e38));
  CHECK(torch::equal(before, models::state_dict(*r.model)[0].second));
  CHECK_FALSE(out.nonfinite.item<bool>());  // the loss itself was finite
}

TEST_CASE("bf16 autocast trains without a loss scaler", "[gpu][train][step]") {
  if (no_cuda()) return;
  const torch::Device cuda(torch::kCUDA, 0);
  Rig r(cuda);
  AmpOptions amp;
  amp.enabled = true;
  amp.dtype = AmpDtype::kBf16;
  train::StepRunner runner(TrainOptions{}, amp, *r.model, *r.optim, cuda);
  CHECK_FALSE(runner.scaler().active());
  const auto out = runner.run({batch(cuda)}, 0.1);
  CHECK_FALSE(out.skipped.defined());
  CHECK(std::isfinite(out.loss.item<double>()));
}

TEST_CASE("a snapshot of a CUDA model is a host copy in pinned memory", "[gpu][train][resume]") {
  if (no_cuda()) return;
  const torch::Device cuda(torch::kCUDA, 0);
  Config cfg;
  cfg.model = convnet();
  auto model = models::build(cfg.model, 1, 16);
  model->to(cuda);
  auto optim = train::build_optimizer(cfg.optim, *model);
  train::GradScaler scaler(cfg.amp, false);
  const auto snap = train::make_snapshot(cfg, *model, *optim, scaler, {}, 10, cuda);
  for (const auto& [name, t] : snap.tensor_files.at("model")) {
    CHECK(t.device().is_cpu());
    CHECK(t.is_pinned());
  }
  bool has_cuda_rng = false;
  for (const auto& [name, t] : snap.tensor_files.at("rng-rank00000")) has_cuda_rng |= name == "cuda";
  CHECK(has_cuda_rng);
}
