// Seeded weight initialization, independent of the global RNG.
//
// LibTorch layers initialize themselves from the global generator when constructed, so their
// values depend on whatever drew from it before. dlrun instead re-draws every parameter from a
// generator seeded by run.seed, walking modules in state-dict order: the same seed gives the
// same weights whatever ran earlier in the process. Draws happen in float64 (ATen's scalar
// path) and are rounded to the parameter's dtype, so they do not depend on vector width.
#include <cmath>

#include "models/zoo.h"

namespace dlrun::models::detail {

void fill_uniform(torch::Tensor& p, double bound, at::Generator& gen) {
  torch::Tensor draw = torch::empty(p.sizes(), torch::kFloat64);
  draw.uniform_(-bound, bound, gen);
  p.copy_(draw);
}

void fill_normal(torch::Tensor& p, double std, at::Generator& gen) {
  torch::Tensor draw = torch::empty(p.sizes(), torch::kFloat64);
  draw.normal_(0.0, std, gen);
  p.copy_(draw);
}

void fill_trunc_normal(torch::Tensor& p, double std, double a, double b, at::Generator& gen) {
  auto cdf = [](double v) { return (1.0 + std::erf(v / std::sqrt(2.0))) / 2.0; };
  const double lo = cdf(a / std), hi = cdf(b / std);
  torch::Tensor draw = torch::empty(p.sizes(), torch::kFloat64);
  draw.uniform_(2 * lo - 1, 2 * hi - 1, gen).erfinv_().mul_(std * std::sqrt(2.0)).clamp_(a, b);
  p.copy_(draw);
}

void fill_xavier_uniform(torch::Tensor& p, at::Generator& gen) {
  const double fan_in = static_cast<double>(p.numel() / p.size(0)), fan_out = static_cast<double>(p.numel() / p.size(1));
  fill_uniform(p, std::sqrt(6.0 / (fan_in + fan_out)), gen);
}

namespace {

// fan_in / fan_out of a Linear (out, in) or Conv (out, in/groups, kh, kw) weight.
int64_t fan_in(const torch::Tensor& w) { return w.numel() / w.size(0); }
int64_t fan_out(const torch::Tensor& w) { return w.numel() / w.size(1); }

// PyTorch's reset_parameters() of Linear and Conv: kaiming_uniform(a=sqrt(5)) for the
// weight, which is U(+-1/sqrt(fan_in)), and U(+-1/sqrt(fan_in)) for the bias.
void default_affine(torch::Tensor& weight, torch::Tensor& bias, at::Generator& gen) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in(weight)));
  fill_uniform(weight, bound, gen);
  if (bias.defined()) fill_uniform(bias, bound, gen);
}

void init_module(torch::nn::Module& m, InitScheme scheme, at::Generator& gen) {
  if (scheme == InitScheme::kTorchvisionConvNeXt) {  // trunc_normal_(std=0.02), zeros_ for Conv and Linear
    torch::Tensor *weight = nullptr, *bias = nullptr;
    if (auto* conv = dynamic_cast<torch::nn::Conv2dImpl*>(&m)) {
      weight = &conv->weight;
      bias = &conv->bias;
    } else if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(&m)) {
      weight = &linear->weight;
      bias = &linear->bias;
    }
    if (weight != nullptr) {
      fill_trunc_normal(*weight, 0.02, -2.0, 2.0, gen);
      if (bias->defined()) bias->zero_();
      return;
    }
  }
  if (auto* ln = dynamic_cast<torch::nn::LayerNormImpl*>(&m)) {
    ln->reset_parameters();  // weight 1, bias 0
    return;
  }
  if (auto* conv = dynamic_cast<torch::nn::Conv2dImpl*>(&m)) {
    if (scheme == InitScheme::kTorchvisionResNet || scheme == InitScheme::kTorchvisionMobile ||
        scheme == InitScheme::kTorchvisionEfficientNet || scheme == InitScheme::kTorchvisionRegNet) {
      // kaiming_normal_(mode="fan_out", nonlinearity="relu"): std = sqrt(2 / fan_out).
      fill_normal(conv->weight, std::sqrt(2.0 / static_cast<double>(fan_out(conv->weight))), gen);
      if (!conv->bias.defined()) return;
      if (scheme == InitScheme::kTorchvisionRegNet)  // RegNet leaves the biases (its SE's) to Conv2d
        fill_uniform(conv->bias, 1.0 / std::sqrt(static_cast<double>(fan_in(conv->weight))), gen);
      else
        conv->bias.zero_();
    } else {
      default_affine(conv->weight, conv->bias, gen);
    }
  } else if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(&m)) {
    if (scheme == InitScheme::kTorchvisionMobile || scheme == InitScheme::kTorchvisionRegNet) {  // normal_(0, 0.01), zeros_
      fill_normal(linear->weight, 0.01, gen);
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (scheme == InitScheme::kTorchvisionEfficientNet) {  // uniform_(+-1/sqrt(out)), zeros_
      fill_uniform(linear->weight, 1.0 / std::sqrt(static_cast<double>(linear->weight.size(0))), gen);
      if (linear->bias.defined()) linear->bias.zero_();
    } else {
      default_affine(linear->weight, linear->bias, gen);
    }
  } else if (auto* bn = dynamic_cast<torch::nn::BatchNorm2dImpl*>(&m)) {
    bn->reset_parameters();  // weight 1, bias 0, running mean 0 / var 1, 0 batches tracked
  }
}

}  // namespace

void initialize(torch::nn::Module& m, InitScheme scheme, at::Generator& gen) {
  torch::NoGradGuard no_grad;
  init_module(m, scheme, gen);
  for (const auto& child : m.modules(/*include_self=*/false)) init_module(*child, scheme, gen);
}

void to_channels_last(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters())
    if (p.dim() == 4) p.set_data(channels_last(p.data()));
  for (auto& b : m.buffers())
    if (b.dim() == 4) b.set_data(channels_last(b));
}

}  // namespace dlrun::models::detail
