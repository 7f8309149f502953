// cuDNN's fused BatchNorm-activation as the CUDA training path of conv_bn_relu and
// conv_bn_add_relu (bn_cudnn.cu, bn_cudnn_autograd.cpp; which path runs where: bn_path.h).
#pragma once

#include <ATen/core/Tensor.h>

namespace dlrun::kernels {

/// Whether the BatchNorm input `y` (a convolution's output) goes to cuDNN's fused operator: a
/// CUDA training call while the CUDA BatchNorm path is cuDNN's, cuDNN takes its kind
/// (cudnn_bn_takes) and its sizes (more than one value per channel, fewer than 2^31 values, a
/// batch of at most 880,801: PyTorch's own limits for cuDNN's BatchNorm), float32 contiguous
/// parameters and statistics, and cuDNN passed its check for y's dtype and channel count
/// (self_check.h's cudnn_checked: run on the first such call; a refusal hands those calls to
/// dlrun's kernels with a warning).
bool takes_cudnn_bn(const at::Tensor& y, const at::Tensor& weight, const at::Tensor& bias,
                    const at::Tensor& running_mean, const at::Tensor& running_var, bool training, double eps);

/// Whether cuDNN's fused BatchNorm-activation takes a (N, C, H, W) input of these sizes in training.
bool cudnn_bn_sizes_ok(int64_t n, int64_t c, int64_t h, int64_t w);

/// relu(BatchNorm(y) [+ residual]) through cuDNN, differentiable in y, residual, weight and bias;
/// running statistics updated in place. `residual` undefined: no add. Call it where
/// takes_cudnn_bn holds.
at::Tensor bn_act_cudnn_autograd(const at::Tensor& y, const at::Tensor& residual, const at::Tensor& weight,
                                 const at::Tensor& bias, at::Tensor& running_mean, at::Tensor& running_var,
                                 double momentum, double eps);

}  // namespace dlrun::kernels
