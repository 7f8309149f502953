// torchvision's MobileNetV2 and MobileNetV3, layer for layer: `mobilenet_v2` (width 1.0),
// `mobilenet_v3_large`, `mobilenet_v3_small` (width 1.0, no reduced tail, not dilated).
//
// MobileNetV3: features.0 (3x3/2 stem, hard-swish), features.1 ... (blocks: block.0 the 1x1
// expansion unless the block keeps its width, block.1 the depthwise kxk, block.2 the
// squeeze-excitation (fc1, fc2; hard-sigmoid) where the table says so, then the 1x1 projection
// without activation), the last 1x1 conv to 6x the channels, and classifier.0 (Linear),
// classifier.3 (Linear) around hard-swish and model.dropout. BatchNorm eps 0.001, momentum 0.01.
// Its blocks come from torchvision's two tables (kLarge, kSmall).
//
// Modules are registered under torchvision's names: features.0 (the stem's Conv2dNormActivation:
// features.0.0 conv, features.0.1 BatchNorm), features.1 ... features.17 (inverted residual
// blocks: conv.0, conv.1 Conv2dNormActivations — the expansion, left out when the expansion is
// 1, and the depthwise 3x3 — then conv.N the 1x1 projection and conv.N+1 its BatchNorm),
// features.18 (the last 1x1 Conv2dNormActivation) and classifier.1 (the Linear after
// classifier.0, a Dropout of model.dropout). So a torchvision state dict loads strictly and
// gives the same logits (tests/models/torchvision_zoo.py). The blocks come from one table
// (kInvertedResiduals: expansion t, channels c, repeats n, stride s), as torchvision's.
#include <fmt/ranges.h>

#include <array>

#include "models/blocks.h"
#include "models/recompute.h"
#include "models/zoo.h"

namespace dlrun::models::detail {
namespace {

namespace nn = torch::nn;

// torchvision's inverted_residual_setting: expansion, output channels, repeats, first stride.
struct V2Stage {
  int64_t t, c, n, s;
};
constexpr std::array<V2Stage, 7> kInvertedResiduals = {{
    {1, 16, 1, 1}, {6, 24, 2, 2}, {6, 32, 3, 2}, {6, 64, 4, 2}, {6, 96, 3, 1}, {6, 160, 3, 2}, {6, 320, 1, 1},
}};
constexpr int64_t kStemChannels = 32, kLastChannels = 1280;

// 1x1 expansion (unless t == 1), depthwise 3x3 (strided), 1x1 linear projection; the input is
// added when the shape is kept.
class InvertedResidualImpl : public nn::Module, public Lowerable {
 public:
  InvertedResidualImpl(int64_t in, int64_t out, int64_t stride, int64_t expansion)
      : residual_(stride == 1 && in == out) {
    const int64_t hidden = in * expansion;  // torchvision: int(round(inp * expand_ratio))
    conv_ = register_module("conv", nn::Sequential());
    if (expansion != 1) conv_->push_back(ConvNormAct(in, hidden, 1, 1, 1, Act::kReLU6));
    conv_->push_back(ConvNormAct(hidden, hidden, 3, stride, hidden, Act::kReLU6));
    project_ = conv_->size();
    conv_->push_back(nn::Conv2d(nn::Conv2dOptions(hidden, out, 1).bias(false)));
    conv_->push_back(BatchNorm2d(out));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = x;
    for (size_t i = 0; i < project_; ++i) y = conv_->ptr<ConvNormActImpl>(i)->forward(y);
    nn::Conv2d conv(conv_->ptr<nn::Conv2dImpl>(project_));
    BatchNorm2d bn(conv_->ptr<BatchNorm2dImpl>(project_ + 1));
    y = conv_bn(conv, bn, y, folded != nullptr && *folded);
    return residual_ ? y + x : y;
  }

  Value lower(Graph& g, const std::string& prefix, const Value& x) const override {
    Value y = x;
    for (size_t i = 0; i < project_; ++i) y = conv_->ptr<ConvNormActImpl>(i)->lower(g, fmt::format("{}.conv.{}", prefix, i), y);
    y = g.conv(fmt::format("{}.conv.{}", prefix, project_), *conv_->ptr<nn::Conv2dImpl>(project_), y,
               fmt::format("{}.conv.{}", prefix, project_ + 1), conv_->ptr<BatchNorm2dImpl>(project_ + 1).get());
    return residual_ ? g.add(y, x) : y;
  }

  const bool* folded = nullptr;  ///< the model's use_folded_batchnorm flag

 private:
  bool residual_;
  size_t project_ = 0;
  nn::Sequential conv_{nullptr};
};
TORCH_MODULE(InvertedResidual);

// Every ConvNormAct and block of `m` follows the model's fused and folded flags.
void follow_flags(nn::Module& m, const bool* fused, const bool* folded);

class MobileNetV2 : public Model {
 public:
  explicit MobileNetV2(const ModelOptions& opts)
      : channels_last_(opts.channels_last), recompute_(opts.activation_checkpointing == ActivationCheckpointing::kBlocks) {
    features_ = register_module("features", nn::Sequential());
    int64_t in = make_divisible(kStemChannels);
    features_->push_back(ConvNormAct(opts.in_channels, in, 3, 2, 1, Act::kReLU6));
    for (const V2Stage& st : kInvertedResiduals) {
      const int64_t out = make_divisible(static_cast<double>(st.c));
      for (int64_t i = 0; i < st.n; ++i) {
        features_->push_back(InvertedResidual(in, out, i == 0 ? st.s : 1, st.t));
        in = out;
      }
    }
    const int64_t last = make_divisible(kLastChannels);
    features_->push_back(ConvNormAct(in, last, 1, 1, 1, Act::kReLU6));
    classifier_ = register_module("classifier", nn::Sequential(nn::Dropout(opts.dropout), nn::Linear(last, opts.num_classes)));
    follow_flags(*this, &fused_, &folded_);
  }

  // (N, C, H, W) -> (N, num_classes)
  torch::Tensor forward(torch::Tensor x) override {
    DLRUN_CHECK_INPUT(x.dim() == 4, "mobilenet_v2 needs (N, C, H, W) images, got shape {}", fmt::join(x.sizes(), "x"));
    x = as_input(x);
    if (channels_last_) x = channels_last(x);
    // Each block (and the first and last conv) a segment of its own under activation checkpointing.
    for (size_t i = 0; i < features_->size(); ++i) x = forward_span(features_, i, i + 1, x, recompute_);
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);  // (N, 1280)
    return classifier_->forward(x);
  }

  // optim.layer_decay's blocks: the inverted residual blocks (features.<i>.).
  std::string block_pattern() const override { return R"(features\.\d+\.(?=conv\.))"; }
  // The last 1x1 convolution and its BatchNorm (timm's conv_head, bn2) join the last block.
  std::string last_block_pattern() const override { return R"(features\.)"; }
  Value lower(Graph& g, const Value& images) const override {
    const Value x = lower_sequential(g, *features_, "features", images);
    return lower_sequential(g, *classifier_, "classifier", g.flatten(g.adaptive_avg_pool("avgpool", x, 1, 1)));
  }

 private:
  bool channels_last_;
  bool recompute_;
  nn::Sequential features_{nullptr};
  nn::Sequential classifier_{nullptr};
};

// One MobileNetV3 block as torchvision's table gives it (InvertedResidualConfig at width 1.0).
struct V3Block {
  int64_t in, k, expanded, out;
  bool se, hardswish;
  int64_t stride;
};
constexpr bool SE = true, HS = true, NO = false;
const std::vector<V3Block> kLarge = {
    {16, 3, 16, 16, NO, NO, 1},     {16, 3, 64, 24, NO, NO, 2},     {24, 3, 72, 24, NO, NO, 1},
    {24, 5, 72, 40, SE, NO, 2},     {40, 5, 120, 40, SE, NO, 1},    {40, 5, 120, 40, SE, NO, 1},
    {40, 3, 240, 80, NO, HS, 2},    {80, 3, 200, 80, NO, HS, 1},    {80, 3, 184, 80, NO, HS, 1},
    {80, 3, 184, 80, NO, HS, 1},    {80, 3, 480, 112, SE, HS, 1},   {112, 3, 672, 112, SE, HS, 1},
    {112, 5, 672, 160, SE, HS, 2},  {160, 5, 960, 160, SE, HS, 1},  {160, 5, 960, 160, SE, HS, 1},
};
const std::vector<V3Block> kSmall = {
    {16, 3, 16, 16, SE, NO, 2},   {16, 3, 72, 24, NO, NO, 2},   {24, 3, 88, 24, NO, NO, 1},
    {24, 5, 96, 40, SE, HS, 2},   {40, 5, 240, 40, SE, HS, 1},  {40, 5, 240, 40, SE, HS, 1},
    {40, 5, 120, 48, SE, HS, 1},  {48, 5, 144, 48, SE, HS, 1},  {48, 5, 288, 96, SE, HS, 2},
    {96, 5, 576, 96, SE, HS, 1},  {96, 5, 576, 96, SE, HS, 1},
};
constexpr double kV3Eps = 0.001, kV3Momentum = 0.01;

class InvertedResidualV3Impl : public nn::Module, public Lowerable {
 public:
  explicit InvertedResidualV3Impl(const V3Block& b) : residual_(b.stride == 1 && b.in == b.out) {
    const Act act = b.hardswish ? Act::kHardswish : Act::kReLU;
    block_ = register_module("block", nn::Sequential());
    if (b.expanded != b.in) block_->push_back(ConvNormAct(b.in, b.expanded, 1, 1, 1, act, kV3Eps, kV3Momentum));
    block_->push_back(ConvNormAct(b.expanded, b.expanded, b.k, b.stride, b.expanded, act, kV3Eps, kV3Momentum));
    if (b.se) block_->push_back(SqueezeExcitation(b.expanded, make_divisible(b.expanded / 4), Act::kReLU, Act::kHardsigmoid));
    block_->push_back(ConvNormAct(b.expanded, b.out, 1, 1, 1, Act::kNone, kV3Eps, kV3Momentum));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = block_->forward(x);
    return residual_ ? y + x : y;
  }
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override {
    const Value y = lower_sequential(g, *block_, prefix + ".block", x);
    return residual_ ? g.add(y, x) : y;
  }

 private:
  bool residual_;
  nn::Sequential block_{nullptr};
};
TORCH_MODULE(InvertedResidualV3);

class MobileNetV3 : public Model {
 public:
  MobileNetV3(const ModelOptions& opts, const std::string& name, const std::vector<V3Block>& blocks, int64_t last)
      : name_(name),
        channels_last_(opts.channels_last),
        recompute_(opts.activation_checkpointing == ActivationCheckpointing::kBlocks) {
    features_ = register_module("features", nn::Sequential());
    features_->push_back(ConvNormAct(opts.in_channels, blocks.front().in, 3, 2, 1, Act::kHardswish, kV3Eps, kV3Momentum));
    for (const V3Block& b : blocks) features_->push_back(InvertedResidualV3(b));
    const int64_t lastconv = 6 * blocks.back().out;
    features_->push_back(ConvNormAct(blocks.back().out, lastconv, 1, 1, 1, Act::kHardswish, kV3Eps, kV3Momentum));
    classifier_ = register_module(
        "classifier",
        nn::Sequential(nn::Linear(lastconv, last), nn::Functional([](const torch::Tensor& t) { return torch::hardswish(t); }),
                       nn::Dropout(opts.dropout), nn::Linear(last, opts.num_classes)));
    follow_flags(*this, &fused_, &folded_);
  }

  // (N, C, H, W) -> (N, num_classes)
  torch::Tensor forward(torch::Tensor x) override {
    DLRUN_CHECK_INPUT(x.dim() == 4, "{} needs (N, C, H, W) images, got shape {}", name_, fmt::join(x.sizes(), "x"));
    x = as_input(x);
    if (channels_last_) x = channels_last(x);
    for (size_t i = 0; i < features_->size(); ++i) x = forward_span(features_, i, i + 1, x, recompute_);
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return classifier_->forward(x);
  }

  // The classifier's hard-swish is a Functional, which lower_sequential cannot tell from another.
  // optim.layer_decay's blocks: the inverted residual blocks (features.<i>.) and the last 1x1
  // convolution (a block of its own in timm's MobileNetV3).
  std::string block_pattern() const override { return R"(features\.[1-9]\d*\.)"; }
  Value lower(Graph& g, const Value& images) const override {
    Value x = lower_sequential(g, *features_, "features", images);
    x = g.flatten(g.adaptive_avg_pool("avgpool", x, 1, 1));
    x = g.apply(Fn::kHardswish, g.linear("classifier.0", *classifier_->ptr<nn::LinearImpl>(0), x));
    return g.linear("classifier.3", *classifier_->ptr<nn::LinearImpl>(3), x);
  }

 private:
  std::string name_;
  bool channels_last_;
  bool recompute_;
  nn::Sequential features_{nullptr};
  nn::Sequential classifier_{nullptr};
};

void follow_flags(nn::Module& m, const bool* fused, const bool* folded) {
  for (const auto& child : m.modules(/*include_self=*/false)) {
    if (auto* cna = dynamic_cast<ConvNormActImpl*>(child.get())) {
      cna->fused = fused;
      cna->folded = folded;
    } else if (auto* block = dynamic_cast<InvertedResidualImpl*>(child.get())) {
      block->folded = folded;
    }
  }
}

}  // namespace

std::shared_ptr<Model> make_mobilenet(const ModelOptions& opts, const std::string& name) {
  if (name == "mobilenet_v2") return std::make_shared<MobileNetV2>(opts);
  if (name == "mobilenet_v3_large") return std::make_shared<MobileNetV3>(opts, name, kLarge, 1280);
  if (name == "mobilenet_v3_small") return std::make_shared<MobileNetV3>(opts, name, kSmall, 1024);
  fail_runtime("{} is not a member of the MobileNet family", name);
}

std::vector<std::pair<std::string, int64_t>> mobilenet_variants() {
  return {{"mobilenet_v2", 3504872}, {"mobilenet_v3_large", 5483032}, {"mobilenet_v3_small", 2542856}};
}

}  // namespace dlrun::models::detail
