// The shared blocks of blocks.h.
#include "models/blocks.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "models/recompute.h"

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

Value activate(Graph& g, Act act, const Value& x) {
  switch (act) {
    case Act::kNone: return x;
    case Act::kReLU: return g.apply(Fn::kRelu, x);
    case Act::kReLU6: return g.apply(Fn::kRelu6, x);
    case Act::kHardswish: return g.apply(Fn::kHardswish, x);
    case Act::kSigmoid: return g.apply(Fn::kSigmoid, x);
    case Act::kHardsigmoid: return g.apply(Fn::kHardsigmoid, x);
    case Act::kSiLU: return g.apply(Fn::kSilu, x);
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

Value ConvNormActImpl::lower(Graph& g, const std::string& prefix, const Value& x) const {
  return activate(g, act_, g.conv(prefix + ".0", *conv_, x, prefix + ".1", bn_.get()));
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

Value SqueezeExcitationImpl::lower(Graph& g, const std::string& prefix, const Value& x) const {
  Value s = g.adaptive_avg_pool(prefix, x, 1, 1);
  s = activate(g, act_, g.conv(prefix + ".fc1", *fc1_, s));
  s = activate(g, scale_, g.conv(prefix + ".fc2", *fc2_, s));
  return g.mul(s, x);
}

torch::Tensor ChainImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = x;
  for (auto& m : *this) y = m.forward(y);
  return y;
}

Value ChainImpl::lower(Graph& g, const std::string& prefix, const Value& x) const {
  return lower_sequential(g, *this, prefix, x);
}

Value lower_sequential(Graph& g, const torch::nn::SequentialImpl& seq, const std::string& prefix, Value x) {
  namespace nn = torch::nn;
  const auto children = seq.named_children();
  for (size_t i = 0; i < children.size(); ++i) {
    const std::string name = prefix + "." + children[i].key();
    const auto& m = children[i].value();
    if (auto* block = dynamic_cast<const Lowerable*>(m.get())) {
      x = block->lower(g, name, x);
    } else if (auto* conv = dynamic_cast<nn::Conv2dImpl*>(m.get())) {
      auto* bn = i + 1 < children.size() ? dynamic_cast<BatchNorm2dImpl*>(children[i + 1].value().get()) : nullptr;
      x = g.conv(name, *conv, x, bn != nullptr ? prefix + "." + children[i + 1].key() : "", bn);
      if (bn != nullptr) ++i;
    } else if (dynamic_cast<nn::ReLUImpl*>(m.get()) != nullptr) {
      x = g.apply(Fn::kRelu, x);
    } else if (auto* pool = dynamic_cast<nn::MaxPool2dImpl*>(m.get())) {
      const auto& o = pool->options;
      DLRUN_CHECK_INPUT(!o.ceil_mode() && o.dilation()->at(0) == 1 && o.dilation()->at(1) == 1 &&
                            o.kernel_size()->at(0) == o.kernel_size()->at(1) && o.stride()->at(0) == o.stride()->at(1) &&
                            o.padding()->at(0) == o.padding()->at(1),
                        "{}: only square max pools without ceil_mode or dilation are lowered", name);
      x = g.max_pool(name, x, o.kernel_size()->at(0), o.stride()->at(0), o.padding()->at(0));
    } else if (auto* ap = dynamic_cast<nn::AdaptiveAvgPool2dImpl*>(m.get())) {
      const auto& size = ap->options.output_size();
      x = g.adaptive_avg_pool(name, x, size->at(0).value_or(x.size(2)), size->at(1).value_or(x.size(3)));
    } else if (auto* fc = dynamic_cast<nn::LinearImpl*>(m.get())) {
      x = g.linear(name, *fc, x);
    } else if (dynamic_cast<nn::DropoutImpl*>(m.get()) == nullptr) {  // dropout: the identity in evaluation
      fail_input("{} ({}) has no lowering to a graph", name, m->name());
    }
  }
  return x;
}

torch::Tensor forward_stages(torch::nn::Sequential& seq, torch::Tensor x, const std::vector<size_t>& stages,
                             ActivationCheckpointing mode, bool others_are_blocks) {
  const bool blocks = mode == ActivationCheckpointing::kBlocks;
  for (size_t i = 0; i < seq->size(); ++i) {
    const bool stage = std::find(stages.begin(), stages.end(), i) != stages.end();
    if (!stage || !blocks) {
      x = forward_span(seq, i, i + 1, x, stage ? mode == ActivationCheckpointing::kStages : others_are_blocks && blocks);
      continue;
    }
    torch::nn::Sequential chain(std::static_pointer_cast<torch::nn::SequentialImpl>(seq->ptr(i)));
    for (size_t b = 0; b < chain->size(); ++b) x = forward_span(chain, b, b + 1, x, true);
  }
  return x;
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

Value LayerNorm2dImpl::lower(Graph& g, const std::string& prefix, const Value& x) const {
  const Value y = g.layer_norm(prefix, weight, bias, options.eps(), g.transpose(x, {0, 2, 3, 1}));
  return g.transpose(y, {0, 3, 1, 2});
}

TransformerMlpImpl::TransformerMlpImpl(int64_t in, int64_t hidden, double dropout) : dropout_(dropout) {
  fc1 = register_module("0", torch::nn::Linear(in, hidden));
  fc2 = register_module("3", torch::nn::Linear(hidden, in));
}

torch::Tensor TransformerMlpImpl::forward(const torch::Tensor& x) {
  torch::Tensor y = torch::dropout(torch::gelu(fc1->forward(x)), dropout_, is_training());
  return torch::dropout(fc2->forward(y), dropout_, is_training());
}

Value TransformerMlpImpl::lower(Graph& g, const std::string& prefix, const Value& x) const {
  return g.linear(prefix + ".3", *fc2, g.apply(Fn::kGelu, g.linear(prefix + ".0", *fc1, x)));
}

SelfAttentionImpl::SelfAttentionImpl(int64_t dim, int64_t heads) : heads_(heads) {
  in_proj_weight = register_parameter("in_proj_weight", torch::empty({3 * dim, dim}));
  in_proj_bias = register_parameter("in_proj_bias", torch::zeros({3 * dim}));
  out_proj = register_module("out_proj", torch::nn::Linear(dim, dim));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t n = x.size(0), l = x.size(1), e = x.size(2);
  // (N, L, 3E) -> 3 x (N, heads, L, E / heads)
  auto qkv = torch::linear(x, in_proj_weight, in_proj_bias).view({n, l, 3, heads_, e / heads_}).permute({2, 0, 3, 1, 4});
  torch::Tensor y = at::scaled_dot_product_attention(qkv[0], qkv[1], qkv[2]);
  return out_proj->forward(y.transpose(1, 2).reshape({n, l, e}));
}

Value SelfAttentionImpl::lower(Graph& g, const std::string& prefix, const Value& x) const {
  const int64_t l = x.size(1), e = x.size(2), d = e / heads_;
  Value qkv = g.linear(prefix + ".in_proj", in_proj_weight, in_proj_bias, x);
  qkv = g.transpose(g.reshape(qkv, {-1, l, 3, heads_, d}), {2, 0, 3, 1, 4});  // 3 x (N, heads, L, d)
  const Value q = g.select(qkv, 0, 0), k = g.select(qkv, 0, 1), v = g.select(qkv, 0, 2);
  // softmax(q k^T / sqrt(d)) v, as scaled_dot_product_attention computes it
  Value scores = g.matmul(q, g.transpose(k, {0, 1, 3, 2}));
  scores = g.mul(scores, g.constant(prefix + ".scale", torch::tensor(1.0 / std::sqrt(static_cast<double>(d)))));
  const Value y = g.matmul(g.softmax(scores), v);
  return g.linear(prefix + ".out_proj", *out_proj, g.reshape(g.transpose(y, {0, 2, 1, 3}), {-1, l, e}));
}

int64_t make_divisible(double v, int64_t divisor) {
  const int64_t d = divisor;
  int64_t rounded = std::max(d, static_cast<int64_t>(v + d / 2.0) / d * d);
  if (static_cast<double>(rounded) < 0.9 * v) rounded += d;
  return rounded;
}

}  // namespace dlrun::models::detail
