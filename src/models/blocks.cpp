// The shared blocks of blocks.h.
#include "models/blocks.h"

#include <algorithm>

namespace dlrun::models::detail {

torch::Tensor activate(Act act, const torch::Tensor& x) {
  switch (act) {
    case Act::kNone: return x;
    case Act::kReLU: return torch::relu(x);
    case Act::kReLU6: return torch::hardtanh(x, 0.0, 6.0);
    case Act::kHardswish: return torch::hardswish(x);
    case Act::kSigmoid: return torch::sigmoid(x);
    case Act::kHardsigmoid: return torch::hardsigmoid(x);
    case Act::kSiLU: return torch::silu(x);
  }
  return x;
}

ConvNormActImpl::ConvNormActImpl(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t groups, Act act,
                                 double eps, double momentum)
    : act_(act) {
  conv_ = register_module(
      "0", torch::nn::Conv2d(
               torch::nn::Conv2dOptions(in, out, k).stride(stride).padding((k - 1) / 2).groups(groups).bias(false)));
  bn_ = register_module("1", BatchNorm2d(torch::nn::BatchNormOptions(out).eps(eps).momentum(momentum)));
}

torch::Tensor ConvNormActImpl::forward(const torch::Tensor& x) {
  const bool fold = folded != nullptr && *folded;
  if (act_ == Act::kReLU) return conv_bn_relu(conv_, bn_, x, fused != nullptr && *fused, fold);
  return activate(act_, conv_bn(conv_, bn_, x, fold));
}

SqueezeExcitationImpl::SqueezeExcitationImpl(int64_t in, int64_t squeeze, Act act, Act scale)
    : act_(act), scale_(scale) {
  fc1_ = register_module("fc1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in, squeeze, 1)));
  fc2_ = register_module("fc2", torch::nn::Conv2d(torch::nn::Conv2dOptions(squeeze, in, 1)));
}

torch::Tensor SqueezeExcitationImpl::forward(const torch::Tensor& x) {
  torch::Tensor s = torch::adaptive_avg_pool2d(x, {1, 1});  // (N, in, 1, 1)
  s = activate(scale_, fc2_->forward(activate(act_, fc1_->forward(s))));
  return s * x;
}

torch::Tensor stochastic_depth(const torch::Tensor& x, double p, bool training) {
  if (!training || p <= 0) return x;
  std::vector<int64_t> shape(static_cast<size_t>(x.dim()), 1);
  shape[0] = x.size(0);
  const double survival = 1.0 - p;
  torch::Tensor keep = torch::empty(shape, x.options()).bernoulli_(survival);
  if (survival > 0) keep.div_(survival);
  return x * keep;
}

torch::Tensor LayerNorm2dImpl::forward(const torch::Tensor& x) {
  return torch::layer_norm(x.permute({0, 2, 3, 1}), options.normalized_shape(), weight, bias, options.eps())
      .permute({0, 3, 1, 2});
}

int64_t make_divisible(double v, int64_t divisor) {
  const int64_t d = divisor;
  int64_t rounded = std::max(d, static_cast<int64_t>(v + d / 2.0) / d * d);
  if (static_cast<double>(rounded) < 0.9 * v) rounded += d;
  return rounded;
}

}  // namespace dlrun::models::detail
