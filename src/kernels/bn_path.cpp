// The conv-BN-ReLU path per device, dtype and memory format (see bn_path.h).
#include "kernels/bn_path.h"

#include <atomic>

namespace dlrun::kernels {

const char* name_of(BnPath p) {
  switch (p) {
    case BnPath::kModules: return "modules";
    case BnPath::kDlrun: return "dlrun";
    case BnPath::kCudnn: return "cudnn";
  }
  return "?";
}

namespace {

// What `auto` picks on CUDA, from measurements on a GPU (docs/benchmarks.md "GPU"). A row
// matches a memory format and, when `dtype` is not Undefined, one dtype; the first match wins.
// cuDNN's fused BatchNorm-activation has not run on a GPU yet: until it is measured there, no
// row picks it (model.fused_conv_bn_relu: cudnn runs it on request).
struct Measured {
  bool channels_last;
  at::ScalarType dtype;  // Undefined: any
  BnPath path;
  const char* evidence;
};
constexpr Measured kMeasured[] = {
    {false, at::ScalarType::Undefined, BnPath::kDlrun,
     "in NCHW dlrun's kernels trained ResNet-50 1.24x as fast as the modules (bf16, batch 256, H200, 2026-11-26)"},
    {true, at::ScalarType::Undefined, BnPath::kModules,
     "in channels_last the modules (cuDNN's or ATen's BatchNorm) trained ResNet-50 faster than dlrun's kernels "
     "(0.91x, bf16, batch 256, H200, 2026-11-26); cuDNN's fused BatchNorm-activation is not measured yet"},
};

bool half_or_bf16(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

}  // namespace

BnChoice choose_bn_path(BnPolicy policy, bool cuda, int /*major*/, at::ScalarType dtype, bool channels_last) {
  switch (policy) {
    case BnPolicy::kModules: return {BnPath::kModules, "model.fused_conv_bn_relu: false"};
    case BnPolicy::kDlrun: return {BnPath::kDlrun, "model.fused_conv_bn_relu: true"};
    case BnPolicy::kCudnn:
      if (!cuda) return {BnPath::kModules, "cuDNN's fused BatchNorm-activation needs a CUDA device"};
      if (!channels_last || !half_or_bf16(dtype))
        return {BnPath::kDlrun, "cuDNN's fused BatchNorm-activation takes fp16/bf16 in channels_last only: dlrun's "
                                "kernels run here"};
      return {BnPath::kCudnn, "model.fused_conv_bn_relu: cudnn"};
    case BnPolicy::kAuto: break;
  }
  if (!cuda) return {BnPath::kModules, "on the CPU ATen's BatchNorm is faster than dlrun's CPU kernels"};
  for (const auto& m : kMeasured)
    if (m.channels_last == channels_last && (m.dtype == at::ScalarType::Undefined || m.dtype == dtype))
      return {m.path, m.evidence};
  return {BnPath::kModules, "not measured on a GPU: the modules"};
}

bool cudnn_bn_takes(at::ScalarType dtype, bool channels_last, int64_t channels, double eps, bool training,
                    at::ScalarType param_dtype) {
  // (CUDNN_BN_MIN_EPSILON is 0 in cuDNN 9: any positive eps.)
  return training && channels_last && half_or_bf16(dtype) && channels > 0 && channels % 4 == 0 && eps > 0 &&
         param_dtype == at::kFloat;
}

namespace {
std::atomic<BnPath> cuda_path{BnPath::kDlrun};
}  // namespace

void set_cuda_bn_path(BnPath p) { cuda_path.store(p); }
BnPath cuda_bn_path() { return cuda_path.load(); }

}  // namespace dlrun::kernels
