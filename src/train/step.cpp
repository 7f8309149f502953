// The step runner (see step.h).
#include "train/step.h"

#include "base/error.h"
#include "base/log.h"
#include "dist/group.h"
#include "train/optim.h"

namespace dlrun::train {

StepRunner::StepRunner(const TrainOptions& train, const AmpOptions& amp, models::Model& model,
                       torch::optim::Optimizer& optim, const torch::Device& device)
    : train_(train),
      model_(model),
      optim_(optim),
      device_(device),
      autocast_(amp.enabled),
      autocast_dtype_(amp.dtype == AmpDtype::kBf16 ? torch::kBFloat16 : torch::kHalf),
      scaler_(amp, autocast_ && autocast_dtype_ == torch::kHalf, device) {
  DLRUN_CHECK_INPUT(!autocast_ || device.is_cuda() || autocast_dtype_ == torch::kBFloat16,
                    "amp.dtype: fp16 autocast needs a CUDA device; on {} use amp.dtype: bf16", device.str());
  for (auto& p : model.parameters())
    if (p.requires_grad()) params_.push_back(p);
}

void StepRunner::distribute(dist::GradSync* sync, std::function<void()> before_step) {
  sync_ = sync;
  before_step_ = std::move(before_step);
}

void StepRunner::clip(const std::vector<torch::Tensor>& grads) const {
  // Global L2 norm as torch.nn.utils.clip_grad_norm_ computes it, kept on the device: the
  // factor is clamped to 1 instead of branching on the norm on the host.
  torch::NoGradGuard no_grad;
  const auto norms = at::_foreach_norm(grads, 2);
  const auto total = at::linalg_vector_norm(at::stack(norms), 2);
  const auto factor = (train_.clip_grad_norm / (total + 1e-6)).clamp_max(1.0);
  at::_foreach_mul_(grads, factor);
}

StepResult StepRunner::run(const std::vector<data::Batch>& micro, double lr) {
  set_lr(optim_, lr);
  optim_.zero_grad(true);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(device_);
  auto loss_sum = torch::zeros({}, f64);
  const auto n = static_cast<double>(micro.size());
  if (before_step_) before_step_();
  for (size_t i = 0; i < micro.size(); ++i) {
    const auto& b = micro[i];
    torch::Tensor loss;
    {
      AutocastScope ac(autocast_, autocast_dtype_, device_.type());
      auto logits = model_.forward(b.x);  // (b, classes)
      loss = torch::nn::functional::cross_entropy(
          logits.to(model_.dtype()), b.y,  // float32 under autocast too
          torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(train_.label_smoothing));
    }
    loss_sum += loss.detach().to(torch::kFloat64);
    auto scaled = scaler_.scale(loss / n);
    if (sync_ && i + 1 == micro.size()) sync_->prepare(scaled);  // this backward all-reduces
    scaled.backward();
  }

  // Unscale (by 1 without fp16 scaling) and look for inf/NaN in one pass over the gradients.
  std::vector<torch::Tensor> grads;
  grads.reserve(params_.size());
  for (const auto& p : params_)
    if (p.grad().defined()) grads.push_back(p.grad());
  const auto found_inf = scaler_.unscale_(grads);  // float32 0-dim: 1 = a gradient is inf/NaN
  const auto loss_bad = loss_sum.isfinite().logical_not();
  StepResult r;
  r.loss = loss_sum / n;
  // With fp16 scaling, overflowing gradients are routine (the scale is searched for); only
  // a non-finite loss is the model's problem.
  r.nonfinite = scaler_.active() ? loss_bad : loss_bad.logical_or(found_inf.gt(0));
  if (train_.clip_grad_norm > 0 && !grads.empty()) clip(grads);

  // Whether to apply the update, decided on the device: the fused optimizer kernels skip it
  // where the flag is 1.
  torch::Tensor skip;
  if (scaler_.active() && train_.nonfinite == NonfinitePolicy::kSkip)
    skip = found_inf.gt(0).logical_or(r.nonfinite).to(torch::kFloat32);
  else if (scaler_.active())
    skip = found_inf;
  else if (train_.nonfinite == NonfinitePolicy::kSkip)
    skip = r.nonfinite.to(torch::kFloat32);
  optimizer_step(optim_, skip);
  scaler_.update(found_inf);
  if (skip.defined()) r.skipped = skip.gt(0);
  return r;
}

std::string StepRunner::skip_reason() const {
  if (scaler_.active() && train_.nonfinite == NonfinitePolicy::kSkip)
    return "fp16 gradient overflow, or a non-finite loss";
  if (scaler_.active()) return "fp16 gradient overflow (the loss scale backs off)";
  return "non-finite loss or gradients";
}

}  // namespace dlrun::train
