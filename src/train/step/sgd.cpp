// SGD with momentum, Nesterov and decoupled-from-nothing weight decay, as torch.optim.SGD
// computes it, stepped by ATen's fused kernel (see fused_optimizer.h). Its state: one momentum
// buffer per parameter ("<p>.momentum_buffer").
#include <ATen/ops/_fused_sgd.h>

#include "base/error.h"
#include "train/step/fused_optimizer.h"

namespace dlrun::train {
namespace {

class FusedSGD : public torch::optim::SGD, public FusedOptimizer {
 public:
  using torch::optim::SGD::SGD;

  torch::Tensor step(LossClosure closure = nullptr) override {
    TORCH_CHECK(!closure, "FusedSGD takes no closure");
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
      if (lr)
        at::_fused_sgd_(params, grads, bufs, o.weight_decay(), o.momentum(), group_lr(gi), o.dampening(), o.nesterov(),
                        /*maximize=*/false, /*is_first_step=*/false, /*grad_scale=*/std::nullopt, skip);
      else
        at::_fused_sgd_(params, grads, bufs, o.weight_decay(), o.momentum(), o.lr(), o.dampening(), o.nesterov(),
                        /*maximize=*/false, /*is_first_step=*/false, /*grad_scale=*/std::nullopt, skip);
    }
    return {};
  }

  void save_state(const torch::Tensor& p, const std::string& name, TensorDict& out) override {
    save_momentum(*this, p, name, out);
  }
  void load_state(const torch::Tensor& p, const std::string&, const Saved& get) override { load_momentum(*this, p, get); }
};

}  // namespace

std::unique_ptr<torch::optim::SGDOptions> sgd_options(const OptimOptions& o, double wd) {
  DLRUN_CHECK_INPUT(!o.nesterov || o.momentum > 0, "optim.nesterov needs optim.momentum > 0");
  return std::make_unique<torch::optim::SGDOptions>(
      torch::optim::SGDOptions(o.lr).momentum(o.momentum).nesterov(o.nesterov).weight_decay(wd));
}

torch::Tensor momentum_buffer(torch::optim::Optimizer& opt, const torch::Tensor& p) {
  auto& st = opt.state()[p.unsafeGetTensorImpl()];
  if (!st) {
    auto s = std::make_unique<torch::optim::SGDParamState>();
    s->momentum_buffer(torch::zeros_like(p, at::MemoryFormat::Preserve));
    st = std::move(s);
  }
  return static_cast<torch::optim::SGDParamState&>(*st).momentum_buffer();
}

void save_momentum(torch::optim::Optimizer& opt, const torch::Tensor& p, const std::string& name, TensorDict& out) {
  auto it = opt.state().find(p.unsafeGetTensorImpl());
  if (it == opt.state().end()) return;
  auto& s = static_cast<torch::optim::SGDParamState&>(*it->second);
  if (s.momentum_buffer().defined()) out.emplace_back(name + ".momentum_buffer", s.momentum_buffer());
}

void load_momentum(torch::optim::Optimizer& opt, const torch::Tensor& p, const FusedOptimizer::Saved& get) {
  auto buf = get(".momentum_buffer");
  if (!buf.defined()) return;
  auto s = std::make_unique<torch::optim::SGDParamState>();
  s->momentum_buffer(buf);
  opt.state()[p.unsafeGetTensorImpl()] = std::move(s);
}

std::unique_ptr<torch::optim::Optimizer> make_sgd(const OptimOptions& o, const std::vector<ParamGroup>& g) {
  return fused_optimizer<FusedSGD>(g, o.weight_decay, [&](double wd) { return sgd_options(o, wd); });
}

}  // namespace dlrun::train
