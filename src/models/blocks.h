// Blocks the model families share, each written once (docs/design.md, "How a feature is
// added"): torchvision's Conv2dNormActivation (a convolution, its BatchNorm and an activation,
// registered as the children "0" and "1" so its state-dict keys are torchvision's), its
// SqueezeExcitation (fc1, fc2), and the rounding of channel counts torchvision's mobile families
// use.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "config/options.h"
#include "models/batchnorm.h"
#include "models/lowering.h"

namespace dlrun::models::detail {

/// The activation after a convolution and its BatchNorm.
enum class Act { kNone, kReLU, kReLU6, kHardswish, kSigmoid, kHardsigmoid, kSiLU };

/// y = act(x), out of place (a block's input may be its shortcut).
torch::Tensor activate(Act act, const torch::Tensor& x);
/// The same in a graph (models/lowering.h).
Value activate(Graph& g, Act act, const Value& x);

/// torchvision's Conv2dNormActivation with BatchNorm2d: "0" Conv2d (no bias, padding
/// (k - 1) / 2), "1" BatchNorm2d(eps, momentum), then the activation (no parameters, no key).
/// With kReLU the pair runs through conv_bn_relu (the fused operator when the model asks);
/// otherwise conv_bn, folded in evaluation passes when the model asks.
class ConvNormActImpl : public torch::nn::Module, public Lowerable {
 public:
  ConvNormActImpl(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t groups, Act act, double eps = 1e-5,
                  double momentum = 0.1);
  /// (N, in, H, W) -> (N, out, H / stride, W / stride)
  torch::Tensor forward(const torch::Tensor& x);
  /// forward() in a graph; `prefix` is the module's state-dict name.
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override;

  const bool* fused = nullptr;   ///< the model's use_fused_conv_bn_relu flag (null: off)
  const bool* folded = nullptr;  ///< the model's use_folded_batchnorm flag (null: off)

 private:
  torch::nn::Conv2d conv_{nullptr};
  BatchNorm2d bn_{nullptr};
  Act act_;
};
TORCH_MODULE(ConvNormAct);

/// torchvision's SqueezeExcitation: x * scale(fc2(act(fc1(mean over H, W of x)))), fc1 and fc2
/// 1x1 convolutions with biases (in -> squeeze -> in).
class SqueezeExcitationImpl : public torch::nn::Module, public Lowerable {
 public:
  SqueezeExcitationImpl(int64_t in, int64_t squeeze, Act act, Act scale);
  /// (N, in, H, W) -> (N, in, H, W)
  torch::Tensor forward(const torch::Tensor& x);
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override;

 private:
  torch::nn::Conv2d fc1_{nullptr}, fc2_{nullptr};
  Act act_, scale_;
};
TORCH_MODULE(SqueezeExcitation);

/// A Sequential that a Sequential can hold (LibTorch's own cannot hold another, its forward being
/// a template): a stage of blocks under torchvision's child names ("0", "1", ... or its own),
/// applied in order.
class ChainImpl : public torch::nn::SequentialImpl, public Lowerable {
 public:
  using torch::nn::SequentialImpl::SequentialImpl;
  torch::Tensor forward(const torch::Tensor& x);
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override;
};
TORCH_MODULE(Chain);

/// The modules of `seq` (named `prefix`.child) in order, in a graph: each Lowerable as it says,
/// Conv2d (with the BatchNorm that follows it), ReLU, MaxPool2d, AdaptiveAvgPool2d, Linear and
/// Dropout (the identity); any other is refused, exit 2.
Value lower_sequential(Graph& g, const torch::nn::SequentialImpl& seq, const std::string& prefix, Value x);

/// The children of `seq` applied in order under model.activation_checkpointing: each child listed
/// in `stages` (a Chain of blocks) is one segment under kStages, and each of its blocks one under
/// kBlocks; the other children run as they are, or as one segment each under kBlocks when
/// `others_are_blocks` (EfficientNet's stem and last conv).
torch::Tensor forward_stages(torch::nn::Sequential& seq, torch::Tensor x, const std::vector<size_t>& stages,
                             ActivationCheckpointing mode, bool others_are_blocks = false);

/// torchvision's stochastic_depth(mode="row"): in training with p > 0, each sample's `x` zeroed
/// with probability p and the others scaled by 1 / (1 - p), the draws from the default
/// generator (as dropout's, so a resume repeats them); otherwise `x` itself.
torch::Tensor stochastic_depth(const torch::Tensor& x, double p, bool training);

/// torchvision's LayerNorm2d: LayerNorm over the channels of (N, C, H, W) (weight, bias).
class LayerNorm2dImpl : public torch::nn::LayerNormImpl, public Lowerable {
 public:
  LayerNorm2dImpl(int64_t channels, double eps)
      : torch::nn::LayerNormImpl(torch::nn::LayerNormOptions({channels}).eps(eps)) {}
  /// (N, C, H, W) -> (N, C, H, W)
  torch::Tensor forward(const torch::Tensor& x);
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override;
};
TORCH_MODULE(LayerNorm2d);

/// torchvision's MLP of the transformers (torchvision.ops.MLP with GELU): "0" Linear(in, hidden),
/// GELU, dropout, "3" Linear(hidden, in), dropout — the Linear layers under torchvision's indices.
class TransformerMlpImpl : public torch::nn::Module, public Lowerable {
 public:
  TransformerMlpImpl(int64_t in, int64_t hidden, double dropout = 0.0);
  /// (..., in) -> (..., in)
  torch::Tensor forward(const torch::Tensor& x);
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override;

  torch::nn::Linear fc1{nullptr}, fc2{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(TransformerMlp);

/// torchvision's use of nn.MultiheadAttention (batch_first, self-attention, no mask, no added
/// key/value biases): in_proj_weight (3E, E), in_proj_bias (3E), out_proj (Linear E -> E), the
/// attention itself as scaled_dot_product_attention over `heads` heads.
class SelfAttentionImpl : public torch::nn::Module, public Lowerable {
 public:
  SelfAttentionImpl(int64_t dim, int64_t heads);
  /// (N, L, E) -> (N, L, E)
  torch::Tensor forward(const torch::Tensor& x);
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override;

  torch::Tensor in_proj_weight, in_proj_bias;
  torch::nn::Linear out_proj{nullptr};

 private:
  int64_t heads_;
};
TORCH_MODULE(SelfAttention);

/// torchvision's _make_divisible: `v` rounded to the nearest multiple of `divisor` (at least
/// `divisor`), and up by one more when rounding down lost over 10 %.
int64_t make_divisible(double v, int64_t divisor = 8);

}  // namespace dlrun::models::detail
