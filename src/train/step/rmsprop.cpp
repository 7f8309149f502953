// RMSprop in its two forms. `rmsprop` as torch.optim.RMSprop computes it: the gradient (plus
// weight_decay times the parameter, L2), a running mean of its square with smoothing `alpha`,
// the step divided by the square root of that mean plus `eps` (centered: of the mean square minus
// the squared running mean of the gradient), through a momentum buffer when momentum > 0.
// torchvision's references/classification/train.py builds it with alpha 0.9 and eps 0.0316
// (about the square root of TensorFlow's 1e-3, which TensorFlow adds inside the root), for
// MobileNetV3's recipe. `rmsprop_tf` as timm's RMSpropTF (the EfficientNet and MobileNetV3
// recipes of TensorFlow and timm): the running mean starts at 1, not 0; eps is added inside the
// root; the momentum buffer accumulates the step with the learning rate already in it (TensorFlow's
// order, timm's lr_in_momentum), so a changing rate changes only the steps to come.
// ATen has no fused RMSprop kernel: the step is the multi-tensor (foreach) kernels
// torch.optim.RMSprop's (and timm's) foreach path uses, one per operation over every parameter of a
// group; a skipped step (fp16 overflow, train.on_nonfinite: skip) is decided on the device
// (foreach_update). Its state per parameter, under PyTorch's names: "<p>.square_avg",
// "<p>.momentum_buffer" (momentum > 0), "<p>.grad_avg" (centered), "<p>.step" (0-dim int64).
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcdiv.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_lerp.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_sqrt.h>
#include <ATen/ops/_foreach_sub.h>

#include <utility>
#include <vector>

#include "base/error.h"
#include "train/step/fused_optimizer.h"

namespace dlrun::train {
namespace {

using State = torch::optim::RMSpropParamState;

class FusedRMSprop : public torch::optim::RMSprop, public FusedOptimizer {
 public:
  FusedRMSprop(std::vector<torch::optim::OptimizerParamGroup> groups, const torch::optim::RMSpropOptions& defaults,
               bool tf)
      : torch::optim::RMSprop(std::move(groups), defaults), tf_(tf) {}

  void save_state(const torch::Tensor& p, const std::string& name, TensorDict& out) override {
    auto it = state_.find(p.unsafeGetTensorImpl());
    if (it == state_.end()) return;
    auto& s = static_cast<State&>(*it->second);
    out.emplace_back(name + ".square_avg", s.square_avg());
    if (s.momentum_buffer().defined()) out.emplace_back(name + ".momentum_buffer", s.momentum_buffer());
    if (s.grad_avg().defined()) out.emplace_back(name + ".grad_avg", s.grad_avg());
    out.emplace_back(name + ".step", torch::tensor(s.step(), torch::kInt64));
  }

  void load_state(const torch::Tensor& p, const std::string& name, const Saved& get) override {
    auto square = get(".square_avg"), momentum = get(".momentum_buffer"), grad_avg = get(".grad_avg"), st = get(".step");
    if (!square.defined()) return;
    const auto& o = static_cast<const torch::optim::RMSpropOptions&>(defaults());
    DLRUN_CHECK_INPUT(st.defined() && (o.momentum() == 0 || momentum.defined()) && (!o.centered() || grad_avg.defined()),
                      "optimizer state of {} is incomplete for {}{}{} (a checkpoint of other optim.* settings?)",
                      name, tf_ ? "rmsprop_tf" : "rmsprop", o.momentum() > 0 ? " with momentum" : "", o.centered() ? ", centered" : "");
    auto s = std::make_unique<State>();
    s->square_avg(square);
    if (o.momentum() > 0) s->momentum_buffer(momentum);
    if (o.centered()) s->grad_avg(grad_avg);
    s->step(st.item<int64_t>());
    state_[p.unsafeGetTensorImpl()] = std::move(s);
  }

  torch::Tensor step(LossClosure closure = nullptr) override {
    TORCH_CHECK(!closure, "FusedRMSprop takes no closure");
    torch::NoGradGuard no_grad;
    for (size_t gi = 0; gi < param_groups().size(); ++gi) {
      auto& group = param_groups()[gi];
      const auto& o = static_cast<const torch::optim::RMSpropOptions&>(group.options());
      std::vector<torch::Tensor> params, grads, squares, bufs, grad_avgs;
      std::vector<State*> states;
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto& st = state_[p.unsafeGetTensorImpl()];
        if (!st) {
          auto s = std::make_unique<State>();
          s->square_avg(tf_ ? torch::ones_like(p, at::MemoryFormat::Preserve)
                            : torch::zeros_like(p, at::MemoryFormat::Preserve));
          if (o.momentum() > 0) s->momentum_buffer(torch::zeros_like(p, at::MemoryFormat::Preserve));
          if (o.centered()) s->grad_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
          st = std::move(s);
        }
        auto& s = static_cast<State&>(*st);
        states.push_back(&s);
        params.push_back(p);
        grads.push_back(p.grad());
        squares.push_back(s.square_avg());
        if (o.momentum() > 0) bufs.push_back(s.momentum_buffer());
        if (o.centered()) grad_avgs.push_back(s.grad_avg());
      }
      if (params.empty()) continue;
      TensorLists lists{params, squares, bufs, grad_avgs};
      // rmsprop: the host rate where it has one (torch.optim.RMSprop's arithmetic, bit for bit);
      // rmsprop_tf: always a tensor (timm's form for one), so the device rate changes nothing.
      const std::optional<torch::Tensor> lr_t =
          tf_ ? std::optional<torch::Tensor>(lr_tensor(gi, o.lr(), params[0]))
              : lr ? std::optional<torch::Tensor>(group_lr(gi)) : std::nullopt;
      foreach_update(skip, lists, [&](TensorLists& l) {
        if (tf_)
          update_tf(o, *lr_t, l[0], grads, l[1], l[2], l[3]);
        else
          update(o, lr_t, l[0], grads, l[1], l[2], l[3]);
      });
      // The count is PyTorch's state["step"], which RMSprop's update does not read: kept on the
      // host, it counts the steps taken, skipped ones included (the skip is the device's).
      for (State* s : states) s->step(s->step() + 1);
    }
    return {};
  }

 private:
  // torch.optim.RMSprop's _multi_tensor_rmsprop, in place on the given tensors.
  static void update(const torch::optim::RMSpropOptions& o, const std::optional<torch::Tensor>& lr_t,
              std::vector<torch::Tensor>& params,
              std::vector<torch::Tensor> grads, std::vector<torch::Tensor>& squares, std::vector<torch::Tensor>& bufs,
              std::vector<torch::Tensor>& grad_avgs) {
    if (o.weight_decay() != 0) grads = at::_foreach_add(grads, params, o.weight_decay());
    at::_foreach_mul_(squares, o.alpha());
    at::_foreach_addcmul_(squares, grads, grads, 1 - o.alpha());
    std::vector<torch::Tensor> avg;
    if (o.centered()) {
      at::_foreach_lerp_(grad_avgs, grads, 1 - o.alpha());
      avg = at::_foreach_addcmul(squares, grad_avgs, grad_avgs, -1);
      at::_foreach_sqrt_(avg);
    } else {
      avg = at::_foreach_sqrt(squares);
    }
    at::_foreach_add_(avg, o.eps());
    const double lr = o.lr();
    if (o.momentum() > 0) {
      at::_foreach_mul_(bufs, o.momentum());
      at::_foreach_addcdiv_(bufs, grads, avg);
      if (lr_t) {
        at::_foreach_add_(params, at::_foreach_mul(bufs, *lr_t), -1);
      } else {
        at::_foreach_add_(params, bufs, -lr);
      }
    } else if (lr_t) {
      at::_foreach_add_(params, at::_foreach_mul(at::_foreach_div(grads, avg), *lr_t), -1);
    } else {
      at::_foreach_addcdiv_(params, grads, avg, -lr);
    }
  }

  // timm's _multi_tensor_rmsprop_tf (lr_in_momentum, L2 decay) with the rate a tensor, in place on
  // the given tensors.
  static void update_tf(const torch::optim::RMSpropOptions& o, const torch::Tensor& lr_t,
                        std::vector<torch::Tensor>& params, std::vector<torch::Tensor> grads,
                        std::vector<torch::Tensor>& squares, std::vector<torch::Tensor>& bufs,
                        std::vector<torch::Tensor>& grad_avgs) {
    const double one_minus_alpha = 1 - o.alpha();
    if (o.weight_decay() != 0) grads = at::_foreach_add(grads, params, o.weight_decay());
    auto grad_sq = at::_foreach_mul(grads, grads);  // TensorFlow's order: avg += (g^2 - avg) (1 - alpha)
    at::_foreach_sub_(grad_sq, squares);
    at::_foreach_add_(squares, grad_sq, one_minus_alpha);
    std::vector<torch::Tensor> avg;
    if (o.centered()) {
      auto diff = at::_foreach_sub(grads, grad_avgs);
      at::_foreach_add_(grad_avgs, diff, one_minus_alpha);
      avg = at::_foreach_addcmul(squares, grad_avgs, grad_avgs, -1);
      at::_foreach_add_(avg, o.eps());
    } else {
      avg = at::_foreach_add(squares, o.eps());
    }
    at::_foreach_sqrt_(avg);  // eps inside the root
    auto step = at::_foreach_div(grads, avg);
    at::_foreach_mul_(step, lr_t);
    if (o.momentum() > 0) {
      at::_foreach_mul_(bufs, o.momentum());
      at::_foreach_add_(bufs, step);  // the rate goes into the buffer
      at::_foreach_sub_(params, bufs);
    } else {
      at::_foreach_sub_(params, step);
    }
  }

  bool tf_;
};

}  // namespace

namespace {

std::unique_ptr<torch::optim::Optimizer> make(const OptimOptions& o, const std::vector<ParamGroup>& g, bool tf) {
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::RMSpropOptions>(torch::optim::RMSpropOptions(o.lr)
                                                              .alpha(o.alpha)
                                                              .eps(o.eps)
                                                              .weight_decay(wd)
                                                              .momentum(o.momentum)
                                                              .centered(o.centered));
  };
  return fused_optimizer<FusedRMSprop>(g, o.weight_decay, options, tf);
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_rmsprop(const OptimOptions& o, const std::vector<ParamGroup>& g) {
  return make(o, g, false);
}

std::unique_ptr<torch::optim::Optimizer> make_rmsprop_tf(const OptimOptions& o, const std::vector<ParamGroup>& g) {
  return make(o, g, true);
}

}  // namespace dlrun::train
