// AdamW (decoupled weight decay), as torch.optim.AdamW computes it, stepped by ATen's fused
// kernel (see fused_optimizer.h). Its state per parameter: "<p>.exp_avg", "<p>.exp_avg_sq" and
// "<p>.step" (0-dim int64), the step count kept on the device between checkpoints, as
// PyTorch's fused AdamW keeps state["step"].
#include <ATen/ops/_fused_adamw.h>

#include <unordered_map>

#include "base/error.h"
#include "train/step/fused_optimizer.h"

namespace dlrun::train {
namespace {

class FusedAdamW : public torch::optim::AdamW, public FusedOptimizer {
 public:
  using torch::optim::AdamW::AdamW;

  /// The step count of `p`'s state: the device counter once a step has run, else the state's.
  int64_t step_count(const torch::Tensor& p, const torch::optim::AdamWParamState& s) const {
    auto it = steps_.find(p.unsafeGetTensorImpl());
    return it != steps_.end() && it->second.owner == &s ? it->second.count.item<int64_t>() : s.step();
  }

  size_t device_counts() const override { return steps_.size(); }

  void save_state(const torch::Tensor& p, const std::string& name, TensorDict& out) override {
    auto it = state_.find(p.unsafeGetTensorImpl());
    if (it == state_.end()) return;
    auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
    out.emplace_back(name + ".exp_avg", s.exp_avg());
    out.emplace_back(name + ".exp_avg_sq", s.exp_avg_sq());
    out.emplace_back(name + ".step", torch::tensor(step_count(p, s), torch::kInt64));
  }

  // The states are being replaced (a checkpoint loaded): the device counters belong to states
  // that are gone, and a new state may be allocated at a freed one's address, which the owner
  // check alone would take for the old state (and its count).
  void state_cleared() override { steps_.clear(); }

  void load_state(const torch::Tensor& p, const std::string& name, const Saved& get) override {
    auto a = get(".exp_avg"), b = get(".exp_avg_sq"), st = get(".step");
    if (!a.defined()) return;
    DLRUN_CHECK_INPUT(b.defined() && st.defined(), "optimizer state of {} is incomplete", name);
    auto s = std::make_unique<torch::optim::AdamWParamState>();
    s->exp_avg(a);
    s->exp_avg_sq(b);
    s->step(st.item<int64_t>());
    state_[p.unsafeGetTensorImpl()] = std::move(s);
  }

  torch::Tensor step(LossClosure closure = nullptr) override {
    TORCH_CHECK(!closure, "FusedAdamW takes no closure");
    torch::NoGradGuard no_grad;
    for (size_t gi = 0; gi < param_groups().size(); ++gi) {
      auto& group = param_groups()[gi];
      const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
      std::vector<torch::Tensor> params, grads, avgs, sqs, steps;
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto& st = state_[p.unsafeGetTensorImpl()];
        if (!st) {
          auto s = std::make_unique<torch::optim::AdamWParamState>();
          s->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
          s->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
          st = std::move(s);
        }
        auto& s = static_cast<torch::optim::AdamWParamState&>(*st);
        // The count lives on the device (a skipped step takes it back there); a state loaded
        // from a checkpoint (a new state object) starts it from the loaded count.
        auto& c = steps_[p.unsafeGetTensorImpl()];
        if (c.owner != &s) c = {&s, torch::full({}, static_cast<double>(s.step()), p.options().dtype(torch::kFloat32))};
        params.push_back(p);
        grads.push_back(p.grad());
        avgs.push_back(s.exp_avg());
        sqs.push_back(s.exp_avg_sq());
        steps.push_back(c.count);
      }
      if (params.empty()) continue;
      const auto [beta1, beta2] = o.betas();
      at::_foreach_add_(steps, 1);  // the kernels take the count already incremented, as PyTorch passes it
      if (lr)
        at::_fused_adamw_(params, grads, avgs, sqs, /*max_exp_avg_sqs=*/{}, steps, group_lr(gi), beta1, beta2, o.weight_decay(),
                          o.eps(), /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt, skip);
      else
        at::_fused_adamw_(params, grads, avgs, sqs, /*max_exp_avg_sqs=*/{}, steps, o.lr(), beta1, beta2,
                          o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false,
                          /*grad_scale=*/std::nullopt, skip);
      if (skip) at::_foreach_sub_(steps, std::vector<torch::Tensor>(steps.size(), *skip));
    }
    return {};
  }

 private:
  struct Count {
    const torch::optim::AdamWParamState* owner = nullptr;
    torch::Tensor count;  ///< float32 0-dim, as PyTorch's fused AdamW keeps state["step"]
  };
  std::unordered_map<const void*, Count> steps_;
};

}  // namespace

std::unique_ptr<torch::optim::AdamWOptions> adamw_options(const OptimOptions& o, double wd) {
  DLRUN_CHECK_INPUT(o.betas.size() == 2, "optim.betas: expected [beta1, beta2]");
  return std::make_unique<torch::optim::AdamWOptions>(
      torch::optim::AdamWOptions(o.lr).betas({o.betas.at(0), o.betas.at(1)}).eps(o.eps).weight_decay(wd));
}

std::unique_ptr<torch::optim::Optimizer> make_adamw(const OptimOptions& o, const std::vector<ParamGroup>& g) {
  return fused_optimizer<FusedAdamW>(g, o.weight_decay, [&](double wd) { return adamw_options(o, wd); });
}

}  // namespace dlrun::train
