// GPU paths of the step and the checkpoint snapshot (label `gpu`). Without a CUDA device each
// case prints "SKIP: no CUDA device" and ctest reports it skipped.
#include <catch2/catch.hpp>

#include <cstdio>

#include "support/gpu.h"

#include "config/loader.h"
#include "models/model.h"
#include "models/recompute.h"
#include "train/averaging/ema.h"
#include "train/live.h"
#include "train/step/optim.h"
#include "train/step/step.h"

using namespace dlrun;
using dlrun::testing::no_cuda;

namespace {

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
    // Each phase timed: host clock on the CPU, CUDA events on the GPU; take() empties.
    const auto phases = runner.take_phase_times();
    for (double t : phases) CHECK(t > 0);
    for (double t : runner.take_phase_times()) CHECK(t == 0);
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
  CHECK(runner.precision().scaler().scale_value() == Approx(0.5e38));
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
  CHECK_FALSE(runner.precision().scaler().active());
  const auto out = runner.run({batch(cuda)}, 0.1);
  CHECK_FALSE(out.skipped.defined());
  CHECK(std::isfinite(out.loss.item<double>()));
}

TEST_CASE("a snapshot of a CUDA model is a host copy in pinned memory", "[gpu][train][resume]") {
  if (no_cuda()) return;
  const torch::Device cuda(torch::kCUDA, 0);
  Config cfg = config::load_text("model: {name: convnet, width: 8, in_channels: 1, num_classes: 10}\n"
                                 "data: {name: synthetic, synthetic_shape: [1, 16, 16], synthetic_train_size: 64,\n"
                                 "       synthetic_eval_size: 16, batch_size: 16}\nrun: {device: cuda}\n",
                                 "gpu.yaml");
  dlrun::testing::Live live(cfg, cuda);
  const auto snap = live.snapshot();
  for (const auto& [name, t] : snap.tensor_files.at("model")) {
    CHECK(t.device().is_cpu());
    CHECK(t.is_pinned());
  }
  bool has_cuda_rng = false;
  for (const auto& [name, t] : snap.tensor_files.at("rng-rank00000")) has_cuda_rng |= name == "cuda";
  CHECK(has_cuda_rng);
}

// Replay and eager steps are compared exactly (1e-4), so both must be deterministic: on the H200
// (2026-11-26) AdamW's parameters differed beyond that between eager and replayed steps while
// SGD's did not, AdamW dividing gradients near zero by eps = 1e-8 and so amplifying the order of
// atomic adds. Hence deterministic cuDNN without autotuning, and 12x12 images: the convnet's two
// 2x2 max pools then leave 3x3, which its 3x3 adaptive average pool passes through, so that no
// pooling backward adds two contributions into one input. Two eager runs must agree first.
TEST_CASE("CUDA graphs: replayed steps train as eager steps do, the moving average updated inside them; a ragged "
          "batch runs eagerly",
          "[gpu][train][graphs]") {
  if (no_cuda()) return;
  const torch::Device cuda(torch::kCUDA, 0);
  auto& ctx = at::globalContext();
  const bool was_deterministic = ctx.deterministicCuDNN(), was_benchmark = ctx.benchmarkCuDNN();
  ctx.setDeterministicCuDNN(true);
  ctx.setBenchmarkCuDNN(false);
  constexpr int64_t kSide = 12;
  for (const auto name : {OptimName::kSgd, OptimName::kAdamw}) {
    for (const bool fp16 : {false, true}) {
      auto run = [&](bool graphs) {
        auto model = models::build(convnet(), 1, kSide);
        model->to(cuda);
        OptimOptions o;
        o.name = name;
        o.lr = 0.01;
        o.momentum = 0.9;
        auto optim = train::build_optimizer(o, *model);
        AmpOptions amp;
        amp.enabled = fp16;
        TrainOptions t;
        t.clip_grad_norm = 1.0;
        t.ema_decay = 0.9;  // updated at steps 2, 4 and 6: the last two only in replays of the graph
        t.ema_every_steps = 2;
        auto average = models::build(convnet(), 1, kSide);
        average->to(cuda);
        train::Ema ema(t, *model, average);
        train::StepRunner runner(t, amp, *model, *optim, cuda, {&ema});
        if (graphs) runner.use_cuda_graphs();
        auto gen = at::make_generator<at::CPUGeneratorImpl>(8);
        std::vector<double> losses;
        for (int s = 0; s < train::kGraphWarmupSteps + 4; ++s) {
          const int64_t n = s == train::kGraphWarmupSteps + 3 ? 7 : 16;  // the last batch is ragged
          data::Batch b{torch::randn({n, 1, kSide, kSide}, gen).to(cuda), torch::randint(0, 10, {n}, gen).to(cuda)};
          losses.push_back(runner.run({b}, 0.01 * (1.0 + s), s + 1).loss.item<double>());
        }
        if (graphs) CHECK(runner.graph_captured());
        CHECK(ema.updates() == 3);
        std::vector<torch::Tensor> params;
        for (const auto& p : model->parameters()) params.push_back(p.detach().cpu());
        for (const auto& [name, value] : models::state_dict(*average)) params.push_back(value.detach().cpu());
        return std::pair{losses, params};
      };
      INFO(name_of(name) << (fp16 ? " fp16" : " fp32"));
      const auto [l0, p0] = run(false);
      const auto [l0b, p0b] = run(false);
      {
        INFO("two eager runs (the reference is deterministic)");
        for (size_t i = 0; i < l0.size(); ++i) CHECK(l0b[i] == Approx(l0[i]).epsilon(1e-6));
        for (size_t i = 0; i < p0.size(); ++i) CHECK(torch::allclose(p0[i], p0b[i], 1e-6, 1e-7));
      }
      const auto [l1, p1] = run(true);
      for (size_t i = 0; i < l0.size(); ++i) CHECK(l1[i] == Approx(l0[i]).epsilon(1e-4));
      for (size_t i = 0; i < p0.size(); ++i) CHECK(torch::allclose(p0[i], p1[i], 1e-4, 1e-5));
    }
  }
  ctx.setDeterministicCuDNN(was_deterministic);
  ctx.setBenchmarkCuDNN(was_benchmark);
}

TEST_CASE("activation checkpointing on CUDA: the plain model's gradients", "[gpu][models][recompute]") {
  if (no_cuda()) return;
  const torch::Device cuda(torch::kCUDA, 0);
  auto grads = [&](ActivationCheckpointing ac) {
    ModelOptions o;
    o.name = "resnet18";
    o.in_channels = 3;
    o.stem = ResnetStem::kCifar;
    o.dropout = 0.2;
    o.activation_checkpointing = ac;
    auto model = models::build(o, 3, 16);
    model->to(cuda);
    at::globalContext().setDeterministicCuDNN(true);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(2);
    auto x = torch::randn({8, 3, 16, 16}, gen).to(cuda);
    auto y = torch::randint(0, 10, {8}, gen).to(cuda);
    torch::manual_seed(4);
    torch::nn::functional::cross_entropy(model->forward(x), y).backward();
    std::vector<torch::Tensor> g;
    for (const auto& p : model->parameters()) g.push_back(p.grad().cpu());
    return g;
  };
  const auto r0 = models::recomputations();
  const auto plain = grads(ActivationCheckpointing::kNone);
  CHECK(models::recomputations() == r0);
  const auto blocks = grads(ActivationCheckpointing::kBlocks);
  // Something was recomputed on CUDA: resnet18's 8 blocks, once each in the backward.
  CHECK(models::recomputations() - r0 >= 8);
  for (size_t i = 0; i < plain.size(); ++i) CHECK(torch::allclose(plain[i], blocks[i], 1e-5, 1e-6));
}
