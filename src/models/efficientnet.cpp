// torchvision's EfficientNet, layer for layer: `efficientnet_b0` ... `efficientnet_b7` and
// `efficientnet_v2_s`, `_m`, `_l`.
//
// V1: one table of stages (kStages: expansion, kernel, stride, channels in and out, repeats, as
// torchvision's _efficientnet_conf) scaled per member by its width and depth multipliers
// (kEfficientNets), so each name is a row of data. V2: a table per member (kV2S, kV2M, kV2L),
// whose first three stages are FusedMBConv (block.0 a kxk expansion, strided, SiLU; block.1 the
// 1x1 projection; or one kxk conv when the expansion is 1), the last conv 1280 wide, BatchNorm
// eps 0.001. Modules under torchvision's names: features.0
// (3x3/2 stem, SiLU), features.1 ... features.7 (the stages, each a Sequential of MBConv blocks:
// block.0 the 1x1 expansion unless it is 1, block.1 the depthwise kxk, block.2 the
// squeeze-excitation (fc1, fc2; SiLU, sigmoid), block.3 the 1x1 projection), features.8 (1x1
// to 4x the last channels, SiLU), classifier.1 (Linear after classifier.0, a Dropout of
// model.dropout). b5-b7 use BatchNorm eps 0.001, momentum 0.01, as torchvision's.
//
// Stochastic depth (model.stochastic_depth, auto: 0.2): a block with a shortcut drops its
// residual branch for a whole sample with probability p * k / K (block k of K), scaling the kept
// ones by 1 / (1 - p), in training only; the draw comes from the default generator, as dropout's,
// so a resume repeats it.
#include <fmt/ranges.h>

#include <cmath>
#include <iterator>
#include <vector>

#include "models/blocks.h"
#include "models/recompute.h"
#include "models/zoo.h"

namespace dlrun::models::detail {
namespace {

namespace nn = torch::nn;

struct StageSpec {
  int64_t expand, k, stride, in, out, repeats;
  bool fused = false;  ///< FusedMBConv (V2's first stages)
};
constexpr StageSpec kStages[] = {
    {1, 3, 1, 32, 16, 1},    {6, 3, 2, 16, 24, 2},    {6, 5, 2, 24, 40, 2},  {6, 3, 2, 40, 80, 3},
    {6, 5, 1, 80, 112, 3},   {6, 5, 2, 112, 192, 4},  {6, 3, 1, 192, 320, 1},
};
constexpr StageSpec kV2S[] = {
    {1, 3, 1, 24, 24, 2, true},  {4, 3, 2, 24, 48, 4, true}, {4, 3, 2, 48, 64, 4, true},
    {4, 3, 2, 64, 128, 6},       {6, 3, 1, 128, 160, 9},     {6, 3, 2, 160, 256, 15},
};
constexpr StageSpec kV2M[] = {
    {1, 3, 1, 24, 24, 3, true},  {4, 3, 2, 24, 48, 5, true}, {4, 3, 2, 48, 80, 5, true}, {4, 3, 2, 80, 160, 7},
    {6, 3, 1, 160, 176, 14},     {6, 3, 2, 176, 304, 18},    {6, 3, 1, 304, 512, 5},
};
constexpr StageSpec kV2L[] = {
    {1, 3, 1, 32, 32, 4, true},  {4, 3, 2, 32, 64, 7, true}, {4, 3, 2, 64, 96, 7, true}, {4, 3, 2, 96, 192, 10},
    {6, 3, 1, 192, 224, 19},     {6, 3, 2, 224, 384, 25},    {6, 3, 1, 384, 640, 7},
};

struct EfficientNetVariant {
  const char* name;
  double width, depth;
  double eps, momentum;  ///< BatchNorm's (b5-b7: 0.001, 0.01; V2: 0.001, 0.1)
  const StageSpec* stages;
  size_t num_stages;
  int64_t last;        ///< the last conv's width (0: 4x the last stage's)
  int64_t parameters;  ///< torchvision's count (1000 classes)
};
constexpr EfficientNetVariant kEfficientNets[] = {
    {"efficientnet_b0", 1.0, 1.0, 1e-5, 0.1, kStages, std::size(kStages), 0, 5288548},
    {"efficientnet_b1", 1.0, 1.1, 1e-5, 0.1, kStages, std::size(kStages), 0, 7794184},
    {"efficientnet_b2", 1.1, 1.2, 1e-5, 0.1, kStages, std::size(kStages), 0, 9109994},
    {"efficientnet_b3", 1.2, 1.4, 1e-5, 0.1, kStages, std::size(kStages), 0, 12233232},
    {"efficientnet_b4", 1.4, 1.8, 1e-5, 0.1, kStages, std::size(kStages), 0, 19341616},
    {"efficientnet_b5", 1.6, 2.2, 0.001, 0.01, kStages, std::size(kStages), 0, 30389784},
    {"efficientnet_b6", 1.8, 2.6, 0.001, 0.01, kStages, std::size(kStages), 0, 43040704},
    {"efficientnet_b7", 2.0, 3.1, 0.001, 0.01, kStages, std::size(kStages), 0, 66347960},
    {"efficientnet_v2_s", 1.0, 1.0, 0.001, 0.1, kV2S, std::size(kV2S), 1280, 21458488},
    {"efficientnet_v2_m", 1.0, 1.0, 0.001, 0.1, kV2M, std::size(kV2M), 1280, 54139356},
    {"efficientnet_v2_l", 1.0, 1.0, 0.001, 0.1, kV2L, std::size(kV2L), 1280, 118515272},
};

constexpr double kDefaultStochasticDepth = 0.2;

// MBConv (1x1 expansion, depthwise kxk, squeeze-excitation, 1x1 projection) or FusedMBConv
// (kxk expansion, 1x1 projection), with the shortcut where the shape is kept.
class MBConvImpl : public nn::Module, public Lowerable {
 public:
  MBConvImpl(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t expand, bool fused, double drop, double eps,
             double momentum)
      : residual_(stride == 1 && in == out), drop_(drop) {
    const int64_t expanded = make_divisible(static_cast<double>(in * expand));
    block_ = register_module("block", nn::Sequential());
    if (fused) {
      block_->push_back(ConvNormAct(in, expanded == in ? out : expanded, k, stride, 1, Act::kSiLU, eps, momentum));
      if (expanded != in) block_->push_back(ConvNormAct(expanded, out, 1, 1, 1, Act::kNone, eps, momentum));
      return;
    }
    if (expanded != in) block_->push_back(ConvNormAct(in, expanded, 1, 1, 1, Act::kSiLU, eps, momentum));
    block_->push_back(ConvNormAct(expanded, expanded, k, stride, expanded, Act::kSiLU, eps, momentum));
    block_->push_back(SqueezeExcitation(expanded, std::max<int64_t>(1, in / 4), Act::kSiLU, Act::kSigmoid));
    block_->push_back(ConvNormAct(expanded, out, 1, 1, 1, Act::kNone, eps, momentum));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = block_->forward(x);
    if (!residual_) return y;
    y = stochastic_depth(y, drop_, is_training());
    return y + x;
  }
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override {
    const Value y = lower_sequential(g, *block_, prefix + ".block", x);  // stochastic depth: the identity
    return residual_ ? g.add(y, x) : y;
  }

 private:
  bool residual_;
  double drop_;
  nn::Sequential block_{nullptr};
};
TORCH_MODULE(MBConv);

class EfficientNet : public Model {
 public:
  EfficientNet(const ModelOptions& opts, const EfficientNetVariant& v)
      : name_(v.name),
        channels_last_(opts.channels_last),
        recompute_(opts.activation_checkpointing) {
    const double eps = v.eps, momentum = v.momentum;
    const double p = is_auto(opts.stochastic_depth) ? kDefaultStochasticDepth : opts.stochastic_depth;
    auto channels = [&](int64_t c) { return make_divisible(static_cast<double>(c) * v.width); };
    auto repeats = [&](int64_t n) { return static_cast<int64_t>(std::ceil(static_cast<double>(n) * v.depth)); };
    const std::vector<StageSpec> stages(v.stages, v.stages + v.num_stages);
    int64_t total = 0;
    for (const StageSpec& s : stages) total += repeats(s.repeats);

    features_ = register_module("features", nn::Sequential());
    features_->push_back(ConvNormAct(opts.in_channels, channels(stages[0].in), 3, 2, 1, Act::kSiLU, eps, momentum));
    int64_t index = 0;
    for (const StageSpec& s : stages) {
      Chain stage;
      for (int64_t b = 0; b < repeats(s.repeats); ++b, ++index) {
        const int64_t in = b == 0 ? channels(s.in) : channels(s.out);
        const double drop = p * static_cast<double>(index) / static_cast<double>(total);
        stage->push_back(
            MBConv(in, channels(s.out), s.k, b == 0 ? s.stride : 1, s.expand, s.fused, drop, eps, momentum));
      }
      stages_.push_back(features_->size());
      features_->push_back(stage);
    }
    const int64_t last_in = channels(stages.back().out), last = v.last > 0 ? v.last : 4 * last_in;
    features_->push_back(ConvNormAct(last_in, last, 1, 1, 1, Act::kSiLU, eps, momentum));
    classifier_ = register_module("classifier", nn::Sequential(nn::Dropout(opts.dropout), nn::Linear(last, opts.num_classes)));
    for (const auto& m : modules(/*include_self=*/false))
      if (auto* cna = dynamic_cast<ConvNormActImpl*>(m.get())) cna->folded = &folded_;
  }

  // (N, C, H, W) -> (N, num_classes)
  torch::Tensor forward(torch::Tensor x) override {
    DLRUN_CHECK_INPUT(x.dim() == 4, "{} needs (N, C, H, W) images, got shape {}", name_, fmt::join(x.sizes(), "x"));
    x = as_input(x);
    if (channels_last_) x = channels_last(x);
    // Under activation checkpointing each block (and the stem and the last conv) is a segment.
    x = forward_stages(features_, x, stages_, recompute_, /*others_are_blocks=*/true);
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return classifier_->forward(x);
  }

  // optim.layer_decay's blocks: the MBConv / FusedMBConv blocks (features.<stage>.<i>.).
  std::string block_pattern() const override { return R"(features\.\d+\.\d+\.(?=block\.))"; }
  // The last 1x1 convolution and its BatchNorm (timm's conv_head, bn2) join the last block.
  std::string last_block_pattern() const override { return R"(features\.)"; }
  Value lower(Graph& g, const Value& images) const override {
    const Value x = lower_sequential(g, *features_, "features", images);
    return lower_sequential(g, *classifier_, "classifier", g.flatten(g.adaptive_avg_pool("avgpool", x, 1, 1)));
  }

 private:
  std::string name_;
  bool channels_last_;
  ActivationCheckpointing recompute_;
  std::vector<size_t> stages_;  ///< the indices in features_ of the stages
  nn::Sequential features_{nullptr};
  nn::Sequential classifier_{nullptr};
};

}  // namespace

std::shared_ptr<Model> make_efficientnet(const ModelOptions& opts, const std::string& name) {
  return make_member(kEfficientNets, name, "EfficientNet", [&](const EfficientNetVariant& v) { return std::make_shared<EfficientNet>(opts, v); });
}

std::vector<std::pair<std::string, int64_t>> efficientnet_variants() { return names_and_parameters(kEfficientNets); }

}  // namespace dlrun::models::detail
