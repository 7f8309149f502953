// The ATen-composed references of dlrun's BatchNorm operators (bn_relu.cpp), for the device
// kernels to fall back on where they take no fast path (the CPU kernels: dtypes and strides
// they do not handle). What each computes: ops.h. `residual` may be undefined (bn_relu).
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

namespace dlrun::kernels::reference {

/// relu(BatchNorm(x) [+ residual]) -> (out, save_mean, save_invstd).
std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_add_relu(const at::Tensor& x, const at::Tensor& residual,
                                                           const at::Tensor& weight, const at::Tensor& bias,
                                                           at::Tensor& running_mean, at::Tensor& running_var,
                                                           bool training, double momentum, double eps);

/// Its backward -> (dx, g, dweight, dbias), g = grad_out where output > 0 (the residual's
/// gradient; bn_relu's backward drops it).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> bn_add_relu_backward(
    const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& out, const at::Tensor& weight,
    const at::Tensor& mean, const at::Tensor& invstd, bool training);

/// The reference's and the CPU kernels' checks of bn_relu's / bn_add_relu's arguments, with
/// errors that name what was received (`residual` may be undefined); the CUDA kernels make the
/// same checks in their own file.
void check_bn_inputs(const char* op, const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                     const at::Tensor& bias, const at::Tensor& running_mean, const at::Tensor& running_var);

}  // namespace dlrun::kernels::reference
