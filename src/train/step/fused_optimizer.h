// What each of dlrun's optimizers is: torch::optim's options, parameter groups and
// per-parameter state (so a checkpoint's optimizer state keeps PyTorch's names), and as its
// step ATen's fused kernel -- the one behind torch.optim's `fused=True`, one kernel over every
// parameter of a group -- which takes two things from the device: the skip flag as its
// found_inf (an fp16 overflow or a skipped non-finite step leaves parameters and state alone,
// decided on the device) and, for a captured CUDA graph, the learning rate (use_device_lr).
// Each optimizer is a file of its own (sgd.cpp, adamw.cpp, rmsprop.cpp: ATen has no fused
// RMSprop, so it takes the multi-tensor kernels and decides a skip on the device itself) with its factory, registered by
// name in optim.cpp (where the factory is declared, beside its registry line); optim.h's
// functions ask this interface, never the optimizer's name.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/options.h"
#include "train/step/optim.h"

namespace dlrun::train {

class FusedOptimizer {
 public:
  virtual ~FusedOptimizer() = default;
  std::optional<torch::Tensor> skip;  ///< float32 0-dim on the parameters' device, or none
  std::optional<torch::Tensor> lr;    ///< float32 0-dim on the parameters' device, or none (the options' lr)

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

/// An optimizer's parameter groups as build_optimizer makes them: the parameters that decay,
/// and those that do not (optim.no_decay_norm_bias: biases and 1-D parameters).
struct ParamGroups {
  std::vector<torch::Tensor> decay, plain;
};

/// Makes one kind of optimizer over `groups` with `opts` (the plain group's weight decay 0).
using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(const OptimOptions& opts, const ParamGroups& groups)>;

}  // namespace dlrun::train
