// torchvision's EfficientNet, layer for layer: `efficientnet_b0` ... `efficientnet_b7`.
//
// One table of stages (kStages: expansion, kernel, stride, channels in and out, repeats, as
// torchvision's _efficientnet_conf) scaled per member by its width and depth multipliers
// (kEfficientNets), so each name is a row of data. Modules under torchvision's names: features.0
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

#include <array>
#include <cmath>

#include "models/blocks.h"
#include "models/recompute.h"
#include "models/zoo.h"

namespace dlrun::models::detail {
namespace {

namespace nn = torch::nn;

struct StageSpec {
  int64_t expand, k, stride, in, out, repeats;
};
constexpr std::array<StageSpec, 7> kStages = {{
    {1, 3, 1, 32, 16, 1},
    {6, 3, 2, 16, 24, 2},
    {6, 5, 2, 24, 40, 2},
    {6, 3, 2, 40, 80, 3},
    {6, 5, 1, 80, 112, 3},
    {6, 5, 2, 112, 192, 4},
    {6, 3, 1, 192, 320, 1},
}};

struct EfficientNetVariant {
  const char* name;
  double width, depth;
  bool small_momentum;  ///< BatchNorm eps 0.001, momentum 0.01 (b5-b7)
  int64_t parameters;   ///< torchvision's count (1000 classes)
};
constexpr EfficientNetVariant kEfficientNets[] = {
    {"efficientnet_b0", 1.0, 1.0, false, 5288548},   {"efficientnet_b1", 1.0, 1.1, false, 7794184},
    {"efficientnet_b2", 1.1, 1.2, false, 9109994},   {"efficientnet_b3", 1.2, 1.4, false, 12233232},
    {"efficientnet_b4", 1.4, 1.8, false, 19341616},  {"efficientnet_b5", 1.6, 2.2, true, 30389784},
    {"efficientnet_b6", 1.8, 2.6, true, 43040704},   {"efficientnet_b7", 2.0, 3.1, true, 66347960},
};
constexpr double kDefaultStochasticDepth = 0.2;

class MBConvImpl : public nn::Module {
 public:
  MBConvImpl(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t expand, double drop, double eps,
             double momentum)
      : residual_(stride == 1 && in == out), drop_(drop) {
    const int64_t expanded = make_divisible(static_cast<double>(in * expand));
    block_ = register_module("block", nn::Sequential());
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

 private:
  bool residual_;
  double drop_;
  nn::Sequential block_{nullptr};
};
TORCH_MODULE(MBConv);

// A stage: its blocks as children "0", "1", ... (torchvision's nn.Sequential), with a forward a
// Sequential can hold (LibTorch's own Sequential cannot hold another).
class MBStageImpl : public nn::SequentialImpl {
 public:
  using nn::SequentialImpl::SequentialImpl;
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = x;
    for (auto& block : *this) y = block.forward(y);
    return y;
  }
};
TORCH_MODULE(MBStage);

class EfficientNet : public Model {
 public:
  EfficientNet(const ModelOptions& opts, const EfficientNetVariant& v)
      : name_(v.name),
        channels_last_(opts.channels_last),
        recompute_(opts.activation_checkpointing == ActivationCheckpointing::kBlocks) {
    const double eps = v.small_momentum ? 0.001 : 1e-5, momentum = v.small_momentum ? 0.01 : 0.1;
    const double p = is_auto(opts.stochastic_depth) ? kDefaultStochasticDepth : opts.stochastic_depth;
    auto channels = [&](int64_t c) { return make_divisible(static_cast<double>(c) * v.width); };
    auto repeats = [&](int64_t n) { return static_cast<int64_t>(std::ceil(static_cast<double>(n) * v.depth)); };
    int64_t total = 0;
    for (const StageSpec& s : kStages) total += repeats(s.repeats);

    features_ = register_module("features", nn::Sequential());
    features_->push_back(ConvNormAct(opts.in_channels, channels(kStages[0].in), 3, 2, 1, Act::kSiLU, eps, momentum));
    int64_t index = 0;
    for (const StageSpec& s : kStages) {
      MBStage stage;
      for (int64_t b = 0; b < repeats(s.repeats); ++b, ++index) {
        const int64_t in = b == 0 ? channels(s.in) : channels(s.out);
        const double drop = p * static_cast<double>(index) / static_cast<double>(total);
        stage->push_back(MBConv(in, channels(s.out), s.k, b == 0 ? s.stride : 1, s.expand, drop, eps, momentum));
      }
      features_->push_back(stage);
    }
    const int64_t last_in = channels(kStages.back().out), last = 4 * last_in;
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
    for (size_t i = 0; i < features_->size(); ++i) {
      auto stage = std::dynamic_pointer_cast<MBStageImpl>(features_->ptr(i));
      if (stage == nullptr) {
        x = forward_span(features_, i, i + 1, x, recompute_);
        continue;
      }
      nn::Sequential blocks(std::static_pointer_cast<nn::SequentialImpl>(stage));
      for (size_t b = 0; b < blocks->size(); ++b) x = forward_span(blocks, b, b + 1, x, recompute_);
    }
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return classifier_->forward(x);
  }

 private:
  std::string name_;
  bool channels_last_;
  bool recompute_;
  nn::Sequential features_{nullptr};
  nn::Sequential classifier_{nullptr};
};

}  // namespace

std::shared_ptr<Model> make_efficientnet(const ModelOptions& opts, const std::string& name) {
  for (const EfficientNetVariant& v : kEfficientNets)
    if (name == v.name) return std::make_shared<EfficientNet>(opts, v);
  fail_runtime("{} is not a member of the EfficientNet family", name);
}

std::vector<std::pair<std::string, int64_t>> efficientnet_variants() {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const EfficientNetVariant& v : kEfficientNets) out.emplace_back(v.name, v.parameters);
  return out;
}

}  // namespace dlrun::models::detail
