// The run's optimizers, as the loop and the checkpoint see them. One member for now (the
// optimizer of optim.*); a second optimizer (another parameter group's, a discriminator's)
// becomes a second member here, and the checkpoint part stores each under its own file.
#pragma once

#include <torch/torch.h>

#include <string>

#include "config/options.h"
#include "train/step/optim.h"

namespace dlrun::train {

class Optimizers {
 public:
  /// `main`: built by build_optimizer(opts, model); it must outlive this.
  Optimizers(const OptimOptions& opts, torch::optim::Optimizer& main, torch::nn::Module& model)
      : opts_(opts), main_(main), model_(model) {}
  torch::optim::Optimizer& main() { return main_; }
  /// optim.name, as recorded in state.json ("sgd", "adamw").
  std::string type() const { return name_of(opts_.name); }
  /// The main optimizer's state keyed by parameter name (optimizer_state).
  TensorDict state() { return optimizer_state(opts_, main_, model_); }
  /// Inverse of state() (load_optimizer_state): a key that matches no parameter is exit 2.
  void load_state(const TensorDict& state) { load_optimizer_state(opts_, main_, model_, state); }

 private:
  const OptimOptions& opts_;
  torch::optim::Optimizer& main_;
  torch::nn::Module& model_;
};

}  // namespace dlrun::train
