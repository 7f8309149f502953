// dlrun::conv_bias_relu (schema: library.cpp): relu(conv2d(x, weight, bias)), what a conv-BN-ReLU
// becomes once its BatchNorm is folded into the convolution for evaluation.
//
// - Reference (CompositeExplicitAutograd, every device): at::conv2d with the bias, then ReLU in
//   place on the fresh output.
// - CUDA: at::cudnn_convolution_relu, cuDNN's fused convolution + bias + activation in one call.
//   The weight and bias take the input's dtype first (under autocast the input may already be
//   bf16 while the folded weights are float32; the fused call has no autocast rule of its own).
//
// Neither has a backward: the folded weights exist only for an evaluation pass.
#include <ATen/ATen.h>
#include <torch/library.h>

namespace dlrun::kernels {
namespace {

void check_args(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  TORCH_CHECK(x.dim() == 4, "dlrun::conv_bias_relu: input must be (N, C, H, W), got ", x.sizes());
  TORCH_CHECK(weight.dim() == 4, "dlrun::conv_bias_relu: weight must be (out, in/groups, kh, kw), got ", weight.sizes());
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "dlrun::conv_bias_relu: bias must be (",
              weight.size(0), "), got ", bias.sizes());
  TORCH_CHECK(x.is_floating_point(), "dlrun::conv_bias_relu: input must be floating point, got ", x.scalar_type());
}

at::Tensor conv_bias_relu_reference(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                    int64_t groups) {
  check_args(x, weight, bias);
  return at::conv2d(x, weight, bias, stride, padding, dilation, groups).relu_();
}

at::Tensor conv_bias_relu_cuda(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                               c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation,
                               int64_t groups) {
  check_args(x, weight, bias);
  TORCH_CHECK(weight.is_cuda() && bias.is_cuda() && weight.device() == x.device() && bias.device() == x.device(),
              "dlrun::conv_bias_relu: input, weight and bias must be on one CUDA device, got ", x.device(), ", ",
              weight.device(), ", ", bias.device());
  const auto dt = x.scalar_type();
  return at::cudnn_convolution_relu(x, weight.to(dt), bias.to(dt), stride, padding, dilation, groups);
}

}  // namespace

TORCH_LIBRARY_IMPL(dlrun, CompositeExplicitAutograd, m) {
  m.impl("conv_bias_relu", TORCH_FN(conv_bias_relu_reference));
}

TORCH_LIBRARY_IMPL(dlrun, CUDA, m) { m.impl("conv_bias_relu", TORCH_FN(conv_bias_relu_cuda)); }

}  // namespace dlrun::kernels
