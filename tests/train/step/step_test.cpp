// One optimizer step (StepRunner): what it returns stays on the device, accumulation splits a
// batch exactly, non-finite steps are flagged (stop) or skipped (skip), clipping bounds the
// gradient norm, the moving average updated inside the step as a CUDA graph would capture it.
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <string>

#include "base/error.h"
#include "models/model.h"
#include "support/options.h"
#include "train/averaging/ema.h"
#include "train/step/memory.h"
#include "train/step/optim.h"
#include "train/step/step.h"

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
  CHECK_FALSE(out.skipped.defined());  // fp32 with nonfinite: stop never skips
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
    CHECK(out.nonfinite.item<bool>());  // the loop reads it when it reads anyway
    CHECK_FALSE(out.skipped.defined());
  }
  TrainOptions skip;
  skip.nonfinite = NonfinitePolicy::kSkip;
  Rig r{skip};
  const auto before = params_of(*r.model);
  const auto out = r.runner.run({nan_batch}, 0.1);
  CHECK(out.nonfinite.item<bool>());
  REQUIRE(out.skipped.defined());
  CHECK(out.skipped.item<bool>());  // decided on the device: the fused optimizer left the model alone
  CHECK_THAT(r.runner.skip_reason(), Catch::Contains("non-finite"));
  CHECK(same(before, params_of(*r.model)));
  const auto fine = r.runner.run({batch(8)}, 0.1);  // the next good step trains normally
  CHECK_FALSE(fine.skipped.item<bool>());
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

TEST_CASE("clipping by value clamps every gradient value, after the unscale, as clip_grad_value_ does",
          "[train][step]") {
  Rig free{TrainOptions{}};
  free.runner.run({batch(8)}, 0.1);
  double largest = 0;
  for (const auto& p : free.model->parameters()) largest = std::max(largest, p.grad().abs().max().item<double>());
  const double v = largest / 4;
  TrainOptions t;
  t.clip_grad_value = v;
  Rig clipped{t};
  clipped.runner.run({batch(8)}, 0.1);
  const auto a = free.model->parameters(), b = clipped.model->parameters();
  REQUIRE(a.size() == b.size());
  int64_t clamped = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(torch::equal(b[i].grad(), a[i].grad().clamp(-v, v)));
    clamped += a[i].grad().abs().gt(v).sum().item<int64_t>();
  }
  CHECK(clamped > 0);
}

TEST_CASE("clipping reuses the non-finite check's gradient norms: one read of the gradients, not two",
          "[train][step]") {
  // Without fp16 loss scaling the non-finite check computes every gradient's norm; clipping takes
  // those instead of computing them again (the same _foreach_norm of the same gradients).
  static std::atomic<int> norms{0};  // (the callback is a plain function: no captures)
  const auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
        if (std::string(fn.name()) == "aten::_foreach_norm") ++norms;
        return nullptr;
      }).scopes({at::RecordScope::FUNCTION}));
  auto count = [&](double clip) {
    TrainOptions t;
    t.clip_grad_norm = clip;
    Rig r{t};
    norms = 0;
    r.runner.run({batch(8)}, 0.1);
    return norms.load();
  };
  CHECK(count(0) == 1);     // the check alone
  CHECK(count(0.05) == 1);  // the check's norms, reused by clipping
  at::removeCallback(handle);
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

TEST_CASE("each family's smallest member takes a CPU step under bf16 autocast, channels_last where it has convs",
          "[train][amp]") {
  // Autocast reaches each family's own operators (depthwise and grouped convs, squeeze-excitation,
  // LayerNorm, attention, Swin's windows) without a dtype error: a step's loss is finite, the
  // weights stay float32 and move, finitely, and not as the float32 step moves them (autocast was
  // on). The evaluation logits are close to float32's. (A training step's loss is not compared:
  // at initialisation, with BatchNorm over 4 samples of 1x1 maps, EfficientNet's is chaotic
  // enough that bf16 rounding moves it by half.)
  const std::string name = GENERATE("mobilenet_v3_small", "efficientnet_b0", "regnet_y_400mf", "convnext_tiny",
                                    "vit_b_32", "swin_t");
  ModelOptions mo;
  mo.name = name;
  mo.in_channels = 3;
  mo.num_classes = 5;
  mo.image_size = 32;
  mo.stochastic_depth = 0;
  mo.channels_last = name.rfind("vit", 0) != 0 && name.rfind("swin", 0) != 0;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const data::Batch b{torch::randn({4, 3, 32, 32}, gen), torch::randint(0, 5, {4}, gen)};
  auto step = [&](bool bf16, torch::Tensor* logits) {
    auto model = models::build(mo, 7, 32);
    if (logits != nullptr) {
      model->eval();
      torch::NoGradGuard no_grad;
      at::autocast::set_autocast_enabled(at::kCPU, bf16);
      at::autocast::set_autocast_dtype(at::kCPU, torch::kBFloat16);
      *logits = model->forward(b.x).to(torch::kFloat32);
      at::autocast::set_autocast_enabled(at::kCPU, false);
      at::autocast::clear_cache();
      model->train();
    }
    auto opt = train::build_optimizer(sgd(), *model);
    AmpOptions amp;
    amp.enabled = bf16;
    amp.dtype = AmpDtype::kBf16;
    train::StepRunner runner(TrainOptions{}, amp, *model, *opt, torch::kCPU);
    const double loss = runner.run({b}, 0.1).loss.item<double>();
    CHECK(std::isfinite(loss));
    return params_of(*model);
  };
  torch::Tensor fp32_logits, bf16_logits;
  const auto fp32 = step(false, &fp32_logits), bf16 = step(true, &bf16_logits);
  const auto initial = params_of(*models::build(mo, 7, 32));
  INFO(name);
  CHECK_FALSE(same(initial, bf16));
  CHECK_FALSE(same(fp32, bf16));
  for (const auto& p : bf16) {
    CHECK(p.scalar_type() == torch::kFloat32);
    CHECK(torch::isfinite(p).all().item<bool>());
  }
  const double scale = fp32_logits.abs().max().item<double>();
  CHECK((bf16_logits - fp32_logits).abs().max().item<double>() <= 0.1 * scale);
}

namespace {

/// One fp16-style step by hand on the CPU with an active scaler: scaled backward, unscale,
/// an injected inf in one gradient when `poison`, the fused optimizer told to skip on the
/// device, the scale updated on the device. Returns found_inf.
double scaled_step(models::Model& m, torch::optim::Optimizer& opt, train::GradScaler& scaler, bool poison) {
  opt.zero_grad(true);
  const auto b = batch(8);
  scaler.scale(torch::nn::functional::cross_entropy(m.forward(b.x), b.y)).backward();
  std::vector<torch::Tensor> grads;
  for (auto& p : m.parameters()) grads.push_back(p.grad());
  if (poison) grads[0].view(-1)[0] = std::numeric_limits<float>::infinity();
  const auto found_inf = scaler.unscale_(grads);
  train::optimizer_step(opt, found_inf);
  scaler.update(found_inf);
  return found_inf.item<double>();
}

}  // namespace

TEST_CASE("the loss scaler on the device: an overflow backs off and skips, good steps grow it back", "[train][amp]") {
  for (const auto name : {OptimName::kSgd, OptimName::kAdamw}) {
    INFO((name == OptimName::kSgd ? "sgd" : "adamw"));
    auto model = models::build(mlp(), 3, 4);
    OptimOptions o = sgd();
    o.name = name;
    auto opt = train::build_optimizer(o, *model);
    AmpOptions amp;
    amp.init_scale = 1024;
    amp.growth_interval = 3;
    amp.growth_factor = 4;
    amp.backoff_factor = 0.25;
    train::GradScaler scaler(amp, true);
    REQUIRE(scaled_step(*model, *opt, scaler, false) == 0);  // a good step first: optimizer state exists
    const auto params = params_of(*model);
    const auto state = train::optimizer_state(o, *opt, *model);
    CHECK(scaled_step(*model, *opt, scaler, true) == 1);
    CHECK(scaler.scale_value() == 1024 * 0.25);
    CHECK(same(params, params_of(*model)));  // the update was skipped...
    const auto after = train::optimizer_state(o, *opt, *model);
    REQUIRE(after.size() == state.size());
    for (size_t i = 0; i < state.size(); ++i) {  // ...and the optimizer state untouched (AdamW's step too)
      INFO(state[i].first);
      CHECK(torch::equal(state[i].second, after[i].second));
    }
    for (int i = 0; i < 2; ++i) CHECK(scaled_step(*model, *opt, scaler, false) == 0);
    CHECK(scaler.scale_value() == 256);  // 2 good steps: not yet
    CHECK(scaled_step(*model, *opt, scaler, false) == 0);
    CHECK(scaler.scale_value() == 1024);  // the 3rd: grown by growth_factor
    CHECK_FALSE(same(params, params_of(*model)));
  }
}

TEST_CASE("the loss scaler's state: torch.amp.GradScaler's keys, round trip, older checkpoints", "[train][amp]") {
  AmpOptions amp;
  amp.init_scale = 512;
  amp.growth_interval = 10;
  train::GradScaler a(amp, true);
  a.update(torch::ones({}));  // back off: 256, tracker 0
  a.update(torch::zeros({}));  // tracker 1
  const auto j = a.state();
  CHECK(j == nlohmann::json{{"scale", 256.0}, {"growth_factor", 2.0}, {"backoff_factor", 0.5}, {"growth_interval", 10},
                            {"_growth_tracker", 1}});
  train::GradScaler b(amp, true);
  b.load_state(j);
  CHECK(b.state() == j);
  train::GradScaler old(amp, true);
  old.load_state({{"active", true}, {"scale", 128.0}, {"growth_tracker", 7}});  // dlrun before the device scaler
  CHECK(old.scale_value() == 128);
  CHECK(old.state()["_growth_tracker"] == 7);
  CHECK(train::GradScaler(amp, false).state() == nlohmann::json::object());  // inactive: {} as PyTorch's
}

TEST_CASE("a learning rate on the device gives the host form's updates bit for bit", "[train][optim]") {
  for (const auto name : {OptimName::kSgd, OptimName::kAdamw}) {
    auto run = [&](bool device_lr) {
      auto model = models::build(mlp(), 3, 4);
      OptimOptions o = sgd();
      o.name = name;
      o.weight_decay = 0.01;
      auto optim = train::build_optimizer(o, *model);
      if (device_lr) train::use_device_lr(*optim, torch::kCPU);
      train::StepRunner runner(TrainOptions{}, AmpOptions{}, *model, *optim, torch::kCPU);
      for (double lr : {0.1, 0.05, 0.0123}) runner.run({batch(8)}, lr);
      return params_of(*model);
    };
    INFO(name_of(name));
    REQUIRE(same(run(false), run(true)));
  }
}

TEST_CASE("train.cuda_graphs: what keeps a run from being captured is named", "[train][graphs]") {
  Config c;
  c.model = mlp();
  c.train.cuda_graphs = true;
  REQUIRE_THAT(train::cuda_graph_obstacle(c, torch::kCPU, false), Catch::Contains("not on a CUDA device") ||
                                                                       Catch::Contains("built without CUDA"));
#ifdef DLRUN_TORCH_HAS_CUDA
  const torch::Device cuda(torch::kCUDA, 0);  // a name only: nothing runs on it
  REQUIRE(train::cuda_graph_obstacle(c, cuda, false).empty());
  REQUIRE_THAT(train::cuda_graph_obstacle(c, cuda, true), Catch::Contains("process group"));
  Config accum = c;
  accum.train.grad_accum = 2;
  REQUIRE_THAT(train::cuda_graph_obstacle(accum, cuda, false), Catch::Contains("train.grad_accum"));
  Config recompute = c;
  recompute.model.activation_checkpointing = ActivationCheckpointing::kBlocks;
  REQUIRE_THAT(train::cuda_graph_obstacle(recompute, cuda, false), Catch::Contains("model.activation_checkpointing"));
  Config f64 = c;
  f64.model.dtype = ModelDtype::kFloat64;
  REQUIRE_THAT(train::cuda_graph_obstacle(f64, cuda, false), Catch::Contains("model.dtype"));
  Config split = c;
  split.train.micro_batch = MicroBatch::kAuto;
  REQUIRE_THAT(train::cuda_graph_obstacle(split, cuda, false), Catch::Contains("train.micro_batch: auto"));
#endif
  // use_cuda_graphs() on a CPU runner is refused (exit 2), not ignored
  Rig r{TrainOptions{}};
  REQUIRE_THROWS_AS(r.runner.use_cuda_graphs(), Error);
}

namespace {
/// DLRUN_FAULT set for one scope.
struct FaultScope {
  explicit FaultScope(const char* value) { ::setenv("DLRUN_FAULT", value, 1); }
  ~FaultScope() { ::unsetenv("DLRUN_FAULT"); }
};
}  // namespace

TEST_CASE("train.micro_batch: auto redoes a step that ran out of memory in finer pieces, as accumulation would",
          "[train][step][oom]") {
  ModelOptions m = mlp();
  m.dtype = ModelDtype::kFloat64;
  auto f64 = [](data::Batch b) { return data::Batch{b.x.to(torch::kFloat64), b.y}; };
  auto rig = [&](MicroBatch mode) {
    TrainOptions t;
    t.micro_batch = mode;
    auto model = models::build(m, 3, 4);
    auto optim = train::build_optimizer(sgd(), *model);
    auto runner = std::make_unique<train::StepRunner>(t, AmpOptions{}, *model, *optim, torch::kCPU);
    return std::make_tuple(model, std::move(optim), std::move(runner));
  };
  auto [split_model, split_optim, split] = rig(MicroBatch::kAuto);
  auto [accum_model, accum_optim, accum] = rig(MicroBatch::kOff);
  for (int step = 1; step <= 2; ++step) {
    torch::Tensor a;
    {
      FaultScope fault("oom_above:2");  // a device that holds 2 samples: 8 -> 4 -> 2 per piece
      a = split->run({f64(batch(8))}, 0.1, step).loss;
    }
    CHECK(split->micro_batches().split() == 4);
    const auto b = accum->run({f64(batch(2, 0)), f64(batch(2, 2)), f64(batch(2, 4)), f64(batch(2, 6))}, 0.1, step).loss;
    CHECK(a.item<double>() == b.item<double>());  // bitwise, in float64
    CHECK(same(params_of(*split_model), params_of(*accum_model)));
  }
  // Kept for later steps and for a checkpoint's value; never finer than single samples.
  split->micro_batches().set_split(64);
  split->run({f64(batch(8))}, 0.1, 3);
  CHECK(split->micro_batches().split() == 8);

  // Without auto, the error goes on (exit 1 at the top); nothing fits: exit 1 naming the splits.
  auto [m2, o2, off] = rig(MicroBatch::kOff);
  {
    FaultScope fault("oom_at_step:1");
    try {
      off->run({f64(batch(8))}, 0.1, 1);
      FAIL("no out-of-memory error");
    } catch (const c10::Error& e) {
      CHECK(train::is_out_of_memory(e));
    }
  }
  auto [m3, o3, never] = rig(MicroBatch::kAuto);
  {
    FaultScope fault("oom_above:0");
    try {
      never->run({f64(batch(8))}, 0.1, 1);
      FAIL("a step that never fits returned");
    } catch (const Error& e) {
      CHECK(e.code() == ExitCode::kRuntime);
      CHECK_THAT(std::string(e.what()), Catch::Contains("each micro-batch of 8 samples into 1, 2, 4, 8"));
    }
  }
}

TEST_CASE("the moving average updates inside the step; with device weights (a CUDA graph's form) bit for bit as eagerly",
          "[train][step][ema]") {
  // A convnet with BatchNorm (floating running statistics and an integer num_batches_tracked),
  // updated every 3rd step after a copy phase, with warmup: due and not-due steps, decays
  // below and above 0.5.
  TrainOptions t;
  t.ema_decay = 0.99;
  t.ema_every_steps = 3;
  t.ema_start_step = 2;
  t.ema_warmup = true;
  ModelOptions m;
  m.name = "convnet";
  m.width = 4;
  m.num_classes = 3;
  struct Run {
    std::shared_ptr<models::Model> model, average;
    std::unique_ptr<torch::optim::Optimizer> optim;
    std::unique_ptr<train::Ema> ema;
    std::unique_ptr<train::StepRunner> runner;
  };
  auto make = [&](bool device_weights) {
    Run r;
    r.model = models::build(m, 3, 4);
    r.average = models::build(m, 4, 4);  // other weights: the Ema copies the model's
    r.optim = train::build_optimizer(sgd(), *r.model);
    r.ema = std::make_unique<train::Ema>(t, *r.model, r.average);
    r.runner = std::make_unique<train::StepRunner>(t, AmpOptions{}, *r.model, *r.optim, torch::kCPU,
                                                   std::vector<train::StepHook*>{r.ema.get()});
    if (device_weights) r.ema->prepare_capture();  // what use_cuda_graphs() does on CUDA
    return r;
  };
  auto eager = make(false), device = make(true);
  auto tensors = [](models::Model& model) {
    std::vector<torch::Tensor> out;
    for (const auto& [name, value] : models::state_dict(model)) out.push_back(value.detach().clone());
    return out;
  };
  std::vector<torch::Tensor> before_step;
  for (int64_t step = 1; step <= 11; ++step) {
    before_step = tensors(*eager.average);
    eager.runner->run({batch(8)}, 0.1, step);
    device.runner->run({batch(8)}, 0.1, step);
    INFO("step " << step);
    CHECK(same(tensors(*eager.average), tensors(*device.average)));
    // The step updated the average exactly when due (the copy phase and every 3rd step).
    CHECK(same(before_step, tensors(*eager.average)) == (step % 3 != 0));
  }
  CHECK(eager.ema->updates() == 3);
  CHECK(device.ema->updates() == 3);
  CHECK(eager.ema->state() == device.ema->state());
  bool integer_buffers = false;
  // The integer buffer followed the model's at the last due step (9), not at 10 or 11.
  const auto avg = models::state_dict(*device.average), model = models::state_dict(*device.model);
  for (size_t i = 0; i < avg.size(); ++i)
    if (!avg[i].second.is_floating_point()) {
      integer_buffers = true;
      CHECK(avg[i].second.item<int64_t>() == 9);
      CHECK(model[i].second.item<int64_t>() == 11);
    }
  CHECK(integer_buffers);
}
