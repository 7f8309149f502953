// The step runner (see step.h).
#include "train/step/step.h"

#include <ATen/record_function.h>

#include <limits>
#include <utility>

#include "base/error.h"
#include "base/fault.h"
#include "train/step/mixing.h"
#include "train/step/optim.h"

namespace dlrun::train {

StepRunner::StepRunner(const TrainOptions& train, const AmpOptions& amp, models::Model& model,
                       torch::optim::Optimizer& optim, const torch::Device& device, std::vector<StepHook*> hooks)
    : train_(train),
      model_(model),
      optim_(optim),
      device_(device),
      precision_(amp, train.nonfinite, device),
      split_(train.micro_batch),
      hooks_(std::move(hooks)),
      timer_(device) {
  for (auto& p : model.parameters())
    if (p.requires_grad()) params_.push_back(p);
}

StepRunner::~StepRunner() = default;

void StepRunner::use_cuda_graphs() {
  graph_ = std::make_unique<CapturedStep>(device_);  // (exit 2 off CUDA)
  use_device_lr(optim_, device_);
  for (StepHook* h : hooks_) h->prepare_capture();
}

StepResult StepRunner::run(const std::vector<data::Batch>& micro, double lr, int64_t step) {
  step_ = step;
  set_lr(optim_, lr);
  for (StepHook* h : hooks_) h->before_step(step);
  if (graph_) return graph_->run(micro, [this](const std::vector<data::Batch>& m) { return body(m); }, timer_);
  return body(micro);
}

void StepRunner::abandon_step() {
  for (StepHook* h : hooks_) h->abandon_step();
}

StepResult StepRunner::body(const std::vector<data::Batch>& micro) {
  // Phases are timed (step_timer.h) and named for the profiler's trace (profile.*); neither
  // costs anything when off. A step being captured into a CUDA graph is not timed.
  if (!split_.automatic()) {
    auto loss_sum = begin_attempt();
    accumulate(micro, loss_sum, 0);
    return update(loss_sum, micro.size());
  }
  auto loss_sum = split_.fit(
      micro, step_, model_, optim_, device_,
      [&](int attempt) {
        auto sum = begin_attempt();
        accumulate(micro, sum, attempt);
        return sum;
      },
      [this](bool flag) { return sync_.any_rank(flag, device_); });
  sync_.average(grads());  // (the backward passes stayed local: every rank has agreed they all fitted)
  return update(loss_sum, micro.size());
}

torch::Tensor StepRunner::begin_attempt() {
  timer_.start();
  optim_.zero_grad(true);
  auto loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
  sync_.before_step();
  return loss_sum;
}

std::vector<torch::Tensor> StepRunner::grads() const {
  std::vector<torch::Tensor> out;
  out.reserve(params_.size());
  for (const auto& p : params_)
    if (p.grad().defined()) out.push_back(p.grad());
  return out;
}

void StepRunner::accumulate(const std::vector<data::Batch>& micro, torch::Tensor& loss_sum, int attempt) {
  const auto n = static_cast<double>(micro.size());
  for (size_t i = 0; i < micro.size(); ++i) {
    const auto& b = micro[i];
    const int64_t size = b.x.size(0);
    const int64_t k = split_.pieces(size);
    // Mixed before the split (which then cannot change it); the targets become probabilities.
    torch::Tensor x = b.x, y = b.y;
    if (mix_.on) {
      const MixDraw d = draw_mix(train_, mix_.seed, step_, static_cast<int64_t>(i), mix_.rank, b.x.size(2), b.x.size(3));
      auto [mx, targets] = apply_mix(d, b.x, b.y, mix_.classes);
      x = mx;
      if (targets.defined()) y = targets;
    }
    const std::vector<torch::Tensor> xs = k > 1 ? x.tensor_split(k) : std::vector<torch::Tensor>{x};
    const std::vector<torch::Tensor> ys = k > 1 ? y.tensor_split(k) : std::vector<torch::Tensor>{y};
    for (size_t j = 0; j < xs.size(); ++j) {
      const int64_t piece = xs[j].size(0);
      torch::Tensor loss;
      {
        RECORD_USER_SCOPE("dlrun::forward");
        const AutocastScope ac = precision_.autocast();
        auto logits = model_.forward(xs[j]);  // (b, classes)
        loss = torch::nn::functional::cross_entropy(  // class indices, or a mixed batch's probabilities
            logits.to(model_.dtype()), ys[j].is_floating_point() ? ys[j].to(model_.dtype()) : ys[j],  // float32 under autocast too
            torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(train_.label_smoothing));
      }
      if (fault::out_of_memory(step_, attempt, piece))
        TORCH_CHECK_WITH(OutOfMemoryError, false, "DLRUN_FAULT: step ", step_, " ran out of memory (", piece,
                         " samples in a micro-batch)");
      // A piece counts by its share of its micro-batch: the loss of a micro-batch cut into k equal
      // pieces is the mean of theirs (a halving is exact), and each piece's gradient is divided
      // by n * k, as train.grad_accum n * k would divide it.
      const double pieces = static_cast<double>(size) / static_cast<double>(piece);  // k when equal
      loss_sum += k > 1 ? loss.detach().to(torch::kFloat64) / pieces : loss.detach().to(torch::kFloat64);
      auto scaled = precision_.scale(k > 1 ? loss / (n * pieces) : loss / n);
      timer_.end_of(Phase::kForward);
      {
        RECORD_USER_SCOPE("dlrun::backward");
        // This backward all-reduces (under auto the average comes after every rank's backward).
        if (!split_.automatic() && i + 1 == micro.size() && j + 1 == xs.size()) sync_.before_last_backward(scaled);
        scaled.backward();
      }
      timer_.end_of(Phase::kBackward);
    }
  }
}

StepResult StepRunner::update(torch::Tensor& loss_sum, size_t micro_batches) {
  const auto n = static_cast<double>(micro_batches);
  RECORD_USER_SCOPE("dlrun::optimizer");

  // Unscale (by 1 without fp16 scaling) and look for inf/NaN in one pass over the gradients.
  const std::vector<torch::Tensor> grads = this->grads();
  const bool clipping = train_.clip_grad_norm > 0 && !grads.empty();
  std::vector<torch::Tensor> norms;  // the check's own per-gradient norms, reused by clipping (bf16, fp32)
  const auto found_inf = precision_.unscale(grads, clipping ? &norms : nullptr);  // float32 0-dim: 1 = inf/NaN
  if (fault::nonfinite_loss(step_)) loss_sum += std::numeric_limits<double>::infinity();
  // The loss is each rank's own (the gradients are averaged, so their check agrees already):
  // any rank's non-finite loss counts on every rank, or ranks would skip different steps and
  // their replicas part silently.
  const auto loss_bad = sync_.any_rank(loss_sum.isfinite().logical_not());
  StepResult r;
  r.loss = loss_sum / n;
  r.nonfinite = precision_.nonfinite(loss_bad, found_inf);
  if (clipping) clip(grads, norms);
  if (train_.clip_grad_value > 0 && !grads.empty()) {  // torch.nn.utils.clip_grad_value_, after the unscale
    torch::NoGradGuard no_grad;
    at::_foreach_clamp_min_(grads, -train_.clip_grad_value);
    at::_foreach_clamp_max_(grads, train_.clip_grad_value);
  }
  // Whether to apply the update, decided on the device: the fused optimizer kernels skip it
  // where the flag is 1.
  const torch::Tensor skip = precision_.skip(found_inf, r.nonfinite);
  sync_.before_update(device_);  // a lost peer: the step ends here, as the boundary left the state
  optimizer_step(optim_, skip);
  precision_.update(found_inf);
  for (StepHook* h : hooks_) h->after_update();
  if (skip.defined()) r.skipped = skip.gt(0);
  timer_.end_of(Phase::kOptimizer);
  return r;
}

void StepRunner::clip(const std::vector<torch::Tensor>& grads, const std::vector<torch::Tensor>& known) const {
  // Global L2 norm as torch.nn.utils.clip_grad_norm_ computes it, kept on the device: the
  // factor is clamped to 1 instead of branching on the norm on the host. The per-gradient norms
  // come from the non-finite check when it computed them (the same _foreach_norm of the same
  // gradients: the same values), else from one read here (after fp16's unscale).
  torch::NoGradGuard no_grad;
  const auto norms = known.size() == grads.size() ? known : at::_foreach_norm(grads, 2);
  const auto total = at::linalg_vector_norm(at::stack(norms), 2);
  const auto factor = (train_.clip_grad_norm / (total + 1e-6)).clamp_max(1.0);
  at::_foreach_mul_(grads, factor);
}

}  // namespace dlrun::train
