// A step's mixed precision (see precision.h).
#include "train/step/precision.h"

#include "base/error.h"

namespace dlrun::train {

Precision::Precision(const AmpOptions& amp, NonfinitePolicy nonfinite, const torch::Device& device)
    : enabled_(amp.enabled),
      dtype_(amp.dtype == AmpDtype::kBf16 ? torch::kBFloat16 : torch::kHalf),
      device_type_(device.type()),
      nonfinite_(nonfinite),
      scaler_(amp, enabled_ && dtype_ == torch::kHalf, device) {
  DLRUN_CHECK_INPUT(!enabled_ || device.is_cuda() || dtype_ == torch::kBFloat16,
                    "amp.dtype: fp16 autocast needs a CUDA device; on {} use amp.dtype: bf16", device.str());
}

torch::Tensor Precision::nonfinite(const torch::Tensor& loss_bad, const torch::Tensor& found_inf) const {
  return scaler_.active() ? loss_bad : loss_bad.logical_or(found_inf.gt(0));
}

torch::Tensor Precision::skip(const torch::Tensor& found_inf, const torch::Tensor& nonfinite) const {
  const bool skip_nonfinite = nonfinite_ == NonfinitePolicy::kSkip;
  if (scaler_.active() && skip_nonfinite) return found_inf.gt(0).logical_or(nonfinite).to(torch::kFloat32);
  if (scaler_.active()) return found_inf;
  if (skip_nonfinite) return nonfinite.to(torch::kFloat32);
  return {};
}

std::string Precision::skip_reason() const {
  if (scaler_.active() && nonfinite_ == NonfinitePolicy::kSkip) return "fp16 gradient overflow, or a non-finite loss";
  if (scaler_.active()) return "fp16 gradient overflow (the loss scale backs off)";
  return "non-finite loss or gradients";
}

}  // namespace dlrun::train
