// What each of dlrun's optimizers is: torch::optim's options, parameter groups and
// per-parameter state (so a checkpoint's optimizer state keeps PyTorch's names), and as its
// step ATen's fused kernel -- the one behind torch.optim's `fused=True`, one kernel over every
// parameter of a group -- which takes two things from the device: the skip flag as its
// found_inf (an fp16 overflow or a skipped non-finite step leaves parameters and state alone,
// decided on the device) and, for a captured CUDA graph, the learning rate (use_device_lr).
// Each optimizer is a file of its own (sgd.cpp, adamw.cpp; rmsprop.cpp, lamb.cpp, lars.cpp: ATen
// has no fused kernel for them, so they take the multi-tensor kernels and decide a skip on the
// device themselves, foreach_update below) with its factory, registered by name in optim.cpp
// (where the factory is declared, beside its registry line); optim.h's functions ask this
// interface, never the optimizer's name.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/options.h"
#include "train/step/optim.h"
#include "train/step/param_groups.h"

namespace dlrun::train {

class FusedOptimizer {
 public:
  virtual ~FusedOptimizer() = default;
  std::optional<torch::Tensor> skip;  ///< float32 0-dim on the parameters' device, or none
  std::optional<torch::Tensor> lr;    ///< the schedule's rate, 0-dim on the parameters' device, or none (the options' lr)
  std::vector<double> lr_scale;       ///< per parameter group: its rate is the schedule's times this

  /// Group `i`'s learning rate on the device (use_device_lr): `lr` times its scale.
  torch::Tensor group_lr(size_t i) const {
    const double scale = i < lr_scale.size() ? lr_scale[i] : 1.0;
    return scale == 1.0 ? *lr : *lr * scale;
  }
  /// Group `i`'s learning rate as a 0-dim tensor beside `param`: group_lr(i) after
  /// use_device_lr, else `host_lr` (the group's options') in the same dtype (float32 on CUDA,
  /// float64 on the CPU). The multi-tensor optimizers always step with it, so that a run with the
  /// rate on the device (a captured CUDA graph) computes what one without does.
  torch::Tensor lr_tensor(size_t i, double host_lr, const torch::Tensor& param) const {
    if (lr) return group_lr(i);
    return torch::full({}, host_lr, param.options().dtype(param.is_cuda() ? torch::kFloat32 : torch::kFloat64));
  }

  /// Parameter `p`'s state, if it has any, as named tensors `<name><suffix>`
  /// ("<p>.momentum_buffer"), appended to `out`.
  virtual void save_state(const torch::Tensor& p, const std::string& name, TensorDict& out) = 0;
  /// The optimizer's state map was cleared: a checkpoint's state is about to be loaded.
  virtual void state_cleared() {}
  /// `get(suffix)`: the saved tensor `<name><suffix>`, in `p`'s layout (undefined when absent).
  using Saved = std::function<torch::Tensor(const std::string& suffix)>;
  /// Parameter `p`'s state from a checkpoint (none when its tensors are absent); the state
  /// map was cleared before the first call. An incomplete state: exit 2.
  virtual void load_state(const torch::Tensor& p, const std::string& name, const Saved& get) = 0;
  /// The step counts kept on the device, for tests (0 where there are none).
  virtual size_t device_counts() const { return 0; }
};

using TensorLists = std::vector<std::vector<torch::Tensor>>;

/// `update(lists)`: one step of a multi-tensor optimizer, in place on `lists` (the parameters and
/// their state). With a skip flag (float32 0-dim on their device) it runs on copies, and each
/// tensor takes the copy's value only where the flag is 0: the decision stays on the device.
void foreach_update(const std::optional<torch::Tensor>& skip, TensorLists& lists,
                    const std::function<void(TensorLists&)>& update);

/// An optimizer of type Opt over `groups`: each group's options are `make(its weight decay)` with
/// the rate times its scale, the defaults `make(weight_decay)`; `extra` follow the groups and the
/// defaults in Opt's constructor.
template <typename Opt, typename Make, typename... Extra>
std::unique_ptr<torch::optim::Optimizer> fused_optimizer(const std::vector<ParamGroup>& groups, double weight_decay,
                                                         Make make, Extra&&... extra) {
  std::vector<torch::optim::OptimizerParamGroup> torch_groups;
  std::vector<double> scales;
  for (const auto& g : groups) {
    auto o = make(g.weight_decay);
    o->set_lr(o->get_lr() * g.lr_scale);
    torch_groups.emplace_back(g.params, std::move(o));
    scales.push_back(g.lr_scale);
  }
  auto opt = std::make_unique<Opt>(std::move(torch_groups), *make(weight_decay), std::forward<Extra>(extra)...);
  opt->lr_scale = std::move(scales);
  return opt;
}

/// torch::optim's options for sgd and lars (exit 2: Nesterov without momentum), and for adamw and
/// lamb, with weight decay `wd` (sgd.cpp, adamw.cpp).
std::unique_ptr<torch::optim::SGDOptions> sgd_options(const OptimOptions& o, double wd);
std::unique_ptr<torch::optim::AdamWOptions> adamw_options(const OptimOptions& o, double wd);

/// SGD's per-parameter state, shared by sgd and lars (sgd.cpp): `p`'s momentum buffer in `opt`'s
/// state, created as zeros (momentum * 0 + g is PyTorch's first-step copy of g, and a first step
/// skipped on the device leaves no uninitialised buffer); saved and loaded as "<p>.momentum_buffer".
torch::Tensor momentum_buffer(torch::optim::Optimizer& opt, const torch::Tensor& p);
void save_momentum(torch::optim::Optimizer& opt, const torch::Tensor& p, const std::string& name, TensorDict& out);
void load_momentum(torch::optim::Optimizer& opt, const torch::Tensor& p, const FusedOptimizer::Saved& get);

/// Makes one kind of optimizer over `groups` with `opts` (each group's weight decay and rate scale its own).
using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(const OptimOptions& opts,
                                                                              const std::vector<ParamGroup>& groups)>;

}  // namespace dlrun::train
