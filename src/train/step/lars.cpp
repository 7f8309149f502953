// LARS as timm's Lars computes it (NVIDIA apex's LARC): for the parameters that decay (all of them
// with always_adapt), the gradient plus weight_decay times the parameter, scaled by the trust
// ratio trust_coeff |w| / (|g| + weight_decay |w| + eps) (1 where either norm is 0; with
// trust_clip, LARC's clipping: the ratio over the learning rate, at most 1), then SGD's momentum
// (dampening 0, optionally Nesterov) and step. Biases and norms under optim.no_decay_norm_bias
// take SGD's plain step: the usual exclusion. The multi-tensor kernels of timm's foreach path; a
// skipped step is decided on the device (foreach_update). Its state per parameter:
// "<p>.momentum_buffer" (momentum > 0), as torch.optim.SGD names it.
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_norm.h>
#include <ATen/ops/_foreach_sub.h>

#include <utility>
#include <vector>

#include "base/error.h"
#include "train/step/fused_optimizer.h"

namespace dlrun::train {
namespace {

class FusedLars : public torch::optim::SGD, public FusedOptimizer {
 public:
  FusedLars(std::vector<torch::optim::OptimizerParamGroup> groups, const torch::optim::SGDOptions& defaults,
            const OptimOptions& o)
      : torch::optim::SGD(std::move(groups), defaults),
        trust_coeff_(o.trust_coeff),
        eps_(o.eps),
        trust_clip_(o.trust_clip),
        always_adapt_(o.always_adapt) {}

  void save_state(const torch::Tensor& p, const std::string& name, TensorDict& out) override {
    save_momentum(*this, p, name, out);
  }
  void load_state(const torch::Tensor& p, const std::string&, const Saved& get) override { load_momentum(*this, p, get); }

  torch::Tensor step(LossClosure closure = nullptr) override {
    TORCH_CHECK(!closure, "FusedLars takes no closure");
    torch::NoGradGuard no_grad;
    for (size_t gi = 0; gi < param_groups().size(); ++gi) {
      auto& group = param_groups()[gi];
      const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
      std::vector<torch::Tensor> params, grads, bufs;
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        params.push_back(p);
        grads.push_back(p.grad());
        if (o.momentum() != 0) bufs.push_back(momentum_buffer(*this, p));
      }
      if (params.empty()) continue;
      const torch::Tensor lr_t = lr_tensor(gi, o.lr(), params[0]);
      TensorLists lists{params, bufs};
      foreach_update(skip, lists, [&](TensorLists& l) { update(o, lr_t, grads, l[0], l[1]); });
    }
    return {};
  }

 private:
  // timm's _multi_tensor_lars (dampening 0), in place on the given tensors.
  void update(const torch::optim::SGDOptions& o, const torch::Tensor& lr_t,
              const std::vector<torch::Tensor>& grads, std::vector<torch::Tensor>& params,
              std::vector<torch::Tensor>& bufs) const {
    const double wd = o.weight_decay();
    std::vector<torch::Tensor> g = grads;
    if (wd != 0 || always_adapt_) {
      const torch::Tensor w = torch::stack(at::_foreach_norm(params)), n = torch::stack(at::_foreach_norm(grads));
      torch::Tensor ratio = trust_coeff_ * w / (n + w * wd + eps_);
      ratio = torch::where(w > 0, torch::where(n > 0, ratio, 1.0), 1.0);
      if (trust_clip_) ratio = (ratio / lr_t).clamp_max(1.0);
      g = at::_foreach_add(grads, params, wd);  // not in place: the gradients stay as they are
      at::_foreach_mul_(g, ratio.unbind(0));
    }
    if (o.momentum() != 0) {
      at::_foreach_mul_(bufs, o.momentum());
      at::_foreach_add_(bufs, g);
      g = o.nesterov() ? at::_foreach_add(g, bufs, o.momentum()) : bufs;
    }
    at::_foreach_sub_(params, at::_foreach_mul(g, lr_t));
  }

  double trust_coeff_, eps_;
  bool trust_clip_, always_adapt_;
};

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_lars(const OptimOptions& o, const std::vector<ParamGroup>& g) {
  return fused_optimizer<FusedLars>(g, o.weight_decay, [&](double wd) { return sgd_options(o, wd); }, o);
}

}  // namespace dlrun::train
