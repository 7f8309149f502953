// `dlrun bench kernels [--device D] [--batch N] [--image-size S] [--dtype bf16|fp16|fp32]
//                      [--nchw] [--path dlrun|cudnn] [--repeat N] [--iters N] [--e2e-steps N] [--json]`
// dlrun's fused BatchNorm operators against PyTorch's unfused sequence on every conv-BN-ReLU
// (and conv-BN-add-ReLU block end) shape of ResNet-50, forward + backward:
//   - the whole unit: conv2d + batch_norm + relu_ (ATen; cuDNN on CUDA) vs dlrun::conv_bn_relu /
//     conv_bn_add_relu;
//   - the BatchNorm + ReLU part alone, from the conv's output: time, speedup, and the fused
//     kernels' achieved bandwidth — the bytes their passes move (forward: x twice, out once;
//     backward: dy, out and x twice, dx once; the residual once more each way) over the time —
//     against this device's measured copy bandwidth (a large tensor copied: read + write);
//   - then resnet50 training images/s with model.fused_conv_bn_relu on and off (two models in
//     one process, stepped in turn: on the CPU that comparison was found biased, and separate
//     `dlrun train` runs are the check there; docs/benchmarks.md).
// --path cudnn puts cuDNN's fused BatchNorm-activation (kernels/bn_cudnn.h) on the fused side
// instead of dlrun's kernels (CUDA, fp16/bf16, channels_last).
// Defaults follow the device: CUDA batch 256, 224x224, bf16, channels_last; CPU batch 8,
// 112x112, float32, channels_last (a CPU runs the same shapes, smaller). The shapes come from
// the model's definition (models::resnet_conv_bn_units, models/shapes.h).
#include <CLI/CLI.hpp>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/stats.h"
#include "cli/app.h"
#include "kernels/bn_cudnn.h"
#include "kernels/bn_path.h"
#include "kernels/ops.h"
#include "kernels/self_check.h"
#include "models/model.h"
#include "models/shapes.h"
#include "train/step/device.h"
#include "train/step/optim.h"
#include "train/step/step.h"

namespace dlrun::cli {
namespace {

struct BenchKernelsOptions {
  std::string device = "auto";
  int64_t batch = 0;       ///< 0: 256 on CUDA, 8 on the CPU
  int64_t image_size = 0;  ///< 0: 224 on CUDA, 112 on the CPU
  std::string dtype;       ///< "": bf16 on CUDA, fp32 on the CPU
  bool nchw = false;
  std::string path = "dlrun";  ///< the fused side: dlrun's kernels or cuDNN's fused operators
  int repeat = 5;
  int iters = 0;  ///< 0: 20 on CUDA, 3 on the CPU
  int e2e_steps = 0;  ///< 0: 50 on CUDA, 10 on the CPU
  bool no_e2e = false;  ///< leave out the resnet50 training comparison
  bool json = false;
};

/// One conv-BN-ReLU (tail: conv-BN-add-ReLU) of ResNet-50 and how many times the network has it.
using Unit = models::ConvBnUnit;

/// "tail 1x1 64->256 /1 @56": the unit's row name.
std::string unit_name(const Unit& u) {
  return fmt::format("{}{}x{} {}->{} /{} @{}", u.tail ? "tail " : "", u.k, u.k, u.in, u.out, u.stride, u.side);
}

/// PairedRounds (base/stats.h) as the output shows it.
using Paired = PairedRounds;
nlohmann::json spread_json(const Paired& p) {
  return {{"median", p.ratio()}, {"min", p.lo()}, {"max", p.hi()}, {"noisy", p.noisy()}};
}
/// "1.23x", or flagged as noise "1.23x?".
std::string speedup_text(const Paired& p) { return fmt::format("{:.2f}x{}", p.ratio(), p.noisy() ? "?" : ""); }

class Timer {
 public:
  explicit Timer(const torch::Device& d) : cuda_(d.is_cuda()) {}
  void sync() const {
#ifdef DLRUN_TORCH_HAS_CUDA
    if (cuda_) torch::cuda::synchronize();
#endif
  }
  /// Mean seconds per call of `f` over `iters` calls.
  template <typename F>
  double round(int iters, F&& f) const {
    sync();
    const double t0 = mono_now();
    for (int i = 0; i < iters; ++i) f();
    sync();
    return (mono_now() - t0) / iters;
  }
  /// `repeat` rounds of `a` and `b` taken in turn (a, b, a, b, ...: a drift in the machine's
  /// speed hits both alike), after two calls of each as warm-up (cuDNN's autotuning, the
  /// allocator's first blocks).
  template <typename A, typename B>
  Paired pair(int repeat, int iters, A&& a, B&& b) const {
    for (int i = 0; i < 2; ++i) {
      a();
      b();
    }
    Paired p;
    for (int r = 0; r < repeat; ++r) {
      p.a.push_back(round(iters, a));
      p.b.push_back(round(iters, b));
    }
    return p;
  }

 private:
  bool cuda_;
};

struct Bn {
  at::Tensor weight, bias, mean, var;
  Bn(int64_t c, const at::TensorOptions& o)
      : weight(at::ones({c}, o).requires_grad_(true)),
        bias(at::zeros({c}, o).requires_grad_(true)),
        mean(at::zeros({c}, o)),
        var(at::ones({c}, o)) {}
};

// Forward + backward of a unit's BatchNorm + ReLU part (from y, the conv output), unfused
// (batch_norm, [add_,] relu_ as torchvision's modules run it) or fused.
void bn_part(const at::Tensor& y, const at::Tensor& residual, Bn& bn, const at::Tensor& dz, bool fused) {
  at::Tensor z;
  if (fused && kernels::takes_cudnn_bn(y, bn.weight, bn.bias, bn.mean, bn.var, true, 1e-5)) {
    z = kernels::bn_act_cudnn_autograd(y, residual, bn.weight, bn.bias, bn.mean, bn.var, 0.1, 1e-5);
  } else if (fused) {
    z = residual.defined()
            ? std::get<0>(kernels::bn_add_relu(y, residual, bn.weight, bn.bias, bn.mean, bn.var, true, 0.1, 1e-5))
            : std::get<0>(kernels::bn_relu(y, bn.weight, bn.bias, bn.mean, bn.var, true, 0.1, 1e-5));
  } else {
    z = at::batch_norm(y, bn.weight, bn.bias, bn.mean, bn.var, true, 0.1, 1e-5, /*cudnn_enabled=*/true);
    if (residual.defined()) z = z.add_(residual);
    z = at::relu_(z);
  }
  std::vector<at::Tensor> wrt = {y, bn.weight, bn.bias};
  if (residual.defined()) wrt.push_back(residual);
  (void)torch::autograd::grad({z}, wrt, {dz});
}

// The whole unit: conv2d (no bias) then the BatchNorm part.
void whole_unit(const Unit& u, const at::Tensor& x, const at::Tensor& w, const at::Tensor& residual, Bn& bn,
                const at::Tensor& dz, bool fused) {
  const int64_t pad = u.pad;
  at::Tensor z;
  if (fused) {
    z = residual.defined() ? kernels::conv_bn_add_relu(x, w, residual, bn.weight, bn.bias, bn.mean, bn.var, true, 0.1,
                                                       1e-5, {u.stride, u.stride}, {pad, pad}, {1, 1}, 1)
                           : kernels::conv_bn_relu(x, w, bn.weight, bn.bias, bn.mean, bn.var, true, 0.1, 1e-5,
                                                   {u.stride, u.stride}, {pad, pad}, {1, 1}, 1);
  } else {
    z = at::batch_norm(at::conv2d(x, w, {}, u.stride, pad), bn.weight, bn.bias, bn.mean, bn.var, true, 0.1, 1e-5,
                       true);
    if (residual.defined()) z = z.add_(residual);
    z = at::relu_(z);
  }
  std::vector<at::Tensor> wrt = {w, bn.weight, bn.bias};
  if (x.requires_grad()) wrt.push_back(x);
  if (residual.defined()) wrt.push_back(residual);
  (void)torch::autograd::grad({z}, wrt, {dz});
}

/// Device-to-device (host memory to host memory on the CPU) copy bandwidth: read + write bytes
/// over the time of copying a large tensor.
double copy_bandwidth(const torch::Device& d, const Timer& timer, int repeat) {
  const int64_t bytes = d.is_cuda() ? (int64_t{1} << 30) : (int64_t{256} << 20);
  auto src = at::ones({bytes / 4}, at::TensorOptions().dtype(at::kFloat).device(d));
  auto dst = at::empty_like(src);
  dst.copy_(src);
  std::vector<double> v;
  for (int r = 0; r < repeat; ++r) v.push_back(timer.round(d.is_cuda() ? 10 : 3, [&] { dst.copy_(src); }));
  return 2.0 * static_cast<double>(bytes) / median(v);
}

/// resnet50 training step times (synthetic data, SGD) with the fused operators off and on: two
/// identical models, stepped in turn (at least 3 rounds of a few steps each way).
Paired e2e_step_times(const BenchKernelsOptions& o, const torch::Device& d, at::ScalarType dtype, int64_t batch,
                      int64_t image, int steps) {
  Config cfg;
  cfg.model.name = "resnet50";
  cfg.model.in_channels = 3;
  cfg.model.num_classes = 1000;
  cfg.model.channels_last = !o.nchw;
  cfg.amp.enabled = dtype != at::kFloat;
  cfg.amp.dtype = dtype == at::kHalf ? AmpDtype::kFp16 : AmpDtype::kBf16;
  cfg.optim.lr = 0.01;
  cfg.optim.momentum = 0.9;
  struct Rig {
    std::shared_ptr<models::Model> model;
    std::unique_ptr<torch::optim::Optimizer> optim;
    std::unique_ptr<train::StepRunner> runner;
  };
  auto rig = [&](bool fused) {
    Rig r;
    r.model = models::build(cfg.model, 0, image);
    r.model->to(d);
    r.model->train();
    r.model->use_fused_conv_bn_relu(fused);
    r.optim = train::build_optimizer(cfg.optim, *r.model);
    r.runner = std::make_unique<train::StepRunner>(cfg.train, cfg.amp, *r.model, *r.optim, d);
    return r;
  };
  Rig plain = rig(false), fused = rig(true);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  data::Batch b;
  b.x = at::randn({batch, 3, image, image}, gen).to(d);
  b.y = at::randint(0, 1000, {batch}, gen).to(d);
  const Timer timer(d);
  const int per_round = std::max(1, steps / 5);
  return timer.pair(std::max(3, steps / per_round), per_round,
                    [&] { (void)plain.runner->run({b}, 0.01).loss.item<double>(); },
                    [&] { (void)fused.runner->run({b}, 0.01).loss.item<double>(); });
}

at::ScalarType parse_dtype(const std::string& s) {
  if (s == "bf16") return at::kBFloat16;
  if (s == "fp16") return at::kHalf;
  if (s == "fp32") return at::kFloat;
  fail_input("--dtype {}: expected bf16, fp16 or fp32", s);
}

void bench_kernels(const BenchKernelsOptions& o) {
  Config cfg;
  cfg.run.device = o.device;
  const torch::Device d = train::place(cfg).device;
  const bool cuda = d.is_cuda();
  const int64_t batch = o.batch > 0 ? o.batch : (cuda ? 256 : 8);
  const int64_t image = o.image_size > 0 ? o.image_size : (cuda ? 224 : 112);
  const at::ScalarType dtype = parse_dtype(o.dtype.empty() ? (cuda ? "bf16" : "fp32") : o.dtype);
  DLRUN_CHECK_INPUT(cuda || dtype != at::kHalf, "--dtype fp16 needs a CUDA device");
  const int iters = o.iters > 0 ? o.iters : (cuda ? 20 : 3);
  const int e2e_steps = o.e2e_steps > 0 ? o.e2e_steps : (cuda ? 50 : 10);
  const auto format = o.nchw ? at::MemoryFormat::Contiguous : at::MemoryFormat::ChannelsLast;
  DLRUN_CHECK_INPUT(o.path == "dlrun" || o.path == "cudnn", "--path {}: expected dlrun or cudnn", o.path);
  if (o.path == "cudnn")
    DLRUN_CHECK_INPUT(cuda && kernels::cudnn_bn_takes(dtype, !o.nchw, 64, 1e-5, true, at::kFloat),
                      "--path cudnn: cuDNN's fused BatchNorm-activation takes fp16 or bf16 in channels_last on CUDA");
  // The fused side's path inside the CUDA operators (the models' conv_bn_relu included).
  kernels::set_cuda_bn_path(o.path == "cudnn" ? kernels::BnPath::kCudnn : kernels::BnPath::kDlrun);
  const auto act = at::TensorOptions().dtype(dtype).device(d);
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(d);
  const Timer timer(d);
  const double copy_bw = copy_bandwidth(d, timer, o.repeat);

  nlohmann::json rows = nlohmann::json::array();
  Paired unit_total, part_total;  // over the network, round by round, counts included
  int failed_units = 0;
  for (const Unit& u : models::resnet_conv_bn_units("resnet50", image)) {
    auto x = at::randn({batch, u.in, u.side, u.side}, act).contiguous(format).requires_grad_(u.in != 3);
    auto w = (at::randn({u.out, u.in, u.k, u.k}, act) * 0.05).contiguous(format).requires_grad_(true);
    const int64_t os = u.out_side();
    auto y = at::randn({batch, u.out, os, os}, act).contiguous(format).requires_grad_(true);
    auto r = u.tail ? at::randn({batch, u.out, os, os}, act).contiguous(format).requires_grad_(true) : at::Tensor();
    auto dz = at::randn({batch, u.out, os, os}, act).contiguous(format);
    Bn bn(u.out, f32);
    // Whose operators the fused side measures here: with --path cudnn, cuDNN's where it passed its
    // check for this dtype and channel count, else dlrun's kernels (named, never silently).
    const std::string measured =
        o.path != "cudnn" ? "dlrun"
        : kernels::takes_cudnn_bn(y, bn.weight, bn.bias, bn.mean, bn.var, true, 1e-5)
            ? "cudnn"
            : "dlrun (cuDNN refused)";
    Paired tu, tp;
    try {
      tu = timer.pair(
          o.repeat, iters, [&] { whole_unit(u, x, w, r, bn, dz, false); }, [&] { whole_unit(u, x, w, r, bn, dz, true); });
      tp = timer.pair(o.repeat, iters, [&] { bn_part(y, r, bn, dz, false); }, [&] { bn_part(y, r, bn, dz, true); });
    } catch (const std::exception& e) {  // a unit that fails is a result: the others are still measured
      const std::string what = e.what();
      rows.push_back({{"unit", unit_name(u)}, {"count", u.count}, {"path", measured},
                      {"error", what.substr(0, what.find('\n'))}});
      log::warn("bench kernels: {} failed: {}", unit_name(u), rows.back()["error"].get<std::string>());
      ++failed_units;
      continue;
    }
    const double bytes = static_cast<double>(y.numel()) * static_cast<double>(y.element_size()) * (u.tail ? 12 : 10);
    const double bw = bytes / tp.median_b();
    unit_total.accumulate(tu, static_cast<double>(u.count));
    part_total.accumulate(tp, static_cast<double>(u.count));
    rows.push_back({{"unit", unit_name(u)},
                    {"count", u.count},
                    {"path", measured},
                    {"shape", {batch, u.out, os, os}},
                    {"unit_ms_unfused", tu.median_a() * 1e3},
                    {"unit_ms_fused", tu.median_b() * 1e3},
                    {"unit_speedup", tu.ratio()},
                    {"unit_speedup_spread", spread_json(tu)},
                    {"unit_speedup_text", speedup_text(tu)},
                    {"bn_ms_unfused", tp.median_a() * 1e3},
                    {"bn_ms_fused", tp.median_b() * 1e3},
                    {"bn_speedup", tp.ratio()},
                    {"bn_speedup_spread", spread_json(tp)},
                    {"bn_speedup_text", speedup_text(tp)},
                    {"bn_fused_gb_per_s", bw / 1e9},
                    {"bn_fused_of_copy", bw / copy_bw}});
    if (!o.json) log::info("bench kernels: {} done ({} on the BN part)", unit_name(u), speedup_text(tp));
  }
  Paired e2e;
  std::string e2e_error;
  if (!o.no_e2e) {
    try {
      e2e = e2e_step_times(o, d, dtype, batch, image, e2e_steps);
    } catch (const std::exception& e) {
      e2e_error = e.what();
      e2e_error = e2e_error.substr(0, e2e_error.find('\n'));
      log::warn("bench kernels: the resnet50 training comparison failed: {}", e2e_error);
    }
  }
  const bool have_e2e = !e2e.a.empty();
  const double e2e_plain = have_e2e ? static_cast<double>(batch) / e2e.median_a() : 0.0;
  const double e2e_fused = have_e2e ? static_cast<double>(batch) / e2e.median_b() : 0.0;
  int noisy = (have_e2e && e2e.noisy()) + unit_total.noisy() + part_total.noisy();
  for (const auto& r : rows)
    if (!r.contains("error"))
      noisy += r["unit_speedup_spread"]["noisy"].get<bool>() + r["bn_speedup_spread"]["noisy"].get<bool>();
  const std::vector<std::string> refusals = kernels::cudnn_refusals();
  nlohmann::json j = {{"device", d.str()},
                      {"batch", batch},
                      {"image_size", image},
                      {"dtype", o.dtype.empty() ? (cuda ? "bf16" : "fp32") : o.dtype},
                      {"channels_last", !o.nchw},
                      {"path", o.path},
                      {"repeat", o.repeat},
                      {"iters", iters},
                      {"copy_gb_per_s", copy_bw / 1e9},
                      {"units", rows},
                      {"network_unit_speedup", unit_total.ratio()},
                      {"network_unit_speedup_spread", spread_json(unit_total)},
                      {"network_bn_speedup", part_total.ratio()},
                      {"network_bn_speedup_spread", spread_json(part_total)},
                      {"cudnn_refusals", refusals},
                      {"failed_units", failed_units},
                      {"noisy_figures", noisy}};
  if (have_e2e) {
    j["resnet50_images_per_s_unfused"] = e2e_plain;
    j["resnet50_images_per_s_fused"] = e2e_fused;
    j["resnet50_speedup"] = e2e.ratio();
    j["resnet50_speedup_spread"] = spread_json(e2e);
  } else if (!e2e_error.empty()) {
    j["resnet50_error"] = e2e_error;
  }
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("fused BatchNorm operators (%s) vs PyTorch's unfused sequence on %s: ResNet-50 shapes, batch %lld, "
              "%lldx%lld, %s, %s; forward + backward; %d rounds of %d calls each way; copy bandwidth %.1f GB/s\n",
              o.path == "cudnn" ? "cuDNN's fused BatchNorm-activation" : "dlrun's kernels", d.str().c_str(), static_cast<long long>(batch), static_cast<long long>(image),
              static_cast<long long>(image), j["dtype"].get<std::string>().c_str(),
              o.nchw ? "NCHW" : "channels_last", o.repeat, iters, copy_bw / 1e9);
  std::printf("%-28s %5s %10s %10s %8s %9s %9s %8s %8s %6s  %s\n", "unit", "count", "unit ms", "fused ms", "x",
              "BN ms", "fused ms", "x", "GB/s", "copy", "fused path");
  for (const auto& r : rows) {
    if (r.contains("error")) {
      std::printf("%-28s %5d  FAILED (%s): %s\n", r["unit"].get<std::string>().c_str(), r["count"].get<int>(),
                  r["path"].get<std::string>().c_str(), r["error"].get<std::string>().c_str());
      continue;
    }
    std::printf("%-28s %5d %10.3f %10.3f %8s %9.3f %9.3f %8s %8.1f %5.0f%%  %s\n", r["unit"].get<std::string>().c_str(),
                r["count"].get<int>(), r["unit_ms_unfused"].get<double>(), r["unit_ms_fused"].get<double>(),
                r["unit_speedup_text"].get<std::string>().c_str(), r["bn_ms_unfused"].get<double>(),
                r["bn_ms_fused"].get<double>(), r["bn_speedup_text"].get<std::string>().c_str(),
                r["bn_fused_gb_per_s"].get<double>(), 100 * r["bn_fused_of_copy"].get<double>(),
                r["path"].get<std::string>().c_str());
  }
  for (const auto& line : refusals) std::printf("%s: those rows measured dlrun's kernels\n", line.c_str());
  if (failed_units > 0) std::printf("%d unit(s) FAILED (above); the totals leave them out\n", failed_units);
  std::printf("over the network (each shape times its count): units %s (rounds %.2f-%.2f), BN+ReLU part %s (rounds "
              "%.2f-%.2f)\n",
              speedup_text(unit_total).c_str(), unit_total.lo(), unit_total.hi(), speedup_text(part_total).c_str(), part_total.lo(),
              part_total.hi());
  if (have_e2e)
    std::printf("resnet50 training: %.1f img/s unfused, %.1f img/s fused (%s, rounds %.2f-%.2f)\n", e2e_plain,
                e2e_fused, speedup_text(e2e).c_str(), e2e.lo(), e2e.hi());
  else if (!e2e_error.empty())
    std::printf("resnet50 training: FAILED: %s\n", e2e_error.c_str());
  if (noisy > 0)
    std::printf("%d figure(s) marked ? are noise, not results: their rounds' ratios spread wider than the effect "
                "(max - min > |x - 1|); raise --repeat or --iters, or quiet the machine\n",
                noisy);
}

}  // namespace

void setup_bench_kernels(CLI::App* bench) {
  auto o = std::make_shared<BenchKernelsOptions>();
  auto* cmd = bench->add_subcommand(
      "kernels", "fused BatchNorm+ReLU operators vs PyTorch's unfused sequence on ResNet-50's shapes, then end to end");
  cmd->add_option("--device", o->device, "auto | cpu | cuda | cuda:N");
  cmd->add_option("--batch", o->batch, "images per batch (default: 256 on CUDA, 8 on the CPU)")
      ->check(CLI::Range(2, 1 << 16));
  cmd->add_option("--image-size", o->image_size, "input side (default: 224 on CUDA, 112 on the CPU)")
      ->check(CLI::Range(32, 4096));
  cmd->add_option("--dtype", o->dtype, "bf16 | fp16 | fp32 (default: bf16 on CUDA, fp32 on the CPU)");
  cmd->add_flag("--nchw", o->nchw, "NCHW instead of channels_last");
  cmd->add_option("--path", o->path,
                  "the fused side: dlrun (dlrun's kernels, default) or cudnn (cuDNN's fused BatchNorm-activation; "
                  "CUDA, fp16/bf16, channels_last)");
  cmd->add_option("--repeat", o->repeat,
                  "timed rounds per measurement (the median is reported, with the rounds' spread; at least 3)")
      ->check(CLI::Range(3, 1000));
  cmd->add_option("--iters", o->iters, "calls per round (default: 20 on CUDA, 3 on the CPU)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--e2e-steps", o->e2e_steps, "resnet50 training steps timed each way, in 5 alternating rounds (default: 50 on CUDA, 10 on the CPU)")
      ->check(CLI::Range(1, 100000));
  cmd->add_flag("--no-e2e", o->no_e2e, "leave out the resnet50 training comparison (the operators alone)");
  cmd->add_flag("--json", o->json, "print JSON (one line)");
  cmd->callback([o] { bench_kernels(*o); });
}

}  // namespace dlrun::cli
