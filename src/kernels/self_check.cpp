// The capability check and the fused-kernel self-check (see self_check.h).
#include "kernels/self_check.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

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
                      {"passed", passed}, {"worst", worst},      {"worst_in", worst_in},
                      {"seconds", seconds}};
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

// cuDNN's fused BatchNorm-activation (the path of a run whose CUDA BatchNorm path is cuDNN's),
// training, with and without the residual, through the autograd wrapper the models call: output,
// running statistics and every gradient against the reference. The backward's ReLU mask is
// cuDNN's own (its reserve space), so the reference's backward takes cuDNN's output, whose sign
// is that mask. A cuDNN that refuses the dtype (bf16 is not documented for these ops) is no
// defect: that dtype goes to dlrun's kernels, which the check has just compared, and the log
// says so.
void check_cudnn(SelfCheck& check, const at::Tensor& x, const at::Tensor& residual, const at::Tensor& grad_out,
                 const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& rm0, const at::Tensor& rv0,
                 double tol, bool defect) {
  auto scale_of = [](const at::Tensor& t) { return std::max(1.0, t.abs().max().item<double>()); };
  at::AutoGradMode grad_on(true);
  for (const bool add : {false, true}) {
    auto rm_c = rm0.clone(), rv_c = rv0.clone(), rm_r = rm0.clone(), rv_r = rv0.clone();
    const auto xg = x.detach().requires_grad_(true), rg = residual.detach().requires_grad_(true);
    const auto wg = weight.detach().requires_grad_(true), bg = bias.detach().requires_grad_(true);
    at::Tensor out;
    try {
      out = bn_act_cudnn_autograd(xg, add ? rg : at::Tensor(), wg, bg, rm_c, rv_c, 0.1, 1e-5);
    } catch (const std::exception& e) {
      const std::string error = e.what();
      refuse_cudnn_bn(x.scalar_type());
      log::warn("cuDNN's fused BatchNorm-activation refuses {} here ({}): dlrun's kernels run for {}",
                c10::toString(x.scalar_type()), error.substr(0, error.find('\n')), c10::toString(x.scalar_type()));
      return;
    }
    std::vector<at::Tensor> wrt = {xg, wg, bg};
    if (add) wrt.push_back(rg);
    const auto got = torch::autograd::grad({out}, wrt, {grad_out});
    const auto ref = reference::bn_add_relu(x, add ? residual : at::Tensor(), weight, bias, rm_r, rv_r, true, 0.1, 1e-5);
    const auto y = out.detach();
    const std::string tag = fmt::format("cudnn {} ", add ? "bn_add_relu" : "bn_relu");
    compare(check, (tag + "output").c_str(), defect ? y * 1.1 + 0.1 : y, std::get<0>(ref), tol);
    compare(check, (tag + "running_mean").c_str(), rm_c, rm_r, tol);
    compare(check, (tag + "running_var").c_str(), rv_c, rv_r, tol);
    const auto want = reference::bn_add_relu_backward(grad_out, x, y, weight, std::get<1>(ref), std::get<2>(ref), true);
    compare(check, (tag + "grad input").c_str(), got[0], std::get<0>(want), tol);
    compare(check, (tag + "grad weight").c_str(), got[1], std::get<2>(want), tol, scale_of(std::get<2>(want)));
    compare(check, (tag + "grad bias").c_str(), got[2], std::get<3>(want), tol, scale_of(std::get<3>(want)));
    if (add) compare(check, (tag + "grad residual").c_str(), got[3], std::get<1>(want), tol);
  }
}

}  // namespace

SelfCheck self_check(const at::Device& device, at::ScalarType dtype, bool channels_last, double tolerance_scale) {
  const auto start = std::chrono::steady_clock::now();
  SelfCheck check = named(device, dtype, channels_last);
  // Outside the caller's autocast and autograd: the operators are called directly, in the dtype
  // asked for, and their backward through the dispatcher.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  at::NoGradGuard no_grad;
  // One small batch from a generator of its own (the run's random streams are not touched),
  // values spread as a network's pre-activations are: 4 x 40 x 24 x 24, shaped to take the
  // CUDA kernels' large-batch paths (2304 values per channel: more than one reduction chunk per
  // channel in NCHW and in channels_last). 40 channels, a multiple of 8: channels_last fp16,
  // bf16 and float32 take the vectorised kernels (bn_relu_nhwc_vec.cuh) with blocks of 5 (fp16,
  // bf16) or 10 (float32) vector columns, row counts that are not powers of two and chunks whose
  // rows do not divide evenly among the threads; float64 takes the scalar kernels (a full
  // 32-channel tile and a partial one).
  auto gen = at::make_generator<at::CPUGeneratorImpl>(20261126);
  const std::vector<int64_t> shape = {4, 40, 24, 24};
  const int64_t c = shape[1];
  const auto format = channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
  const auto param_type = dtype == at::kDouble ? at::kDouble : at::kFloat;
  auto act = [&](const at::Tensor& t) { return t.to(device, dtype).contiguous(format); };
  // Always a copy: on the CPU, to() would hand back rm0 itself, the fused and the reference update
  // would then both land in one tensor, and the running statistics would be compared with themselves.
  auto vec = [&](const at::Tensor& t) { return t.to(device, param_type, /*non_blocking=*/false, /*copy=*/true); };
  const auto x = act(at::randn(shape, gen) * 3 + 0.5);
  const auto residual = act(at::randn(shape, gen) * 0.5);
  const auto grad_out = act(at::randn(shape, gen));
  const auto weight = vec(at::rand({c}, gen) + 0.5), bias = vec(at::randn({c}, gen) * 0.3);
  const auto rm0 = at::randn({c}, gen), rv0 = at::rand({c}, gen) + 0.5;
  const double tol = tolerance(dtype) * tolerance_scale;
  const bool defect = fault::current().name == "fused_mismatch";

  for (const bool training : {true, false}) {
    for (const bool add : {false, true}) {
      const at::Tensor res = add ? residual : at::Tensor();
      auto rm_f = vec(rm0), rv_f = vec(rv0);
      auto rm_r = vec(rm0), rv_r = vec(rv0);
      auto fused = add ? bn_add_relu(x, res, weight, bias, rm_f, rv_f, training, 0.1, 1e-5)
                       : bn_relu(x, weight, bias, rm_f, rv_f, training, 0.1, 1e-5);
      const auto ref = reference::bn_add_relu(x, res, weight, bias, rm_r, rv_r, training, 0.1, 1e-5);
      auto out = std::get<0>(fused);
      if (defect) out = out * 1.1 + 0.1;
      const std::string tag = fmt::format("{}{} ", add ? "bn_add_relu" : "bn_relu", training ? "" : " (eval)");
      compare(check, (tag + "output").c_str(), out, std::get<0>(ref), tol);
      compare(check, (tag + "running_mean").c_str(), rm_f, rm_r, tol);
      compare(check, (tag + "running_var").c_str(), rv_f, rv_r, tol);
      // Backward from the reference's forward (its output's sign is the ReLU mask), so that a
      // pre-activation within rounding of zero cannot make the two differ for no fault.
      const auto &y = std::get<0>(ref), &mean = std::get<1>(ref), &invstd = std::get<2>(ref);
      const auto want = reference::bn_add_relu_backward(grad_out, x, y, weight, mean, invstd, training);
      at::Tensor dx, dw, db, dres;
      if (add)
        std::tie(dx, dres, dw, db) = bn_add_relu_backward(grad_out, x, y, weight, mean, invstd, training);
      else
        std::tie(dx, dw, db) = bn_relu_backward(grad_out, x, y, weight, mean, invstd, training);
      // The weight's and bias's gradients are sums over the batch: their absolute tolerance
      // scales with their size, as in the kernel tests.
      auto scale_of = [](const at::Tensor& t) { return std::max(1.0, t.abs().max().item<double>()); };
      compare(check, (tag + "grad input").c_str(), dx, std::get<0>(want), tol);
      compare(check, (tag + "grad weight").c_str(), dw, std::get<2>(want), tol, scale_of(std::get<2>(want)));
      compare(check, (tag + "grad bias").c_str(), db, std::get<3>(want), tol, scale_of(std::get<3>(want)));
      if (add) compare(check, (tag + "grad residual").c_str(), dres, std::get<1>(want), tol);
    }
  }
  if (device.is_cuda() && cuda_bn_path() == BnPath::kCudnn && !cudnn_bn_refused(dtype) &&
      cudnn_bn_takes(dtype, channels_last, c, 1e-5, /*training=*/true, param_type))
    check_cudnn(check, x, residual, grad_out, weight, bias, vec(rm0), vec(rv0), tol, defect);
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

nlohmann::json self_check_report() {
  std::lock_guard<std::mutex> lock(gate_mu);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& g : gates()) out.push_back(g.result.to_json());
  return out;
}

void forget_self_checks() {
  std::lock_guard<std::mutex> lock(gate_mu);
  gates().clear();
}

}  // namespace dlrun::kernels
