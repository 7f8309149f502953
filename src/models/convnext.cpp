// torchvision's ConvNeXt, layer for layer: convnext_tiny, convnext_small, convnext_base,
// convnext_large.
//
// One table per member (kConvNeXts: the four stages' widths and depths, torchvision's
// CNBlockConfig, and its default stochastic depth). Modules under torchvision's names:
// features.0 (the 4x4/4 patchify conv with a bias, "0", and its LayerNorm2d, "1"),
// features.1, .3, .5, .7 (stages: CNBlocks), features.2, .4, .6 (downsampling: LayerNorm2d "0",
// 2x2/2 conv "1"), classifier.0 (LayerNorm2d after the average pool) and classifier.2 (Linear).
// A CNBlock: layer_scale (C, 1, 1), block.0 the depthwise 7x7 (bias), block.2 LayerNorm (eps
// 1e-6) over the channels of NHWC, block.3 Linear to 4C, GELU, block.5 Linear back, then the
// scaled branch (stochastic depth in training) added to the input.
//
// Stochastic depth (model.stochastic_depth; auto: torchvision's 0.1, 0.4, 0.5, 0.5): block k of
// K (from 0) drops its branch per sample with probability p * k / (K - 1).
#include <fmt/ranges.h>

#include <algorithm>
#include <array>

#include "models/blocks.h"
#include "models/recompute.h"
#include "models/zoo.h"

namespace dlrun::models::detail {
namespace {

namespace nn = torch::nn;

constexpr double kNormEps = 1e-6, kLayerScale = 1e-6;

struct ConvNeXtVariant {
  const char* name;
  std::array<int64_t, 4> widths, depths;
  double stochastic_depth;  ///< torchvision's default
  int64_t parameters;       ///< torchvision's count (1000 classes)
};
constexpr ConvNeXtVariant kConvNeXts[] = {
    {"convnext_tiny", {96, 192, 384, 768}, {3, 3, 9, 3}, 0.1, 28589128},
    {"convnext_small", {96, 192, 384, 768}, {3, 3, 27, 3}, 0.4, 50223688},
    {"convnext_base", {128, 256, 512, 1024}, {3, 3, 27, 3}, 0.5, 88591464},
    {"convnext_large", {192, 384, 768, 1536}, {3, 3, 27, 3}, 0.5, 197767336},
};

class CNBlockImpl : public nn::Module, public Lowerable {
 public:
  CNBlockImpl(int64_t dim, double drop) : drop_(drop) {
    layer_scale_ = register_parameter("layer_scale", torch::full({dim, 1, 1}, kLayerScale));
    block_ = register_module("block", nn::Sequential());
    // The Permute and GELU modules of torchvision's Sequential hold no tensors: forward() does
    // them, and the indices of the others stay torchvision's (0, 2, 3, 5).
    dwconv_ = nn::Conv2d(nn::Conv2dOptions(dim, dim, 7).padding(3).groups(dim));
    norm_ = nn::LayerNorm(nn::LayerNormOptions({dim}).eps(kNormEps));
    fc1_ = nn::Linear(dim, 4 * dim);
    fc2_ = nn::Linear(4 * dim, dim);
    block_->push_back("0", dwconv_);
    block_->push_back("2", norm_);
    block_->push_back("3", fc1_);
    block_->push_back("5", fc2_);
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = dwconv_->forward(x).permute({0, 2, 3, 1});
    y = fc2_->forward(torch::gelu(fc1_->forward(norm_->forward(y)))).permute({0, 3, 1, 2});
    return stochastic_depth(layer_scale_ * y, drop_, is_training()) + x;
  }
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override {
    Value y = g.transpose(g.conv(prefix + ".block.0", *dwconv_, x), {0, 2, 3, 1});
    y = g.apply(Fn::kGelu, g.linear(prefix + ".block.3", *fc1_, g.layer_norm(prefix + ".block.2", *norm_, y)));
    y = g.transpose(g.linear(prefix + ".block.5", *fc2_, y), {0, 3, 1, 2});
    return g.add(g.mul(g.constant(prefix + ".layer_scale", layer_scale_), y), x);
  }

 private:
  double drop_;
  torch::Tensor layer_scale_;
  nn::Sequential block_{nullptr};
  nn::Conv2d dwconv_{nullptr};
  nn::LayerNorm norm_{nullptr};
  nn::Linear fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(CNBlock);

class ConvNeXt : public Model {
 public:
  ConvNeXt(const ModelOptions& opts, const ConvNeXtVariant& v)
      : name_(v.name),
        channels_last_(opts.channels_last),
        recompute_(opts.activation_checkpointing),
        dropout_(opts.dropout) {
    const double p = is_auto(opts.stochastic_depth) ? v.stochastic_depth : opts.stochastic_depth;
    int64_t total = 0;
    for (int64_t d : v.depths) total += d;

    features_ = register_module("features", nn::Sequential());
    Chain stem;
    stem->push_back("0", nn::Conv2d(nn::Conv2dOptions(opts.in_channels, v.widths[0], 4).stride(4)));
    stem->push_back("1", LayerNorm2d(v.widths[0], kNormEps));
    features_->push_back(stem);
    int64_t index = 0;
    for (size_t s = 0; s < v.widths.size(); ++s) {
      Chain stage;
      for (int64_t b = 0; b < v.depths[s]; ++b, ++index)
        stage->push_back(CNBlock(v.widths[s], p * static_cast<double>(index) / static_cast<double>(total - 1)));
      stages_.push_back(features_->size());
      features_->push_back(stage);
      if (s + 1 == v.widths.size()) break;
      Chain down;
      down->push_back("0", LayerNorm2d(v.widths[s], kNormEps));
      down->push_back("1", nn::Conv2d(nn::Conv2dOptions(v.widths[s], v.widths[s + 1], 2).stride(2)));
      features_->push_back(down);
    }
    const int64_t last = v.widths.back();
    head_norm_ = LayerNorm2d(last, kNormEps);
    fc_ = nn::Linear(last, opts.num_classes);
    classifier_ = register_module("classifier", nn::Sequential());
    classifier_->push_back("0", head_norm_);
    classifier_->push_back("2", fc_);
  }

  // (N, C, H, W) -> (N, num_classes)
  torch::Tensor forward(torch::Tensor x) override {
    DLRUN_CHECK_INPUT(x.dim() == 4, "{} needs (N, C, H, W) images, got shape {}", name_, fmt::join(x.sizes(), "x"));
    x = as_input(x);
    if (channels_last_) x = channels_last(x);
    // Under activation checkpointing a segment is a CNBlock (blocks) or a stage (stages).
    x = forward_stages(features_, x, stages_, recompute_);
    x = head_norm_->forward(adaptive_avg_pool(x, 1, 1)).flatten(1);
    if (dropout_ > 0) x = torch::dropout(x, dropout_, is_training());  // functional: torchvision has none
    return fc_->forward(x);
  }

  // optim.layer_decay's blocks: the CNBlocks (features.<stage>.<i>.); the downsampling layers join the next block.
  std::string block_pattern() const override { return R"(features\.\d+\.\d+\.(?=block\.|layer_scale))"; }
  // The layer scales, (C, 1, 1) here and 1-D in timm, take no decay as its do.
  std::string no_decay_pattern() const override { return R"(layer_scale$)"; }
  Value lower(Graph& g, const Value& images) const override {
    const Value x = g.adaptive_avg_pool("avgpool", lower_sequential(g, *features_, "features", images), 1, 1);
    return g.linear("classifier.2", *fc_, g.flatten(head_norm_->lower(g, "classifier.0", x)));
  }

 private:
  std::string name_;
  bool channels_last_;
  ActivationCheckpointing recompute_;
  double dropout_;
  std::vector<size_t> stages_;  ///< the indices in features of the stages
  nn::Sequential features_{nullptr};
  nn::Sequential classifier_{nullptr};
  LayerNorm2d head_norm_{nullptr};
  nn::Linear fc_{nullptr};
};

}  // namespace

std::shared_ptr<Model> make_convnext(const ModelOptions& opts, const std::string& name) {
  return make_member(kConvNeXts, name, "ConvNeXt", [&](const ConvNeXtVariant& v) { return std::make_shared<ConvNeXt>(opts, v); });
}

std::vector<std::pair<std::string, int64_t>> convnext_variants() { return names_and_parameters(kConvNeXts); }

}  // namespace dlrun::models::detail
