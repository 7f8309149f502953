// LAMB as timm's Lamb computes it (NVIDIA's FusedLAMB variant): the gradients scaled down together
// so that their global norm is at most max_grad_norm (the gradients themselves untouched), Adam's
// bias-corrected moments, plus weight_decay times the parameter (L2, into the update), and each
// parameter's update scaled by its trust ratio |w| / |update| (1 where either norm is 0; at most 1
// with trust_clip) — only for the parameters that decay, unless always_adapt, so that biases and
// norms under optim.no_decay_norm_bias take Adam's plain step. The multi-tensor kernels of timm's
// foreach path; a skipped step is decided on the device (foreach_update), and so is the step
// count (bias corrections read it: a skipped step does not advance it). Its state per parameter,
// PyTorch's names: "<p>.exp_avg", "<p>.exp_avg_sq", "<p>.step" (0-dim int64; timm keeps one
// count per group, all of its parameters' are equal).
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_lerp.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/_foreach_sqrt.h>
#include <ATen/ops/_foreach_sub.h>

#include <cmath>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/error.h"
#include "train/step/fused_optimizer.h"

namespace dlrun::train {
namespace {

using LambState = torch::optim::AdamWParamState;

class FusedLamb : public torch::optim::AdamW, public FusedOptimizer {
 public:
  FusedLamb(std::vector<torch::optim::OptimizerParamGroup> groups, const torch::optim::AdamWOptions& defaults,
            const OptimOptions& o)
      : torch::optim::AdamW(std::move(groups), defaults),
        max_grad_norm_(o.max_grad_norm),
        trust_clip_(o.trust_clip),
        always_adapt_(o.always_adapt) {
    for (size_t gi = 0; gi < param_groups().size(); ++gi)
      for (const auto& p : param_groups()[gi].params()) group_of_[p.unsafeGetTensorImpl()] = gi;
  }

  void save_state(const torch::Tensor& p, const std::string& name, TensorDict& out) override {
    auto it = state_.find(p.unsafeGetTensorImpl());
    if (it == state_.end()) return;
    auto& s = static_cast<LambState&>(*it->second);
    out.emplace_back(name + ".exp_avg", s.exp_avg());
    out.emplace_back(name + ".exp_avg_sq", s.exp_avg_sq());
    out.emplace_back(name + ".step", torch::tensor(count(group_of_.at(p.unsafeGetTensorImpl())), torch::kInt64));
  }

  void state_cleared() override { counts_.clear(); }

  void load_state(const torch::Tensor& p, const std::string& name, const Saved& get) override {
    auto avg = get(".exp_avg"), sq = get(".exp_avg_sq"), st = get(".step");
    if (!avg.defined() && !sq.defined()) return;
    DLRUN_CHECK_INPUT(avg.defined() && sq.defined() && st.defined(),
                      "optimizer state of {} is incomplete for lamb (a checkpoint of other optim.* settings?)", name);
    auto s = std::make_unique<LambState>();
    s->exp_avg(avg);
    s->exp_avg_sq(sq);
    s->step(st.item<int64_t>());
    const size_t gi = group_of_.at(p.unsafeGetTensorImpl());
    counts_[gi] = torch::full({}, static_cast<double>(s->step()), p.options().memory_format(std::nullopt));
    state_[p.unsafeGetTensorImpl()] = std::move(s);
  }

  torch::Tensor step(LossClosure closure = nullptr) override {
    TORCH_CHECK(!closure, "FusedLamb takes no closure");
    torch::NoGradGuard no_grad;
    std::optional<torch::Tensor> clip;  // the divisor that brings the global norm to max_grad_norm
    if (max_grad_norm_ > 0) {
      std::vector<torch::Tensor> all;
      for (auto& group : param_groups())
        for (auto& p : group.params())
          if (p.grad().defined()) all.push_back(p.grad());
      if (!all.empty())
        clip = torch::linalg_vector_norm(torch::stack(at::_foreach_norm(all)), 2, std::nullopt, false, std::nullopt)
                   .div(max_grad_norm_)
                   .clamp_min(1.0);
    }
    for (size_t gi = 0; gi < param_groups().size(); ++gi) {
      auto& group = param_groups()[gi];
      const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
      std::vector<torch::Tensor> params, grads, avgs, sqs;
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto& st = state_[p.unsafeGetTensorImpl()];
        if (!st) {
          auto s = std::make_unique<LambState>();
          s->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
          s->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
          st = std::move(s);
        }
        auto& s = static_cast<LambState&>(*st);
        params.push_back(p);
        grads.push_back(p.grad());
        avgs.push_back(s.exp_avg());
        sqs.push_back(s.exp_avg_sq());
      }
      if (params.empty()) continue;
      auto it = counts_.find(gi);
      if (it == counts_.end()) it = counts_.emplace(gi, torch::zeros({}, params[0].options())).first;
      torch::Tensor& n = it->second;
      n.add_(1);
      const auto g = clip ? at::_foreach_div(grads, *clip) : grads;
      const torch::Tensor lr_t = lr_tensor(gi, o.lr(), params[0]);
      TensorLists lists{params, avgs, sqs};
      foreach_update(skip, lists, [&](TensorLists& l) { update(o, n, lr_t, g, l[0], l[1], l[2]); });
      if (skip) n.sub_(*skip);
    }
    return {};
  }

 private:
  // timm's _multi_tensor_lamb (grad averaging, bias correction, L2 decay), with the bias
  // corrections as tensors (its form for a step count on the device).
  void update(const torch::optim::AdamWOptions& o, const torch::Tensor& n, const torch::Tensor& lr_t,
              const std::vector<torch::Tensor>& grads, std::vector<torch::Tensor>& params,
              std::vector<torch::Tensor>& avgs, std::vector<torch::Tensor>& sqs) const {
    const auto [beta1, beta2] = o.betas();
    at::_foreach_lerp_(avgs, grads, 1 - beta1);
    at::_foreach_mul_(sqs, beta2);
    at::_foreach_addcmul_(sqs, grads, grads, 1 - beta2);
    const torch::Tensor bc1 = 1 - torch::pow(beta1, n), bc2 = 1 - torch::pow(beta2, n);
    auto denom = at::_foreach_sqrt(sqs);
    at::_foreach_div_(denom, bc2.sqrt());
    at::_foreach_add_(denom, o.eps());
    auto upd = at::_foreach_div(avgs, bc1);
    at::_foreach_div_(upd, denom);
    if (o.weight_decay() != 0) at::_foreach_add_(upd, params, o.weight_decay());
    if (o.weight_decay() != 0 || always_adapt_) {
      const torch::Tensor w = torch::stack(at::_foreach_norm(params)), u = torch::stack(at::_foreach_norm(upd));
      torch::Tensor ratio = torch::where(w > 0, torch::where(u > 0, w / u, 1.0), 1.0);
      if (trust_clip_) ratio = ratio.clamp_max(1.0);
      at::_foreach_mul_(upd, ratio.unbind(0));
    }
    at::_foreach_mul_(upd, lr_t);
    at::_foreach_sub_(params, upd);
  }

  // Group gi's step count (0 before its first step).
  int64_t count(size_t gi) const {
    auto it = counts_.find(gi);
    return it == counts_.end() ? 0 : std::llround(it->second.item<double>());
  }

  double max_grad_norm_;
  bool trust_clip_, always_adapt_;
  std::unordered_map<const void*, size_t> group_of_;
  std::unordered_map<size_t, torch::Tensor> counts_;  ///< per group, 0-dim in its parameters' dtype and device
};

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_lamb(const OptimOptions& o, const std::vector<ParamGroup>& g) {
  return fused_optimizer<FusedLamb>(g, o.weight_decay, [&](double wd) { return adamw_options(o, wd); }, o);
}

}  // namespace dlrun::train
