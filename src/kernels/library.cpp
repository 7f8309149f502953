// The `dlrun` operator namespace of the PyTorch dispatcher: the schemas of dlrun's custom
// operators (what each computes: src/kernels/ops.h). Implementations are registered per
// dispatch key beside them: the reference composed of ATen ops for every backend and the
// autograd wrappers (bn_relu.cpp, conv_bias_relu.cpp), CPU kernels (bn_relu_cpu.cpp), CUDA
// kernels (.cu files).
// This file belongs to the dlrun_kernels object library (cmake/Targets.cmake), so the
// registration reaches every executable even though no code calls it by name.
#include <torch/library.h>

#include <array>
#include <atomic>

#include "kernels/ops.h"

namespace dlrun::kernels {
namespace {
std::array<std::atomic<int64_t>, static_cast<size_t>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES)> calls{};
}  // namespace

int64_t fused_calls(c10::DeviceType type) { return calls.at(static_cast<size_t>(type)).load(); }
void count_fused_call(c10::DeviceType type) { calls.at(static_cast<size_t>(type)).fetch_add(1); }

}  // namespace dlrun::kernels

TORCH_LIBRARY(dlrun, m) {
  // BatchNorm (training: batch statistics, running statistics updated in place; eval: the
  // running statistics) then ReLU. Returns the output and the statistics backward needs:
  // the mean and inverse standard deviation used (one per channel, float32; float64 for a
  // float64 input).
  m.def(
      "bn_relu(Tensor input, Tensor weight, Tensor bias, Tensor(a!) running_mean, Tensor(b!) running_var, "
      "bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)");
  // `bias` (optional): the forward's, so that a kernel may recompute the ReLU's mask from the input
  // instead of reading the output (dlrun's vectorised CUDA kernels do; the others read the output).
  m.def(
      "bn_relu_backward(Tensor grad_out, Tensor input, Tensor output, Tensor weight, Tensor save_mean, "
      "Tensor save_invstd, bool training, Tensor? bias=None) -> (Tensor, Tensor, Tensor)");
  // relu(BatchNorm(input) + residual): the tail of every ResNet block. Same statistics and
  // returns as bn_relu; its backward also returns the residual's gradient.
  m.def(
      "bn_add_relu(Tensor input, Tensor residual, Tensor weight, Tensor bias, Tensor(a!) running_mean, "
      "Tensor(b!) running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)");
  m.def(
      "bn_add_relu_backward(Tensor grad_out, Tensor input, Tensor output, Tensor weight, Tensor save_mean, "
      "Tensor save_invstd, bool training) -> (Tensor, Tensor, Tensor, Tensor)");
  // Convolution (ATen/cuDNN, no bias) then bn_relu: ResNet's and convnet's conv-BN-ReLU.
  m.def(
      "conv_bn_relu(Tensor input, Tensor conv_weight, Tensor bn_weight, Tensor bn_bias, Tensor(a!) running_mean, "
      "Tensor(b!) running_var, bool training, float momentum, float eps, int[2] stride, int[2] padding, "
      "int[2] dilation, int groups) -> Tensor");
  // Convolution (no bias) then bn_add_relu: a BasicBlock's second conv-BN, a Bottleneck's third,
  // with the block's shortcut added before the ReLU.
  m.def(
      "conv_bn_add_relu(Tensor input, Tensor conv_weight, Tensor residual, Tensor bn_weight, Tensor bn_bias, "
      "Tensor(a!) running_mean, Tensor(b!) running_var, bool training, float momentum, float eps, int[2] stride, "
      "int[2] padding, int[2] dilation, int groups) -> Tensor");
  // Training only, on CUDA: relu(BatchNorm(input) [+ residual]) through cuDNN's fused
  // BatchNorm-activation (bn_cudnn.cu; which calls it takes: kernels::cudnn_bn_takes). Returns
  // bn_relu's three and cuDNN's reserve space (bytes), which the backward needs.
  m.def(
      "bn_act_cudnn(Tensor input, Tensor? residual, Tensor weight, Tensor bias, Tensor(a!) running_mean, "
      "Tensor(b!) running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def(
      "bn_act_cudnn_backward(Tensor grad_out, Tensor input, Tensor output, Tensor weight, Tensor bias, "
      "Tensor save_mean, Tensor save_invstd, Tensor reserve, bool add, float eps) -> (Tensor, Tensor, Tensor, Tensor)");
  // Inference: convolution with a bias, then ReLU — a conv-BN-ReLU whose BatchNorm was folded
  // into the convolution's weight and bias. One cuDNN call on CUDA (cuDNN's fused
  // conv-bias-activation); no autograd (evaluation only).
  m.def(
      "conv_bias_relu(Tensor input, Tensor weight, Tensor bias, int[2] stride, int[2] padding, int[2] dilation, "
      "int groups) -> Tensor");
}
