// Which implementation carries the models' conv-BN-ReLU triples and ResNet block ends on a
// device (docs/kernels.md, "Which path runs where"): the plain modules (conv, BatchNorm, ReLU:
// ATen's or cuDNN's BatchNorm as PyTorch picks it), dlrun's own fused kernels, or cuDNN's fused
// BatchNorm-activation (cudnnBatchNormalizationForwardTrainingEx / BackwardEx with the
// BN_ACTIVATION and BN_ADD_ACTIVATION ops).
//
// The choice is a pure function of the policy (model.fused_conv_bn_relu), the device kind and
// capability, the dtype the BatchNorm sees (autocast's under amp) and the memory format, so
// tests feed it any GPU. `auto` follows a table of what was measured on a GPU
// (kMeasured in bn_path.cpp, each row with its evidence); a combination nobody has measured
// keeps the modules.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>

namespace dlrun::kernels {

enum class BnPath { kModules, kDlrun, kCudnn };
/// "modules", "dlrun", "cudnn".
const char* name_of(BnPath p);

/// What model.fused_conv_bn_relu asks for: auto, true (dlrun's kernels everywhere), false (the
/// modules), cudnn (cuDNN's fused operators where cuDNN takes the call, dlrun's elsewhere).
enum class BnPolicy { kAuto, kDlrun, kModules, kCudnn };

struct BnChoice {
  BnPath path = BnPath::kModules;
  std::string why;  ///< one sentence for the log and `dlrun info`
};

/// The path for `dtype` and the memory format on a CUDA device of compute capability `major`
/// (cuda) or on the CPU (!cuda, major ignored).
BnChoice choose_bn_path(BnPolicy policy, bool cuda, int major, at::ScalarType dtype, bool channels_last);

/// Whether cuDNN's fused BatchNorm-activation takes a call of this kind: training (its Ex calls
/// have no inference form), fp16 or bf16 input in channels_last (NHWC fully packed: cuDNN's
/// persistent spatial mode), channels a multiple of 4, eps > 0, float32 parameters. (The call's
/// sizes are checked where the tensor is at hand: bn_cudnn.h.) bf16 is tried: where this cuDNN
/// refuses it, the first-use self-check says so and dlrun's kernels take bf16 (docs/kernels.md).
bool cudnn_bn_takes(at::ScalarType dtype, bool channels_last, int64_t channels, double eps, bool training,
                    at::ScalarType param_dtype);

/// The training step's choice between dlrun's kernels and cuDNN's fused ones inside the CUDA
/// fused operators, process-wide (set by the trainer from choose_bn_path; dlrun's by default).
void set_cuda_bn_path(BnPath p);
BnPath cuda_bn_path();

}  // namespace dlrun::kernels
