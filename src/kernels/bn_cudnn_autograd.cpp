// The autograd side of cuDNN's fused BatchNorm-activation (the CUDA calls: bn_cudnn.cu) and the
// test that routes a training call of conv_bn_relu / conv_bn_add_relu to it (bn_cudnn.h).
#include "kernels/bn_cudnn.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <limits>
#include <optional>

#include "kernels/bn_path.h"
#include "kernels/ops.h"
#include "kernels/self_check.h"

namespace dlrun::kernels {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Kept for the backward: the input, the output (cuDNN's activation backward reads it), weight,
// bias (cuDNN's backward needs it when there is an activation), the statistics and the reserve
// space. The residual is an optional input: an empty one is no input to autograd at all (an
// undefined at::Tensor in its place would be asked for its device). Gradients are not
// materialised: the statistics and the reserve are outputs nothing differentiates, and a
// backward reached without the output's gradient returns none.
class BnActCudnnFunction : public torch::autograd::Function<BnActCudnnFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, const std::optional<at::Tensor>& residual,
                               const at::Tensor& weight, const at::Tensor& bias, at::Tensor running_mean,
                               at::Tensor running_var, double momentum, double eps) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [out, mean, invstd, reserve] =
        bn_act_cudnn(x, residual, weight, bias, running_mean, running_var, momentum, eps);
    ctx->save_for_backward({x, out, weight, bias, mean, invstd, reserve});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["add"] = residual.has_value();
    ctx->mark_non_differentiable({mean, invstd, reserve});
    ctx->set_materialize_grads(false);
    return {out, mean, invstd, reserve};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const bool add = ctx->saved_data["add"].toBool();
    if (!grads.at(0).defined()) return variable_list(8);
    const auto s = ctx->get_saved_variables();
    auto [gx, gz, gw, gb] = bn_act_cudnn_backward(grads[0], s[0], s[1], s[2], s[3], s[4], s[5], s[6], add,
                                                  ctx->saved_data["eps"].toDouble());
    return {gx, add ? gz : at::Tensor(), gw, gb, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

bool float_vector(const at::Tensor& t) { return t.defined() && t.scalar_type() == at::kFloat && t.is_contiguous(); }

}  // namespace

bool cudnn_bn_sizes_ok(int64_t n, int64_t c, int64_t h, int64_t w) {
  // PyTorch's limits for its own cuDNN BatchNorm (32-bit indexing inside cuDNN; its training
  // kernels' batch), and more than one value per channel (an unbiased variance of one value is
  // a division by zero, which cuDNN would not refuse).
  const int64_t numel = n * c * h * w;
  return n * h * w > 1 && numel < std::numeric_limits<int32_t>::max() && n <= 880801;
}

bool takes_cudnn_bn(const at::Tensor& y, const at::Tensor& weight, const at::Tensor& bias,
                    const at::Tensor& running_mean, const at::Tensor& running_var, bool training, double eps) {
  return y.is_cuda() && y.dim() == 4 && cuda_bn_path() == BnPath::kCudnn &&
         cudnn_bn_takes(y.scalar_type(), y.suggest_memory_format() == at::MemoryFormat::ChannelsLast, y.size(1), eps,
                        training, weight.scalar_type()) &&
         cudnn_bn_sizes_ok(y.size(0), y.size(1), y.size(2), y.size(3)) && float_vector(weight) && float_vector(bias) &&
         float_vector(running_mean) && float_vector(running_var) && cudnn_checked(y);
}

at::Tensor bn_act_cudnn_autograd(const at::Tensor& y, const at::Tensor& residual, const at::Tensor& weight,
                                 const at::Tensor& bias, at::Tensor& running_mean, at::Tensor& running_var,
                                 double momentum, double eps) {
  const std::optional<at::Tensor> z = residual.defined() ? std::optional<at::Tensor>(residual) : std::nullopt;
  return BnActCudnnFunction::apply(y, z, weight, bias, running_mean, running_var, momentum, eps)[0];
}

}  // namespace dlrun::kernels
