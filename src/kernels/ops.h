// dlrun's custom operators (schemas: src/kernels/library.cpp), called through the PyTorch
// dispatcher by name, so that code outside the dlrun_kernels object library (the models) needs
// no link-time dependency on it and the device picks the implementation: dlrun's CPU kernels
// for CPU tensors, its CUDA kernels for CUDA tensors, the reference composed of ATen ops for
// anything else (and for what the CPU kernels do not take).
//
//   bn_relu(x, weight, bias, running_mean, running_var, training, momentum, eps)
//     -> (out, save_mean, save_invstd)
//     BatchNorm over (N, H, W) per channel of x (N, C, H, W), then ReLU. Training: the batch's
//     mean and biased variance, accumulated in float32 for float32/fp16/bf16 x (float64 for
//     float64 x); running_mean and running_var (updated in place) move by `momentum` towards the mean and the
//     unbiased variance, as torch.nn.BatchNorm2d does. Eval: the running statistics. out has
//     x's dtype and memory format; save_mean and save_invstd ((C), in that accumulation type) are what backward
//     uses. Differentiable in x, weight and bias.
//   bn_add_relu(x, residual, weight, bias, running_mean, running_var, training, momentum, eps)
//     -> (out, save_mean, save_invstd)
//     relu(BatchNorm(x) + residual), residual of x's shape: the end of a ResNet block. The
//     statistics are bn_relu's. The kernels cast the residual to x's dtype and add it in the
//     accumulation type before the output's one rounding (the unfused `bn(x).add_(residual)`
//     rounds bn(x) first; the reference adds the residual at its own precision).
//     Differentiable in x, residual, weight and bias.
//   conv_bn_relu(x, conv_weight, bn_weight, bn_bias, running_mean, running_var, training,
//                momentum, eps, stride, padding, dilation, groups) -> out
//     conv2d without bias (ATen, cuDNN on CUDA), then bn_relu.
//   conv_bn_add_relu(x, conv_weight, residual, bn_weight, bn_bias, running_mean, running_var,
//                    training, momentum, eps, stride, padding, dilation, groups) -> out
//     conv2d without bias, then bn_add_relu with the residual.
//   conv_bias_relu(x, weight, bias, stride, padding, dilation, groups) -> out
//     relu(conv2d(x, weight, bias)): a conv-BN-ReLU with the BatchNorm folded into the
//     convolution (models/batchnorm.h, fold_batchnorm), for evaluation. The reference composes
//     ATen ops; on CUDA it is one cuDNN fused convolution-bias-activation call. Not
//     differentiable: call it with gradients off.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace dlrun::kernels {

/// How many times conv_bn_relu and conv_bn_add_relu below were called with an input on a device
/// of `type` in this process: tests that must see the fused path run (on CUDA above all) read
/// it. count_fused_call adds one.
int64_t fused_calls(c10::DeviceType type);
void count_fused_call(c10::DeviceType type);

inline std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_relu(const at::Tensor& x, const at::Tensor& weight,
                                                              const at::Tensor& bias, at::Tensor& running_mean,
                                                              at::Tensor& running_var, bool training, double momentum,
                                                              double eps) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("dlrun::bn_relu", "").typed<decltype(bn_relu)>();
  return op.call(x, weight, bias, running_mean, running_var, training, momentum, eps);
}

inline std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_add_relu(const at::Tensor& x, const at::Tensor& residual,
                                                                  const at::Tensor& weight, const at::Tensor& bias,
                                                                  at::Tensor& running_mean, at::Tensor& running_var,
                                                                  bool training, double momentum, double eps) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("dlrun::bn_add_relu", "").typed<decltype(bn_add_relu)>();
  return op.call(x, residual, weight, bias, running_mean, running_var, training, momentum, eps);
}

/// The backward operators (each device its own kernel): from the forward's input, output and
/// statistics, (dx, dweight, dbias) and (dx, dresidual, dweight, dbias). bn_relu_backward's
/// `bias` (the forward's; the autograd wrapper passes it) lets a kernel recompute the ReLU's mask
/// from x instead of reading the output: the mask is then where the forward's float32
/// pre-activation is positive, which differs from out > 0 only where a positive pre-activation
/// rounds to zero in x's dtype.
using BnReluBackwardFn = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
    const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
    bool, const std::optional<at::Tensor>&);
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_relu_backward(
    const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& out, const at::Tensor& weight,
    const at::Tensor& save_mean, const at::Tensor& save_invstd, bool training,
    const std::optional<at::Tensor>& bias = std::nullopt) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("dlrun::bn_relu_backward", "").typed<BnReluBackwardFn>();
  return op.call(grad_out, x, out, weight, save_mean, save_invstd, training, bias);
}

inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> bn_add_relu_backward(
    const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& out, const at::Tensor& weight,
    const at::Tensor& save_mean, const at::Tensor& save_invstd, bool training) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("dlrun::bn_add_relu_backward", "")
                             .typed<decltype(bn_add_relu_backward)>();
  return op.call(grad_out, x, out, weight, save_mean, save_invstd, training);
}

/// cuDNN's fused BatchNorm-activation (CUDA, training; bn_cudnn.cu): (out, save_mean,
/// save_invstd, reserve) and the backward's (dx, dresidual (undefined without `add`), dweight,
/// dbias). The models reach them through conv_bn_relu / conv_bn_add_relu when the CUDA
/// BatchNorm path is cuDNN's (bn_path.h); the self-check and tests call them directly.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> bn_act_cudnn(
    const at::Tensor& x, const std::optional<at::Tensor>& residual, const at::Tensor& weight, const at::Tensor& bias,
    at::Tensor& running_mean, at::Tensor& running_var, double momentum, double eps) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("dlrun::bn_act_cudnn", "").typed<decltype(bn_act_cudnn)>();
  return op.call(x, residual, weight, bias, running_mean, running_var, momentum, eps);
}

inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> bn_act_cudnn_backward(
    const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& out, const at::Tensor& weight,
    const at::Tensor& bias, const at::Tensor& save_mean, const at::Tensor& save_invstd, const at::Tensor& reserve,
    bool add, double eps) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("dlrun::bn_act_cudnn_backward", "")
                             .typed<decltype(bn_act_cudnn_backward)>();
  return op.call(grad_out, x, out, weight, bias, save_mean, save_invstd, reserve, add, eps);
}

inline at::Tensor conv_bn_relu(const at::Tensor& x, const at::Tensor& conv_weight, const at::Tensor& bn_weight,
                               const at::Tensor& bn_bias, at::Tensor& running_mean, at::Tensor& running_var,
                               bool training, double momentum, double eps, c10::IntArrayRef stride,
                               c10::IntArrayRef padding, c10::IntArrayRef dilation, int64_t groups) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("dlrun::conv_bn_relu", "").typed<decltype(conv_bn_relu)>();
  count_fused_call(x.device().type());
  return op.call(x, conv_weight, bn_weight, bn_bias, running_mean, running_var, training, momentum, eps, stride,
                 padding, dilation, groups);
}

inline at::Tensor conv_bn_add_relu(const at::Tensor& x, const at::Tensor& conv_weight, const at::Tensor& residual,
                                   const at::Tensor& bn_weight, const at::Tensor& bn_bias, at::Tensor& running_mean,
                                   at::Tensor& running_var, bool training, double momentum, double eps,
                                   c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                   int64_t groups) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("dlrun::conv_bn_add_relu", "")
                             .typed<decltype(conv_bn_add_relu)>();
  count_fused_call(x.device().type());
  return op.call(x, conv_weight, residual, bn_weight, bn_bias, running_mean, running_var, training, momentum, eps,
                 stride, padding, dilation, groups);
}

inline at::Tensor conv_bias_relu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                 c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                 int64_t groups) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("dlrun::conv_bias_relu", "").typed<decltype(conv_bias_relu)>();
  return op.call(x, weight, bias, stride, padding, dilation, groups);
}

}  // namespace dlrun::kernels
