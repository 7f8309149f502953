// torchvision's RegNet, layer for layer: every regnet_x_* and regnet_y_* it has.
//
// A member is four numbers and a group width (kRegNets: depth, w_0, w_a, w_m, as torchvision's
// BlockParams.from_init_params takes them; Y adds squeeze-excitation of a quarter of the block's
// input width). stage_table() turns them into stages exactly as torchvision does — the same
// float32 tensor operations for the quantised linear widths, then the split into stages of equal
// width and the widths rounded to their group width — so each name is a row of data.
//
// Modules under torchvision's names: stem (3x3/2 Conv2dNormActivation, 32 channels),
// trunk_output.block1 ... block4 (stages), each block `blockS-I` a residual bottleneck:
// proj (1x1 Conv2dNormActivation without activation, where the width or stride changes), then f.a
// (1x1), f.b (3x3 grouped, strided), f.se (Y only: fc1, fc2; ReLU, sigmoid), f.c (1x1, no
// activation), the sum and a ReLU; fc (Linear). Every conv-BN-ReLU here (stem, f.a, f.b) runs
// through conv_bn_relu, so the fused operator applies.
#include <fmt/ranges.h>

#include <cmath>

#include "models/blocks.h"
#include "models/recompute.h"
#include "models/zoo.h"

namespace dlrun::models::detail {
namespace {

namespace nn = torch::nn;

struct RegNetVariant {
  const char* name;
  int64_t depth, w0;
  double wa, wm;
  int64_t group_width;
  bool se;             ///< Y: squeeze-excitation, se_ratio 0.25
  int64_t parameters;  ///< torchvision's count (1000 classes)
};
constexpr RegNetVariant kRegNets[] = {
    {"regnet_y_400mf", 16, 48, 27.89, 2.09, 8, true, 4344144},
    {"regnet_y_800mf", 14, 56, 38.84, 2.4, 16, true, 6432512},
    {"regnet_y_1_6gf", 27, 48, 20.71, 2.65, 24, true, 11202430},
    {"regnet_y_3_2gf", 21, 80, 42.63, 2.66, 24, true, 19436338},
    {"regnet_y_8gf", 17, 192, 76.82, 2.19, 56, true, 39381472},
    {"regnet_y_16gf", 18, 200, 106.23, 2.48, 112, true, 83590140},
    {"regnet_y_32gf", 20, 232, 115.89, 2.53, 232, true, 145046770},
    {"regnet_y_128gf", 27, 456, 160.83, 2.52, 264, true, 644812894},
    {"regnet_x_400mf", 22, 24, 24.48, 2.54, 16, false, 5495976},
    {"regnet_x_800mf", 16, 56, 35.73, 2.28, 16, false, 7259656},
    {"regnet_x_1_6gf", 18, 80, 34.01, 2.25, 24, false, 9190136},
    {"regnet_x_3_2gf", 25, 88, 26.31, 2.25, 48, false, 15296552},
    {"regnet_x_8gf", 23, 80, 49.56, 2.88, 120, false, 39572648},
    {"regnet_x_16gf", 22, 216, 55.59, 2.1, 128, false, 54278536},
    {"regnet_x_32gf", 23, 320, 69.86, 2.0, 168, false, 107811560},
};
constexpr int64_t kStemWidth = 32;

struct RegStageSpec {
  int64_t width, depth, group_width;
};

// torchvision's BlockParams.from_init_params (bottleneck multiplier 1, stride 2 per stage).
std::vector<RegStageSpec> stage_table(const RegNetVariant& v) {
  constexpr int64_t kQuant = 8;
  // The same float32 operations as torchvision, so the rounding agrees.
  torch::Tensor widths_cont = torch::arange(v.depth) * v.wa + static_cast<double>(v.w0);
  torch::Tensor capacity = torch::round(torch::log(widths_cont / static_cast<double>(v.w0)) / std::log(v.wm));
  torch::Tensor widths = (torch::round(torch::pow(v.wm, capacity) * static_cast<double>(v.w0) / kQuant) * kQuant)
                             .to(torch::kInt32);
  std::vector<RegStageSpec> stages;
  for (int64_t i = 0; i < v.depth; ++i) {
    const int64_t w = widths[i].item<int32_t>();
    if (stages.empty() || stages.back().width != w)
      stages.push_back({w, 1, 0});
    else
      ++stages.back().depth;
  }
  for (RegStageSpec& s : stages) {  // _adjust_widths_groups_compatibilty
    s.group_width = std::min(v.group_width, s.width);
    s.width = make_divisible(static_cast<double>(s.width), s.group_width);
  }
  return stages;
}

// BottleneckTransform: a (1x1), b (3x3 grouped), se (Y), c (1x1, no activation).
class BottleneckTransformImpl : public nn::Module, public Lowerable {
 public:
  BottleneckTransformImpl(int64_t in, int64_t out, int64_t stride, int64_t group_width, bool se) {
    a_ = register_module("a", ConvNormAct(in, out, 1, 1, 1, Act::kReLU));
    b_ = register_module("b", ConvNormAct(out, out, 3, stride, out / group_width, Act::kReLU));
    if (se)
      se_ = register_module("se", SqueezeExcitation(out, static_cast<int64_t>(std::nearbyint(0.25 * static_cast<double>(in))),
                                                    Act::kReLU, Act::kSigmoid));
    c_ = register_module("c", ConvNormAct(out, out, 1, 1, 1, Act::kNone));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = b_->forward(a_->forward(x));
    if (se_) y = se_->forward(y);
    return c_->forward(y);
  }
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override {
    Value y = b_->lower(g, prefix + ".b", a_->lower(g, prefix + ".a", x));
    if (se_) y = se_->lower(g, prefix + ".se", y);
    return c_->lower(g, prefix + ".c", y);
  }

 private:
  ConvNormAct a_{nullptr}, b_{nullptr}, c_{nullptr};
  SqueezeExcitation se_{nullptr};
};
TORCH_MODULE(BottleneckTransform);

// ResBottleneckBlock: relu(proj(x) + f(x)), proj the identity unless the shape changes.
class RegBlockImpl : public nn::Module, public Lowerable {
 public:
  RegBlockImpl(int64_t in, int64_t out, int64_t stride, int64_t group_width, bool se) {
    if (in != out || stride != 1) proj_ = register_module("proj", ConvNormAct(in, out, 1, stride, 1, Act::kNone));
    f_ = register_module("f", BottleneckTransform(in, out, stride, group_width, se));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = f_->forward(x);
    return torch::relu(proj_ ? proj_->forward(x) + y : x + y);
  }
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override {
    const Value y = f_->lower(g, prefix + ".f", x);
    return g.apply(Fn::kRelu, g.add(proj_ ? proj_->lower(g, prefix + ".proj", x) : x, y));
  }

 private:
  ConvNormAct proj_{nullptr};
  BottleneckTransform f_{nullptr};
};
TORCH_MODULE(RegBlock);

class RegNet : public Model {
 public:
  RegNet(const ModelOptions& opts, const RegNetVariant& v)
      : name_(v.name),
        channels_last_(opts.channels_last),
        recompute_(opts.activation_checkpointing),
        dropout_(opts.dropout) {
    stem_ = register_module("stem", ConvNormAct(opts.in_channels, kStemWidth, 3, 2, 1, Act::kReLU));
    trunk_ = register_module("trunk_output", nn::Sequential());
    int64_t width = kStemWidth;
    const std::vector<RegStageSpec> stages = stage_table(v);
    for (size_t s = 0; s < stages.size(); ++s) {
      Chain stage;
      for (int64_t i = 0; i < stages[s].depth; ++i) {
        stage->push_back(fmt::format("block{}-{}", s + 1, i),
                         RegBlock(i == 0 ? width : stages[s].width, stages[s].width, i == 0 ? 2 : 1,
                                  stages[s].group_width, v.se));
      }
      stages_.push_back(trunk_->size());
      trunk_->push_back(fmt::format("block{}", s + 1), stage);
      width = stages[s].width;
    }
    fc_ = register_module("fc", nn::Linear(width, opts.num_classes));
    for (const auto& m : modules(/*include_self=*/false))
      if (auto* cna = dynamic_cast<ConvNormActImpl*>(m.get())) {
        cna->fused = &fused_;
        cna->folded = &folded_;
      }
  }

  // (N, C, H, W) -> (N, num_classes)
  torch::Tensor forward(torch::Tensor x) override {
    DLRUN_CHECK_INPUT(x.dim() == 4, "{} needs (N, C, H, W) images, got shape {}", name_, fmt::join(x.sizes(), "x"));
    x = as_input(x);
    if (channels_last_) x = channels_last(x);
    x = stem_->forward(x);
    // Under activation checkpointing a segment is a block (blocks) or a stage (stages).
    x = forward_stages(trunk_, x, stages_, recompute_);
    x = adaptive_avg_pool(x, 1, 1).flatten(1);
    if (dropout_ > 0) x = torch::dropout(x, dropout_, is_training());  // functional: torchvision has none
    return fc_->forward(x);
  }

  // optim.layer_decay's blocks: the blocks of each stage (trunk_output.block<s>.block<s>-<i>.).
  std::string block_pattern() const override { return R"(trunk_output\.block\d+\.block\d+-\d+\.)"; }
  Value lower(Graph& g, const Value& images) const override {
    const Value x = lower_sequential(g, *trunk_, "trunk_output", stem_->lower(g, "stem", images));
    return g.linear("fc", *fc_, g.flatten(g.adaptive_avg_pool("avgpool", x, 1, 1)));
  }

 private:
  std::string name_;
  bool channels_last_;
  ActivationCheckpointing recompute_;
  double dropout_;
  std::vector<size_t> stages_;  ///< every child of trunk_
  ConvNormAct stem_{nullptr};
  nn::Sequential trunk_{nullptr};
  nn::Linear fc_{nullptr};
};

}  // namespace

std::shared_ptr<Model> make_regnet(const ModelOptions& opts, const std::string& name) {
  return make_member(kRegNets, name, "RegNet", [&](const RegNetVariant& v) { return std::make_shared<RegNet>(opts, v); });
}

std::vector<std::pair<std::string, int64_t>> regnet_variants() { return names_and_parameters(kRegNets); }

}  // namespace dlrun::models::detail
