// bn_relu, bn_add_relu and their convolution-first forms (what they compute: ops.h): the
// reference composed of ATen ops, registered for every backend (CompositeExplicitAutograd; the
// CPU and CUDA kernels registered for their own keys take precedence), the autograd wrappers,
// and conv_bn_relu / conv_bn_add_relu as conv2d + the BatchNorm operator (or, for a CUDA
// training call while the CUDA path is cuDNN's, cuDNN's fused BatchNorm-activation: bn_cudnn.h).
//
// What backward keeps: the BatchNorm input x (to rebuild x̂ = (x - mean) * invstd, needed
// everywhere, masked or not, by dx), the output (its sign is ReLU's mask: out > 0 exactly where
// the pre-activation is; the next layer keeps the same tensor as its input anyway, so it costs
// no memory, where a separate 1-bit mask would), the mean and inverse standard deviation (C
// floats each), the weight, and for bn_relu the bias: dlrun's vectorised CUDA kernels recompute
// the mask from x and the bias instead of reading the output (one activation stream less in each
// backward pass; ops.h says where the two masks can differ). The unfused sequence keeps the same
// (BN its input, ReLU its output); the pre-activation BN output, which it also materialises, is
// never stored here.
#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "kernels/bn_cudnn.h"
#include "kernels/ops.h"
#include "kernels/reference.h"

namespace dlrun::kernels {

namespace reference {

namespace {

const std::vector<int64_t> kShape = {1, -1, 1, 1};  // a per-channel vector against (N, C, H, W)

int64_t per_channel(const at::Tensor& x) { return x.size(0) * x.size(2) * x.size(3); }

// Statistics and arithmetic in float32 for float32/fp16/bf16 inputs, float64 for float64 (the
// "opmath" type, as ATen's BatchNorm).
at::ScalarType acc_type(const at::Tensor& x) { return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat; }

}  // namespace

void check_bn_inputs(const char* op, const at::Tensor& x, const at::Tensor& residual, const at::Tensor& weight,
                     const at::Tensor& bias, const at::Tensor& running_mean, const at::Tensor& running_var) {
  TORCH_CHECK(x.dim() == 4, op, ": expected input of shape (N, C, H, W), got ", x.sizes());
  TORCH_CHECK(x.is_floating_point(), op, ": expected a floating input, got ", x.scalar_type());
  const int64_t c = x.size(1);
  for (const auto& [name, t] : {std::pair{"weight", &weight}, std::pair{"bias", &bias},
                                std::pair{"running_mean", &running_mean}, std::pair{"running_var", &running_var}}) {
    TORCH_CHECK(t->defined() && t->dim() == 1 && t->size(0) == c, op, ": expected ", name, " of shape (", c,
                ") for input of shape ", x.sizes(), ", got ", t->defined() ? t->sizes() : c10::IntArrayRef{});
    TORCH_CHECK(t->device() == x.device(), op, ": ", name, " is on ", t->device(), ", input on ", x.device());
  }
  if (residual.defined()) {
    TORCH_CHECK(residual.sizes() == x.sizes(), op, ": expected residual of the input's shape ", x.sizes(), ", got ",
                residual.sizes());
    TORCH_CHECK(residual.device() == x.device(), op, ": residual is on ", residual.device(), ", input on ",
                x.device());
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_add_relu(const at::Tensor& x, const at::Tensor& residual,
                                                           const at::Tensor& weight, const at::Tensor& bias,
                                                           at::Tensor& running_mean, at::Tensor& running_var,
                                                           bool training, double momentum, double eps) {
  const char* op = residual.defined() ? "dlrun::bn_add_relu" : "dlrun::bn_relu";
  check_bn_inputs(op, x, residual, weight, bias, running_mean, running_var);
  const auto acc = acc_type(x);
  const auto x32 = x.to(acc);
  at::Tensor mean, invstd;
  if (training) {
    const int64_t n = per_channel(x);
    TORCH_CHECK(n > 1, op, ": training needs more than one value per channel, got input of shape ", x.sizes());
    auto [var, m] = at::var_mean(x32, {0, 2, 3}, /*correction=*/0, /*keepdim=*/false);
    mean = m;
    invstd = (var + eps).rsqrt();
    at::NoGradGuard no_grad;
    running_mean.mul_(1 - momentum).add_(mean.to(running_mean.scalar_type()), momentum);
    running_var.mul_(1 - momentum)
        .add_((var * (static_cast<double>(n) / static_cast<double>(n - 1))).to(running_var.scalar_type()), momentum);
  } else {
    mean = running_mean.to(acc, false, /*copy=*/true);  // saved by autograd: not the buffer itself
    invstd = (running_var.to(acc) + eps).rsqrt();
  }
  const auto scale = (invstd * weight.to(acc)).view(kShape);
  auto pre = (x32 - mean.view(kShape)) * scale + bias.to(acc).view(kShape);
  if (residual.defined()) pre.add_(residual.to(acc));
  return {pre.relu_().to(x.scalar_type()).contiguous(x.suggest_memory_format()), mean, invstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> bn_add_relu_backward(
    const at::Tensor& grad_out, const at::Tensor& x, const at::Tensor& out, const at::Tensor& weight,
    const at::Tensor& mean, const at::Tensor& invstd, bool training) {
  const auto acc = acc_type(x);
  // ReLU's mask, from the output's sign; a select (as ReLU's own backward), so an inf or NaN
  // gradient where the output is 0 gives 0.
  const auto g = at::where(out.gt(0), grad_out.to(acc), 0);
  const auto xhat = (x.to(acc) - mean.view(kShape)) * invstd.view(kShape);
  const auto sum_dy = g.sum({0, 2, 3});
  const auto sum_dy_xhat = (g * xhat).sum({0, 2, 3});
  const auto scale = (weight.to(acc) * invstd).view(kShape);
  at::Tensor gx;
  if (training) {  // the statistics depend on x too
    const auto n = static_cast<double>(per_channel(x));
    gx = scale * (g - (sum_dy / n).view(kShape) - xhat * (sum_dy_xhat / n).view(kShape));
  } else {
    gx = g * scale;
  }
  const auto format = x.suggest_memory_format();
  return {gx.to(x.scalar_type()).contiguous(format), g.to(x.scalar_type()).contiguous(format),
          sum_dy_xhat.to(weight.scalar_type()), sum_dy.to(weight.scalar_type())};
}

}  // namespace reference

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_relu_reference(const at::Tensor& x, const at::Tensor& weight,
                                                                 const at::Tensor& bias, at::Tensor& running_mean,
                                                                 at::Tensor& running_var, bool training,
                                                                 double momentum, double eps) {
  return reference::bn_add_relu(x, at::Tensor(), weight, bias, running_mean, running_var, training, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_relu_backward_reference(const at::Tensor& grad_out,
                                                                          const at::Tensor& x, const at::Tensor& out,
                                                                          const at::Tensor& weight,
                                                                          const at::Tensor& mean,
                                                                          const at::Tensor& invstd, bool training,
                                                                          const std::optional<at::Tensor>& /*bias*/) {
  auto [gx, g, gw, gb] = reference::bn_add_relu_backward(grad_out, x, out, weight, mean, invstd, training);
  return {gx, gw, gb};
}

void save(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& out, const at::Tensor& weight,
          const at::Tensor& mean, const at::Tensor& invstd, bool training) {
  ctx->save_for_backward({x, out, weight, mean, invstd});
  ctx->saved_data["training"] = training;
  ctx->mark_non_differentiable({mean, invstd});
}

class BnReluFunction : public torch::autograd::Function<BnReluFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                               const at::Tensor& bias, at::Tensor running_mean, at::Tensor running_var, bool training,
                               double momentum, double eps) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, mean, invstd] = bn_relu(x, weight, bias, running_mean, running_var, training, momentum, eps);
    save(ctx, x, out, weight, mean, invstd, training);
    ctx->saved_data["bias"] = bias;  // (the mask's recomputation from x: ops.h)
    return {out, mean, invstd};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    auto [gx, gw, gb] = bn_relu_backward(grads.at(0), s[0], s[1], s[2], s[3], s[4],
                                            ctx->saved_data["training"].toBool(),
                                            ctx->saved_data["bias"].toTensor().detach());
    return {gx, gw, gb, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

class BnAddReluFunction : public torch::autograd::Function<BnAddReluFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& residual,
                               const at::Tensor& weight, const at::Tensor& bias, at::Tensor running_mean,
                               at::Tensor running_var, bool training, double momentum, double eps) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, mean, invstd] =
        bn_add_relu(x, residual, weight, bias, running_mean, running_var, training, momentum, eps);
    save(ctx, x, out, weight, mean, invstd, training);
    return {out, mean, invstd};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto s = ctx->get_saved_variables();
    auto [gx, gr, gw, gb] = bn_add_relu_backward(grads.at(0), s[0], s[1], s[2], s[3], s[4],
                                                    ctx->saved_data["training"].toBool());
    return {gx, gr, gw, gb, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_relu_autograd(const at::Tensor& x, const at::Tensor& weight,
                                                                const at::Tensor& bias, at::Tensor& running_mean,
                                                                at::Tensor& running_var, bool training, double momentum,
                                                                double eps) {
  auto r = BnReluFunction::apply(x, weight, bias, running_mean, running_var, training, momentum, eps);
  return {r[0], r[1], r[2]};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> bn_add_relu_autograd(const at::Tensor& x, const at::Tensor& residual,
                                                                    const at::Tensor& weight, const at::Tensor& bias,
                                                                    at::Tensor& running_mean, at::Tensor& running_var,
                                                                    bool training, double momentum, double eps) {
  auto r = BnAddReluFunction::apply(x, residual, weight, bias, running_mean, running_var, training, momentum, eps);
  return {r[0], r[1], r[2]};
}

at::Tensor conv_bn_relu_composite(const at::Tensor& x, const at::Tensor& conv_weight, const at::Tensor& bn_weight,
                                  const at::Tensor& bn_bias, at::Tensor& running_mean, at::Tensor& running_var,
                                  bool training, double momentum, double eps, c10::IntArrayRef stride,
                                  c10::IntArrayRef padding, c10::IntArrayRef dilation, int64_t groups) {
  const auto y = at::conv2d(x, conv_weight, /*bias=*/{}, stride, padding, dilation, groups);
  if (takes_cudnn_bn(y, bn_weight, bn_bias, running_mean, running_var, training, eps))
    return bn_act_cudnn_autograd(y, at::Tensor(), bn_weight, bn_bias, running_mean, running_var, momentum, eps);
  return std::get<0>(bn_relu(y, bn_weight, bn_bias, running_mean, running_var, training, momentum, eps));
}

at::Tensor conv_bn_add_relu_composite(const at::Tensor& x, const at::Tensor& conv_weight, const at::Tensor& residual,
                                      const at::Tensor& bn_weight, const at::Tensor& bn_bias,
                                      at::Tensor& running_mean, at::Tensor& running_var, bool training,
                                      double momentum, double eps, c10::IntArrayRef stride, c10::IntArrayRef padding,
                                      c10::IntArrayRef dilation, int64_t groups) {
  const auto y = at::conv2d(x, conv_weight, /*bias=*/{}, stride, padding, dilation, groups);
  if (takes_cudnn_bn(y, bn_weight, bn_bias, running_mean, running_var, training, eps))
    return bn_act_cudnn_autograd(y, residual, bn_weight, bn_bias, running_mean, running_var, momentum, eps);
  return std::get<0>(bn_add_relu(y, residual, bn_weight, bn_bias, running_mean, running_var, training, momentum, eps));
}

}  // namespace

TORCH_LIBRARY_IMPL(dlrun, CompositeExplicitAutograd, m) {
  m.impl("bn_relu", TORCH_FN(bn_relu_reference));
  m.impl("bn_relu_backward", TORCH_FN(bn_relu_backward_reference));
  m.impl("bn_add_relu", TORCH_FN(reference::bn_add_relu));
  m.impl("bn_add_relu_backward", TORCH_FN(reference::bn_add_relu_backward));
}

TORCH_LIBRARY_IMPL(dlrun, Autograd, m) {
  m.impl("bn_relu", TORCH_FN(bn_relu_autograd));
  m.impl("bn_add_relu", TORCH_FN(bn_add_relu_autograd));
}

TORCH_LIBRARY_IMPL(dlrun, CompositeImplicitAutograd, m) {
  m.impl("conv_bn_relu", TORCH_FN(conv_bn_relu_composite));
  m.impl("conv_bn_add_relu", TORCH_FN(conv_bn_add_relu_composite));
}

}  // namespace dlrun::kernels
