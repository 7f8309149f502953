// The capability check and the fused-kernel self-check (see self_check.h).
#include "kernels/self_check.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <sstream>

#include "base/error.h"
#include "base/fault.h"
#include "base/log.h"
#include "kernels/bn_cudnn.h"
#include "kernels/bn_path.h"
#include "kernels/ops.h"
#include "kernels/reference.h"

namespace dlrun::kernels {

namespace {

struct Arch {
  int cc = 0;             ///< 75 for sm_75, 120 for compute_120
  bool ptx = false;       ///< compute_XY
  bool exact = false;     ///< sm_XYa: this capability only
  std::string name;
};

std::vector<Arch> parse_archs(const std::string& archs) {
  std::vector<Arch> out;
  std::istringstream in(archs);
  std::string w;
  while (in >> w) {
    const bool ptx = w.rfind("compute_", 0) == 0;
    if (!ptx && w.rfind("sm_", 0) != 0) continue;
    std::string num = w.substr(ptx ? 8 : 3);
    const bool exact = !num.empty() && num.back() == 'a';
    if (!num.empty() && (num.back() == 'a' || num.back() == 'f')) num.pop_back();
    const int cc = std::atoi(num.c_str());
    if (cc > 0) out.push_back({cc, ptx, exact, w});
  }
  return out;
}

}  // namespace

ArchVerdict fused_kernels_run_on(int major, int minor, const std::string& archs) {
  const int device = major * 10 + minor;
  const auto all = parse_archs(archs);
  const Arch* best = nullptr;
  for (const auto& a : all) {
    if (a.ptx) continue;
    const bool fits = a.exact ? a.cc == device : (a.cc / 10 == major && a.cc % 10 <= minor);
    if (fits && (best == nullptr || a.cc > best->cc)) best = &a;
  }
  if (best != nullptr) return {true, best->name + " machine code", ""};
  for (const auto& a : all)  // (arch-specific PTX, compute_90a, serves its own capability only)
    if (a.ptx && (a.exact ? a.cc == device : a.cc <= device) && (best == nullptr || a.cc > best->cc)) best = &a;
  if (best != nullptr) return {true, best->name + " PTX (compiled by the driver on first use)", ""};
  if (all.empty()) return {false, "", "this dlrun was built without GPU code for its kernels"};
  return {false, "",
          fmt::format("compute capability {}.{} is not among the architectures this dlrun carries ({}); rebuild with "
                      "TORCH_CUDA_ARCH_LIST including {}.{} (docs/development.md)",
                      major, minor, archs, major, minor)};
}

nlohmann::json SelfCheck::to_json() const {
  nlohmann::json j = {{"device", device}, {"dtype", dtype},      {"memory_format", memory_format},
                      {"path", path},     {"passed", passed},    {"worst", worst},
                      {"worst_in", worst_in}, {"seconds", seconds}};
  if (channels > 0) j["channels"] = channels;
  if (!std::isfinite(worst)) j["worst"] = "inf";  // (JSON has no infinity)
  if (!error.empty()) j["error"] = error;
  if (!passed) j["values"] = {{"fused", fused}, {"reference", reference}};
  return j;
}

namespace {

// The tolerances of the kernel tests (tests/kernels/bn_relu_gpu_test.cpp): relative and
// absolute alike, per dtype of the BatchNorm input.
double tolerance(at::ScalarType dtype) {
  switch (dtype) {
    case at::kDouble: return 1e-9;
    case at::kFloat: return 1e-4;
    case at::kHalf: return 5e-3;
    default: return 3e-2;  // bfloat16
  }
}

std::string first_values(const at::Tensor& t) {
  const auto flat = t.reshape({-1});
  const auto n = std::min<int64_t>(4, flat.numel());
  std::string s;
  for (int64_t i = 0; i < n; ++i) s += (i ? ", " : "") + fmt::format("{:.6g}", flat[i].item<double>());
  return s + (flat.numel() > n ? ", ..." : "");
}

// A check of `device`, `dtype` and a memory format, before any result.
SelfCheck named(const at::Device& device, at::ScalarType dtype, bool channels_last) {
  SelfCheck c;
  c.device = device.str();
  c.dtype = c10::toString(dtype);
  c.memory_format = channels_last ? "channels_last" : "contiguous";
  return c;
}

// The largest error of `got` against `want` relative to its allowance, folded into `check`.
void compare(SelfCheck& check, const char* what, const at::Tensor& got, const at::Tensor& want, double tol,
             double atol_scale = 1.0) {
  const auto g = got.to(at::kCPU, at::kDouble), w = want.to(at::kCPU, at::kDouble);
  const auto allowed = tol * atol_scale + tol * w.abs();
  auto ratio = (g - w).abs() / allowed;  // a NaN or infinity on either side: no match at all
  ratio = at::where(at::isfinite(g) & at::isfinite(w), ratio,
                    at::full_like(ratio, std::numeric_limits<double>::infinity()));
  const double worst = ratio.max().item<double>();
  if (worst > check.worst || check.worst_in.empty()) {
    check.worst = worst;
    check.worst_in = what;
    check.fused = first_values(g);
    check.reference = first_values(w);
  }
}

}  // namespace

namespace {

// Inputs of a check, from a generator of its own (the run's random streams are not touched),
// values spread as a network's pre-activations are.
struct CheckInputs {
  at::Tensor x, residual, grad_out, weight, bias, rm0, rv0;
  CheckInputs(const std::vector<int64_t>& shape, const at::Device& device, at::ScalarType dtype, bool channels_last,
              uint64_t seed) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const int64_t c = shape[1];
    const auto format = channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
    const auto param_type = dtype == at::kDouble ? at::kDouble : at::kFloat;
    auto act = [&](const at::Tensor& t) { return t.to(device, dtype).contiguous(format); };
    auto vec = [&](const at::Tensor& t) { return t.to(device, param_type); };
    x = act(at::randn(shape, gen) * 3 + 0.5);
    residual = act(at::randn(shape, gen) * 0.5);
    grad_out = act(at::randn(shape, gen));
    weight = vec(at::rand({c}, gen) + 0.5);
    bias = vec(at::randn({c}, gen) * 0.3);
    rm0 = at::randn({c}, gen);
    rv0 = at::rand({c}, gen) + 0.5;
  }
  // A copy of a running statistic on the device (on the CPU, to() would hand back rm0 itself, the
  // fused and the reference update would land in one tensor and be compared with themselves).
  at::Tensor stat(const at::Tensor& t, const at::Tensor& like) const {
    return t.to(like.device(), like.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
  }
};

// grad_out with zeros where the reference's pre-activation (mean, invstd from its forward) is
// within 1e-3 of zero: there the ReLU's mask may differ between two correct implementations (a
// kernel that recomputes it from x in float32, the reference from its own rounding), and the
// check is about everything else.
at::Tensor clear_near_zero(const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& residual,
                           const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& mean,
                           const at::Tensor& invstd) {
  auto per_channel = [](const at::Tensor& v) { return v.to(at::kDouble).view({1, -1, 1, 1}); };
  auto pre = (x.to(at::kDouble) - per_channel(mean)) * per_channel(invstd) * per_channel(weight) + per_channel(bias);
  if (residual.defined()) pre = pre + residual.to(at::kDouble);
  return at::where(pre.abs() < 1e-3, at::zeros_like(grad_out), grad_out).contiguous(grad_out.suggest_memory_format());
}

std::string first_line(const std::exception& e) {
  const std::string what = e.what();
  return what.substr(0, what.find('\n'));
}

}  // namespace

SelfCheck check_bn_act(const BnActOp& op, const at::Device& device, at::ScalarType dtype, int64_t channels,
                       double tolerance_scale) {
  const auto start = std::chrono::steady_clock::now();
  SelfCheck check = named(device, dtype, true);
  check.path = "cudnn";
  check.channels = channels;
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  // 4 x C x 12 x 12: 576 values per channel, more than one of cuDNN's persistent-mode tiles.
  const CheckInputs in({4, channels, 12, 12}, device, dtype, true, 20261128);
  const double tol = tolerance(dtype) * tolerance_scale;
  const bool defect = fault::current().name == "fused_mismatch";
  auto scale_of = [](const at::Tensor& t) { return std::max(1.0, t.abs().max().item<double>()); };
  at::AutoGradMode grad_on(true);
  for (const bool add : {false, true}) {
    const std::string tag = fmt::format("cudnn {} ", add ? "bn_add_relu" : "bn_relu");
    auto rm_c = in.stat(in.rm0, in.weight), rv_c = in.stat(in.rv0, in.weight);
    auto rm_r = in.stat(in.rm0, in.weight), rv_r = in.stat(in.rv0, in.weight);
    const at::Tensor res = add ? in.residual : at::Tensor();
    const auto ref = reference::bn_add_relu(in.x, res, in.weight, in.bias, rm_r, rv_r, true, 0.1, 1e-5);
    const auto dy = clear_near_zero(in.grad_out, in.x, res, in.weight, in.bias, std::get<1>(ref), std::get<2>(ref));
    const auto xg = in.x.detach().requires_grad_(true), rg = in.residual.detach().requires_grad_(true);
    const auto wg = in.weight.detach().requires_grad_(true), bg = in.bias.detach().requires_grad_(true);
    at::Tensor out;
    std::vector<at::Tensor> got;
    std::string stage = "forward";
    try {
      out = op(xg, add ? rg : at::Tensor(), wg, bg, rm_c, rv_c, 0.1, 1e-5);
      stage = "backward";
      std::vector<at::Tensor> wrt = {xg, wg, bg};
      if (add) wrt.push_back(rg);
      got = torch::autograd::grad({out}, wrt, {dy});
    } catch (const std::exception& e) {
      check.worst = std::numeric_limits<double>::infinity();
      check.worst_in = tag + stage;
      check.error = fmt::format("{} {} threw: {}", tag, stage, first_line(e));
      break;
    }
    const auto y = out.detach();
    compare(check, (tag + "output").c_str(), defect ? y * 1.1 + 0.1 : y, std::get<0>(ref), tol);
    compare(check, (tag + "running_mean").c_str(), rm_c, rm_r, tol);
    compare(check, (tag + "running_var").c_str(), rv_c, rv_r, tol);
    const auto want =
        reference::bn_add_relu_backward(dy, in.x, std::get<0>(ref), in.weight, std::get<1>(ref), std::get<2>(ref), true);
    compare(check, (tag + "grad input").c_str(), got[0], std::get<0>(want), tol);
    compare(check, (tag + "grad weight").c_str(), got[1], std::get<2>(want), tol, scale_of(std::get<2>(want)));
    compare(check, (tag + "grad bias").c_str(), got[2], std::get<3>(want), tol, scale_of(std::get<3>(want)));
    if (add) compare(check, (tag + "grad residual").c_str(), got[3], std::get<1>(want), tol);
  }
  check.passed = check.worst <= 1.0;
  check.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return check;
}

SelfCheck self_check(const at::Device& device, at::ScalarType dtype, bool channels_last, double tolerance_scale) {
  const auto start = std::chrono::steady_clock::now();
  SelfCheck check = named(device, dtype, channels_last);
  // Outside the caller's autocast and autograd: the operators are called directly, in the dtype
  // asked for, and their backward through the dispatcher.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  at::NoGradGuard no_grad;
  // One small batch, 4 x 40 x 24 x 24, shaped to take the CUDA kernels' large-batch paths (2304
  // values per channel: more than one reduction chunk per channel in NCHW and in channels_last).
  // 40 channels, a multiple of 8: channels_last fp16, bf16 and float32 take the vectorised kernels
  // (bn_relu_nhwc_vec.cuh) with blocks of 5 (fp16, bf16) or 10 (float32) vector columns, row counts
  // that are not powers of two and chunks whose rows do not divide evenly among the threads;
  // float64 takes the scalar kernels (a full 32-channel tile and a partial one). (cuDNN's
  // operators are checked apart, at each channel count a run meets: check_bn_act.)
  const CheckInputs in({4, 40, 24, 24}, device, dtype, channels_last, 20261126);
  const double tol = tolerance(dtype) * tolerance_scale;
  const bool defect = fault::current().name == "fused_mismatch";

  for (const bool training : {true, false}) {
    for (const bool add : {false, true}) {
      const at::Tensor res = add ? in.residual : at::Tensor();
      auto rm_f = in.stat(in.rm0, in.weight), rv_f = in.stat(in.rv0, in.weight);
      auto rm_r = in.stat(in.rm0, in.weight), rv_r = in.stat(in.rv0, in.weight);
      auto fused = add ? bn_add_relu(in.x, res, in.weight, in.bias, rm_f, rv_f, training, 0.1, 1e-5)
                       : bn_relu(in.x, in.weight, in.bias, rm_f, rv_f, training, 0.1, 1e-5);
      const auto ref = reference::bn_add_relu(in.x, res, in.weight, in.bias, rm_r, rv_r, training, 0.1, 1e-5);
      auto out = std::get<0>(fused);
      if (defect) out = out * 1.1 + 0.1;
      const std::string tag = fmt::format("{}{} ", add ? "bn_add_relu" : "bn_relu", training ? "" : " (eval)");
      compare(check, (tag + "output").c_str(), out, std::get<0>(ref), tol);
      compare(check, (tag + "running_mean").c_str(), rm_f, rm_r, tol);
      compare(check, (tag + "running_var").c_str(), rv_f, rv_r, tol);
      // Backward from the reference's forward (its output's sign is the ReLU mask), with the bias
      // as the models' autograd passes it (the vectorised CUDA kernels recompute the mask from x),
      // and no gradient where the pre-activation is within rounding of zero: there the two masks
      // may differ for no fault.
      const auto &y = std::get<0>(ref), &mean = std::get<1>(ref), &invstd = std::get<2>(ref);
      const auto dy = clear_near_zero(in.grad_out, in.x, res, in.weight, in.bias, mean, invstd);
      const auto want = reference::bn_add_relu_backward(dy, in.x, y, in.weight, mean, invstd, training);
      at::Tensor dx, dw, db, dres;
      if (add)
        std::tie(dx, dres, dw, db) = bn_add_relu_backward(dy, in.x, y, in.weight, mean, invstd, training);
      else
        std::tie(dx, dw, db) = bn_relu_backward(dy, in.x, y, in.weight, mean, invstd, training, in.bias);
      // The weight's and bias's gradients are sums over the batch: their absolute tolerance
      // scales with their size, as in the kernel tests.
      auto scale_of = [](const at::Tensor& t) { return std::max(1.0, t.abs().max().item<double>()); };
      compare(check, (tag + "grad input").c_str(), dx, std::get<0>(want), tol);
      compare(check, (tag + "grad weight").c_str(), dw, std::get<2>(want), tol, scale_of(std::get<2>(want)));
      compare(check, (tag + "grad bias").c_str(), db, std::get<3>(want), tol, scale_of(std::get<3>(want)));
      if (add) compare(check, (tag + "grad residual").c_str(), dres, std::get<1>(want), tol);
    }
  }
  check.passed = check.worst <= 1.0;
  check.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return check;
}

namespace {

// The checks run so far, in the order they ran: a handful at most (one per device, dtype and
// memory format a run uses), looked up before every fused call -- by value, without formatting.
struct Gate {
  c10::Device device;
  at::ScalarType dtype;
  bool channels_last;
  BnPath cuda_path;  // what the CUDA operators ran when it was checked (set_cuda_bn_path)
  SelfCheck result;
};
std::mutex gate_mu;
OnMismatch on_mismatch = OnMismatch::kFallBack;
std::vector<Gate>& gates() {
  static std::vector<Gate> v;
  return v;
}

// cuDNN's gates: one per device, dtype and channel count met in a training call.
struct CudnnGate {
  c10::Device device;
  at::ScalarType dtype;
  int64_t channels;
  SelfCheck result;
};
std::vector<CudnnGate>& cudnn_gates() {
  static std::vector<CudnnGate> v;
  return v;
}

}  // namespace

void set_on_mismatch(OnMismatch policy) {
  std::lock_guard<std::mutex> lock(gate_mu);
  on_mismatch = policy;
}

bool fused_checked(const at::Tensor& x) {
  const auto type = x.device().type();
  auto dtype = x.scalar_type();
  // Under autocast the convolution before the BatchNorm runs in autocast's dtype, and so does
  // the BatchNorm kernel.
  if (dtype == at::kFloat && at::autocast::is_autocast_enabled(type)) dtype = at::autocast::get_autocast_dtype(type);
  const bool channels_last = x.dim() == 4 && x.suggest_memory_format() == at::MemoryFormat::ChannelsLast;
  std::lock_guard<std::mutex> lock(gate_mu);
  const BnPath path = cuda_bn_path();
  for (const auto& g : gates())
    if (g.device == x.device() && g.dtype == dtype && g.channels_last == channels_last && g.cuda_path == path)
      return g.result.passed;
  SelfCheck r;
  try {
    r = self_check(x.device(), dtype, channels_last);
  } catch (const std::exception& e) {  // a kernel that cannot launch here (resources, a PTX the driver refuses)
    const std::string error = e.what();
    r = named(x.device(), dtype, channels_last);
    r.worst = std::numeric_limits<double>::infinity();
    r.worst_in = "the fused operators";
    r.error = error.substr(0, error.find('\n'));
  }
  gates().push_back({x.device(), dtype, channels_last, path, r});
  const std::string what = fmt::format("{} ({}, {})", r.device, r.dtype, r.memory_format);
  if (r.passed) {
    log0::info("fused kernels: the self-check on {} passed in {:.3f} s (worst error {:.2g} of the tolerance)", what,
               r.seconds, r.worst);
    return true;
  }
  const std::string detail =
      r.error.empty()
          ? fmt::format("the fused BatchNorm kernels disagree with the reference on {}: {} is off by {:.3g} times "
                        "the tolerance the kernel tests allow (fused: {}; reference: {})",
                        what, r.worst_in, r.worst, r.fused, r.reference)
          : fmt::format("the fused BatchNorm kernels failed their self-check on {}: {}", what, r.error);
  if (on_mismatch == OnMismatch::kFail)
    throw Error(ExitCode::kRuntime,
                detail + fmt::format("; model.fused_conv_bn_relu: {} does not train on wrong kernels",
                                     cuda_bn_path() == BnPath::kCudnn && x.is_cuda() ? "cudnn" : "true"),
                "model.fused_conv_bn_relu: auto runs the modules instead; please report the GPU (`dlrun info`)");
  log::warn("{}; this run uses the modules (conv, BatchNorm, ReLU) instead", detail);
  return false;
}

bool cudnn_gate(const at::Device& device, at::ScalarType dtype, int64_t channels,
                const std::function<SelfCheck()>& check) {
  std::lock_guard<std::mutex> lock(gate_mu);
  for (const auto& g : cudnn_gates())
    if (g.device == device && g.dtype == dtype && g.channels == channels) return g.result.passed;
  SelfCheck r;
  try {
    r = check();
  } catch (const std::exception& e) {  // (check_bn_act catches the operators' own; this is anything else)
    r = named(device, dtype, true);
    r.path = "cudnn";
    r.channels = channels;
    r.worst = std::numeric_limits<double>::infinity();
    r.worst_in = "cuDNN's fused operators";
    r.error = first_line(e);
  }
  r.device = device.str();  // (what was asked: a check supplied by a test may leave them out)
  r.dtype = c10::toString(dtype);
  r.memory_format = "channels_last";
  r.path = "cudnn";
  r.channels = channels;
  cudnn_gates().push_back({device, dtype, channels, r});
  if (r.passed) {
    log0::info("fused kernels: cuDNN's fused BatchNorm-activation passed its check on {} ({} at {} channels) in "
               "{:.3f} s (worst error {:.2g} of the tolerance)",
               r.device, r.dtype, channels, r.seconds, r.worst);
    return true;
  }
  const std::string why = r.error.empty() ? fmt::format("it disagrees with the reference: {} is off by {:.3g} times "
                                                        "the tolerance (cuDNN: {}; reference: {})",
                                                        r.worst_in, r.worst, r.fused, r.reference)
                                          : r.error;
  log::warn("cuDNN refused {} at {} channels on {}: {}; dlrun's kernels run there", r.dtype, channels, r.device, why);
  return false;
}

bool cudnn_checked(const at::Tensor& y) {
  const auto dtype = y.scalar_type();
  const int64_t channels = y.size(1);
  return cudnn_gate(y.device(), dtype, channels,
                    [&] { return check_bn_act(bn_act_cudnn_autograd, y.device(), dtype, channels); });
}

bool cudnn_refused(at::ScalarType dtype, int64_t channels) {
  std::lock_guard<std::mutex> lock(gate_mu);
  for (const auto& g : cudnn_gates())
    if (g.dtype == dtype && g.channels == channels && !g.result.passed) return true;
  return false;
}

std::vector<std::string> cudnn_refusals() {
  std::lock_guard<std::mutex> lock(gate_mu);
  std::vector<std::string> out;
  std::vector<at::ScalarType> seen;
  for (const auto& g : cudnn_gates()) {
    if (g.result.passed || std::find(seen.begin(), seen.end(), g.dtype) != seen.end()) continue;
    seen.push_back(g.dtype);
    std::vector<int64_t> channels;
    for (const auto& h : cudnn_gates())
      if (h.dtype == g.dtype && !h.result.passed) channels.push_back(h.channels);
    out.push_back(fmt::format("cuDNN refused {} at {} channels: {}", g.result.dtype, fmt::join(channels, ", "),
                              g.result.error.empty() ? "it disagrees with the reference (" + g.result.worst_in + ")"
                                                     : g.result.error));
  }
  return out;
}

nlohmann::json self_check_report() {
  std::lock_guard<std::mutex> lock(gate_mu);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& g : gates()) out.push_back(g.result.to_json());
  for (const auto& g : cudnn_gates()) out.push_back(g.result.to_json());
  return out;
}

void forget_self_checks() {
  std::lock_guard<std::mutex> lock(gate_mu);
  gates().clear();
  cudnn_gates().clear();
}

}  // namespace dlrun::kernels
