// Whether dlrun's fused BatchNorm kernels may be trusted on a device (docs/kernels.md, "Safe on
// any GPU"): two gates before the models call them.
//
//  1. The capability check (fused_kernels_run_on): does the binary carry GPU code for this
//     device at all -- machine code of its architecture family, or PTX the driver can compile for
//     it? A pure function of the compute capability and the architectures compiled in, so tests
//     feed it any GPU.
//  2. The self-check (self_check, and the process-wide gate fused_checked): on the first use of
//     the fused operators on a device, per dtype and memory format, one small batch runs through
//     the fused forward and backward and through the reference composed of ATen ops on the same
//     device, compared with the tolerances the kernel tests use. A mismatch means a kernel
//     defect on this GPU: the run falls back to the modules (model.fused_conv_bn_relu: auto) or
//     fails with exit 1 (true), rather than training a worse model without a word.
//  3. Where the CUDA path is cuDNN's fused BatchNorm-activation (bn_cudnn.h), the same check of
//     cuDNN's operators, per dtype and channel count, on the first training call of each
//     (check_bn_act, cudnn_checked): a cuDNN that refuses a call (throws in the forward or the
//     backward) or disagrees with the reference hands that dtype and channel count to dlrun's
//     kernels with a warning; the run goes on.
//
// All results reach the log and summary.json ("fused_kernels").
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace dlrun::kernels {

/// The capability check's answer for one device.
struct ArchVerdict {
  bool runs = false;
  std::string image;  ///< what runs there: "sm_86 machine code" / "compute_120 PTX (compiled by the driver)"
  std::string why;    ///< when it does not: one sentence for the log
};

/// Whether code compiled for `archs` ("sm_75 sm_80 ... compute_120", the form of
/// cuda::compiled_archs(); machine code sm_XY, PTX compute_XY, "a"-suffixed arch-specific
/// machine code sm_XYa) runs on a device of compute capability major.minor: machine code of the
/// same major and a minor not above the device's (sm_86 runs on 8.6 and 8.9; sm_90a on 9.0
/// only), else PTX of a capability not above the device's, which the driver compiles. Machine
/// code is preferred, the newest that fits.
ArchVerdict fused_kernels_run_on(int major, int minor, const std::string& archs);

/// One self-check: the fused operators against the reference on `device` for `dtype` and a
/// memory format.
struct SelfCheck {
  std::string device, dtype, memory_format;
  std::string path = "dlrun";  ///< whose operators: "dlrun" (bn_relu, bn_add_relu) or "cudnn" (check_bn_act)
  int64_t channels = 0;        ///< the check's channel count (check_bn_act: the call's)
  bool passed = false;
  /// The largest error relative to its allowance (|got - want| / (atol + rtol |want|)), over
  /// every compared tensor; <= 1 passes. And the tensor it was found in.
  double worst = 0;
  std::string worst_in;
  double seconds = 0;
  std::string fused, reference;  ///< on a mismatch: that tensor's first values from each side
  std::string error;             ///< the operators threw instead (fused_checked): the first line
  nlohmann::json to_json() const;
};

/// Run the self-check now (no caching, no logging). `tolerance_scale` multiplies the tests'
/// tolerances (the GPU suite passes a tiny one once to show that the check bites).
/// DLRUN_FAULT=fused_mismatch perturbs the fused output (a kernel defect, for the tests).
SelfCheck self_check(const at::Device& device, at::ScalarType dtype, bool channels_last,
                     double tolerance_scale = 1.0);

/// relu(BatchNorm(x) [+ residual]) differentiable in x, residual, weight and bias, running
/// statistics updated in place, training: bn_act_cudnn_autograd's signature (bn_cudnn.h).
using BnActOp = std::function<at::Tensor(const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                                         const at::Tensor& bias, at::Tensor& running_mean, at::Tensor& running_var,
                                         double momentum, double eps)>;

/// The check of a fused BatchNorm-activation `op` (cuDNN's: bn_act_cudnn_autograd) on `device`
/// for `dtype` at `channels` channels, channels_last, training, with and without the residual:
/// output, running statistics and every gradient against the reference. An exception from the
/// forward or from the backward is a failed check whose `error` says which and why -- never
/// thrown. DLRUN_FAULT=fused_mismatch perturbs the op's output.
SelfCheck check_bn_act(const BnActOp& op, const at::Device& device, at::ScalarType dtype, int64_t channels,
                       double tolerance_scale = 1.0);

/// The gate of cuDNN's fused operators before a training call on the BatchNorm input `y`
/// (bn_cudnn.h's takes_cudnn_bn asks it): true when the check for y's device, dtype and channel
/// count passed, running check_bn_act on cuDNN's operators on first use (once per process and
/// key; thread-safe). A failed check is no failed run: it logs one warning -- "cuDNN refused bf16
/// at 64 channels: ...; dlrun's kernels run there" -- and returns false, and cudnn_refusals()
/// lists it. (CUDA graphs capture only after eager warm-up steps, which meet every key first.)
bool cudnn_checked(const at::Tensor& y);
/// The same gate with the check supplied (tests; cudnn_checked passes cuDNN's).
bool cudnn_gate(const at::Device& device, at::ScalarType dtype, int64_t channels,
                const std::function<SelfCheck()>& check);
/// Whether the gate refused dtype at `channels` on any device of this process.
bool cudnn_refused(at::ScalarType dtype, int64_t channels);
/// One line per refused dtype: "cuDNN refused BFloat16 at 64, 128 channels: <first reason>";
/// empty when nothing was refused (bench kernels, the run log's end).
std::vector<std::string> cudnn_refusals();

/// What a failed self-check leads to.
enum class OnMismatch { kFallBack, kFail };
/// Set by the trainer from model.fused_conv_bn_relu (auto: fall back; true: fail).
void set_on_mismatch(OnMismatch policy);

/// The models' gate before a fused call on the BatchNorm input `x` (dtype: autocast's when it
/// is on for x's device): true when the self-check for x's device, dtype and memory format
/// passed, running it on first use (once per process; thread-safe). On a mismatch -- or when
/// the fused operators throw during the check -- it logs both results once and returns false
/// (kFallBack) or throws dlrun::Error, exit 1 (kFail). Each rank of a multi-process run decides
/// for itself (both paths compute the same function; docs/kernels.md).
bool fused_checked(const at::Tensor& x);

/// Every self-check this process ran, as summary.json's "fused_kernels"."checks"; forget them
/// (tests).
nlohmann::json self_check_report();
void forget_self_checks();

}  // namespace dlrun::kernels
