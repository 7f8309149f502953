// Optimizers (sgd, adamw, rmsprop, rmsprop_tf, lamb, lars) built from OptimOptions over the
// parameter groups of train/step/param_groups.h, and their state as named tensors so a checkpoint
// stores it in a Python-loadable dict ("<param>.momentum_buffer", ...).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "config/options.h"

namespace dlrun::train {

using TensorDict = std::vector<std::pair<std::string, torch::Tensor>>;

/// Build the optimizer over `model`'s parameters, in the groups param_groups() makes (weight
/// decay off norms, biases and embeddings; layer-wise rate scales). Its step() is ATen's fused
/// kernel (`_fused_sgd_` / `_fused_adamw_`, PyTorch's `fused=True`; rmsprop, rmsprop_tf, lamb,
/// lars: the multi-tensor kernels of their references' foreach paths); its options and state
/// are torch::optim's.
std::unique_ptr<torch::optim::Optimizer> build_optimizer(const OptimOptions& opts, torch::nn::Module& model);

/// One update of `opt` (from build_optimizer) that leaves parameters and state untouched when
/// `skip` (float32 0-dim on the parameters' device) is 1; undefined: always update. The
/// decision stays on the device.
void optimizer_step(torch::optim::Optimizer& opt, const torch::Tensor& skip);

/// Set the schedule's learning rate: every parameter group's is `lr` times its scale
/// (optim.layer_decay), and the device copy, after use_device_lr, is `lr`.
void set_lr(torch::optim::Optimizer& opt, double lr);

/// From now on `opt` (from build_optimizer) reads its learning rate from a 0-dim tensor on
/// `device` that set_lr() fills: the fused kernels' tensor-lr form, which a captured CUDA graph
/// needs (it replays kernels with the arguments they were captured with; a tensor argument is
/// read at replay). float32 on CUDA (what its kernels read), float64 on the CPU, so that the
/// updates equal the host form's.
void use_device_lr(torch::optim::Optimizer& opt, const torch::Device& device);

/// Optimizer state keyed by parameter name: sgd "<p>.momentum_buffer"; adamw "<p>.exp_avg",
/// "<p>.exp_avg_sq", "<p>.step" (0-dim int64); rmsprop "<p>.square_avg", "<p>.momentum_buffer",
/// "<p>.grad_avg", "<p>.step" (rmsprop_tf the same); lamb "<p>.exp_avg", "<p>.exp_avg_sq",
/// "<p>.step"; lars "<p>.momentum_buffer". Parameters without state are absent.
TensorDict optimizer_state(const OptimOptions& opts, torch::optim::Optimizer& opt, torch::nn::Module& model);

/// How many parameters' step counts the fused AdamW keeps on the device (0 for SGD): one per
/// parameter once a step has run, none right after load_optimizer_state (whose states replace
/// the ones the counters belonged to). For tests.
size_t device_step_counts(const torch::optim::Optimizer& opt);

/// Inverse of optimizer_state(); tensors are moved to each parameter's device.
/// Unknown keys are a checkpoint error (exit 2).
void load_optimizer_state(const OptimOptions& opts, torch::optim::Optimizer& opt, torch::nn::Module& model,
                          const TensorDict& state);

}  // namespace dlrun::train
