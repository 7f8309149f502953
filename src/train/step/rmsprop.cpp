// RMSprop as torch.optim.RMSprop computes it: the gradient (plus weight_decay times the
// parameter, L2), a running mean of its square with smoothing `alpha`, the step divided by the
// square root of that mean plus `eps` (centered: of the mean square minus the squared running
// mean of the gradient), through a momentum buffer when momentum > 0. torchvision's
// references/classification/train.py builds it with alpha 0.9 and eps 0.0316 (about the square
// root of TensorFlow's 1e-3, which TensorFlow adds inside the root), for MobileNetV3's recipe. ATen has no fused RMSprop kernel: the step is the multi-tensor (foreach)
// kernels torch.optim.RMSprop's foreach path uses, one per operation over every parameter of a
// group. A skipped step (fp16 overflow, train.on_nonfinite: skip) is decided on the device: the
// update then runs on copies, which are kept or dropped per tensor by the skip flag.
// Its state per parameter, under PyTorch's names: "<p>.square_avg", "<p>.momentum_buffer"
// (momentum > 0), "<p>.grad_avg" (centered), "<p>.step" (0-dim int64).
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_addcdiv.h>
#include <ATen/ops/_foreach_addcmul.h>
#include <ATen/ops/_foreach_div.h>
#include <ATen/ops/_foreach_lerp.h>
#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/_foreach_sqrt.h>

#include <utility>
#include <vector>

#include "base/error.h"
#include "train/step/fused_optimizer.h"

namespace dlrun::train {
namespace {

using State = torch::optim::RMSpropParamState;

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& ts) {
  std::vector<torch::Tensor> out;
  for (const auto& t : ts) out.push_back(t.clone(at::MemoryFormat::Preserve));
  return out;
}

class FusedRMSprop : public torch::optim::RMSprop, public FusedOptimizer {
 public:
  using torch::optim::RMSprop::RMSprop;

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
                      "optimizer state of {} is incomplete for rmsprop{}{} (a checkpoint of other optim.* settings?)",
                      name, o.momentum() > 0 ? " with momentum" : "", o.centered() ? ", centered" : "");
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
    for (auto& group : param_groups()) {
      const auto& o = static_cast<const torch::optim::RMSpropOptions&>(group.options());
      std::vector<torch::Tensor> params, grads, squares, bufs, grad_avgs;
      std::vector<State*> states;
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto& st = state_[p.unsafeGetTensorImpl()];
        if (!st) {
          auto s = std::make_unique<State>();
          s->square_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
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
      // A step that may be skipped updates copies, kept below only where the flag says 0.
      std::vector<torch::Tensor> P = skip ? copies(params) : params, SQ = skip ? copies(squares) : squares,
                                 B = skip ? copies(bufs) : bufs, GA = skip ? copies(grad_avgs) : grad_avgs;
      update(o, P, grads, SQ, B, GA);
      if (skip) {
        const torch::Tensor keep_old = *skip > 0;
        using Lists = std::pair<std::vector<torch::Tensor>*, const std::vector<torch::Tensor>*>;
        for (const Lists& l : {Lists{&params, &P}, Lists{&squares, &SQ}, Lists{&bufs, &B}, Lists{&grad_avgs, &GA}})
          for (size_t i = 0; i < l.first->size(); ++i)
            (*l.first)[i].copy_(torch::where(keep_old, (*l.first)[i], (*l.second)[i]));
      }
      // The count is PyTorch's state["step"], which RMSprop's update does not read: kept on the
      // host, it counts the steps taken, skipped ones included (the skip is the device's).
      for (State* s : states) s->step(s->step() + 1);
    }
    return {};
  }

 private:
  // torch.optim.RMSprop's _multi_tensor_rmsprop, in place on the given tensors.
  void update(const torch::optim::RMSpropOptions& o, std::vector<torch::Tensor>& params,
              std::vector<torch::Tensor> grads, std::vector<torch::Tensor>& squares, std::vector<torch::Tensor>& bufs,
              std::vector<torch::Tensor>& grad_avgs) const {
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
      if (this->lr) {
        at::_foreach_add_(params, at::_foreach_mul(bufs, *this->lr), -1);
      } else {
        at::_foreach_add_(params, bufs, -lr);
      }
    } else if (this->lr) {
      at::_foreach_add_(params, at::_foreach_mul(at::_foreach_div(grads, avg), *this->lr), -1);
    } else {
      at::_foreach_addcdiv_(params, grads, avg, -lr);
    }
  }
};

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_rmsprop(const OptimOptions& o, const ParamGroups& g) {
  auto make = [&](double wd) {
    return std::make_unique<torch::optim::RMSpropOptions>(torch::optim::RMSpropOptions(o.lr)
                                                              .alpha(o.alpha)
                                                              .eps(o.eps)
                                                              .weight_decay(wd)
                                                              .momentum(o.momentum)
                                                              .centered(o.centered));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(g.decay, make(o.weight_decay));
  if (!g.plain.empty()) groups.emplace_back(g.plain, make(0.0));
  return std::make_unique<FusedRMSprop>(groups, *make(o.weight_decay));
}

}  // namespace dlrun::train
