// torchvision's ResNet family, layer for layer: resnet18/34/50/101/152 (v1.5), ResNeXt
// (resnext50_32x4d, resnext101_32x8d, resnext101_64x4d) and Wide ResNet (wide_resnet50_2,
// wide_resnet101_2), from one table of variants (kVariants: block kind, blocks per stage,
// groups and width per group, as torchvision's constructors take them).
//
// Modules are registered in torchvision's order and under its names (conv1, bn1, layer1.0.
// conv1, layer1.0.downsample.0, fc, ...), so state_dict() keys, their order and shapes equal
// torchvision.models.NAME().state_dict()'s: a file torchvision wrote loads strictly and gives
// the same logits (tests/models/torchvision_compat.py), and dlrun's exports load there with
// strict=True. Bottleneck strides on its 3x3 conv (v1.5), whose width is
// planes * width_per_group / 64 * groups. The `cifar` stem swaps the 7x7/2 conv + max pool for
// a 3x3/1 conv (same name, conv1) for 32x32 inputs.
//
// The convolutions are written once, as ConvSpecs (the stem's, each block's, the stage table):
// the constructors build the network from them, and resnet_conv_bn_units (models/shapes.h) walks
// the same specs to list the network's conv-BN-ReLU shapes for `dlrun bench kernels`.
#include <fmt/ranges.h>

#include <array>
#include <map>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "models/blocks.h"
#include "models/recompute.h"
#include "models/shapes.h"
#include "models/zoo.h"

namespace dlrun::models::detail {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad, int64_t groups = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, k).stride(stride).padding(pad).groups(groups).bias(false));
}

// One convolution (square kernel, no bias) as a constructor makes it.
struct ConvSpec {
  int64_t in, out, k, stride, pad;
  int64_t groups = 1;
};

nn::Conv2d conv(const ConvSpec& c) { return conv(c.in, c.out, c.k, c.stride, c.pad, c.groups); }

// A member of the family, as torchvision's constructor arguments: block kind, blocks per stage,
// groups and width per group of the bottleneck's 3x3 conv.
struct Variant {
  const char* name;
  bool bottleneck;  ///< Bottleneck (1x1, 3x3, 1x1 x4) or BasicBlock (two 3x3)
  std::array<int64_t, 4> blocks;
  int64_t groups;
  int64_t width_per_group;
  int64_t parameters;  ///< torchvision's count (1000 classes, 3 channels)
};
constexpr Variant kVariants[] = {
    {"resnet18", false, {2, 2, 2, 2}, 1, 64, 11689512},
    {"resnet34", false, {3, 4, 6, 3}, 1, 64, 21797672},
    {"resnet50", true, {3, 4, 6, 3}, 1, 64, 25557032},
    {"resnet101", true, {3, 4, 23, 3}, 1, 64, 44549160},
    {"resnet152", true, {3, 8, 36, 3}, 1, 64, 60192808},
    {"resnext50_32x4d", true, {3, 4, 6, 3}, 32, 4, 25028904},
    {"resnext101_32x8d", true, {3, 4, 23, 3}, 32, 8, 88791336},
    {"resnext101_64x4d", true, {3, 4, 23, 3}, 64, 4, 83455272},
    {"wide_resnet50_2", true, {3, 4, 6, 3}, 1, 128, 68883240},
    {"wide_resnet101_2", true, {3, 4, 23, 3}, 1, 128, 126886696},
};

const Variant& variant(const std::string& name) {
  for (const Variant& v : kVariants)
    if (name == v.name) return v;
  fail_runtime("{} is not a member of the ResNet family", name);
}

// The stem's convolution: 7x7/2 (imagenet, followed by the max pool below) or 3x3/1 (cifar).
ConvSpec stem_conv(int64_t in_channels, bool imagenet) {
  return imagenet ? ConvSpec{in_channels, 64, 7, 2, 3} : ConvSpec{in_channels, 64, 3, 1, 1};
}
// The imagenet stem's max pool: 3x3, stride 2, padding 1.
constexpr int64_t kPoolKernel = 3, kPoolStride = 2, kPoolPad = 1;

// The stages: output planes of each (before a block's expansion); every stage but the first
// halves the side in its first block.
constexpr std::array<int64_t, 4> kPlanes = {64, 128, 256, 512};
int64_t block_stride(size_t stage, int64_t block) { return (stage > 0 && block == 0) ? 2 : 1; }

// A residual block: (N, in, H, W) -> (N, planes*expansion, H/stride, W/stride).
class Block : public nn::Module, public Lowerable {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  const bool* fused = nullptr;   ///< the model's use_fused_conv_bn_relu flag
  const bool* folded = nullptr;  ///< the model's use_folded_batchnorm flag
  bool use_fused() const { return fused != nullptr && *fused; }
  bool use_folded() const { return folded != nullptr && *folded; }

 protected:
  /// The projection shortcut (downsample: 0 conv, 1 bn) of x, or x itself.
  torch::Tensor shortcut(nn::Sequential& downsample, const torch::Tensor& x) const {
    if (!downsample) return x;
    nn::Conv2d c(downsample->ptr<nn::Conv2dImpl>(0));
    BatchNorm2d b(downsample->ptr<BatchNorm2dImpl>(1));
    return conv_bn(c, b, x, use_folded());
  }
  static Value shortcut(Graph& g, const nn::Sequential& downsample, const std::string& prefix, const Value& x) {
    if (!downsample) return x;
    return g.conv(prefix + ".downsample.0", *downsample->ptr<nn::Conv2dImpl>(0), x, prefix + ".downsample.1",
                  downsample->ptr<BatchNorm2dImpl>(1).get());
  }
  /// relu(bn(conv(x))) in a graph, or without the ReLU.
  static Value lower_conv_bn(Graph& g, const std::string& prefix, int i, const nn::Conv2d& c, const BatchNorm2d& b,
                       const Value& x, bool relu) {
    const Value y = g.conv(fmt::format("{}.conv{}", prefix, i), *c, x, fmt::format("{}.bn{}", prefix, i), b.get());
    return relu ? g.apply(Fn::kRelu, y) : y;
  }
};

// conv1x1 + BN projection of the shortcut, registered as "downsample" (0: conv, 1: bn).
nn::Sequential projection(int64_t in, int64_t out, int64_t stride) {
  return nn::Sequential(conv(in, out, 1, stride, 0), BatchNorm2d(out));
}

// Two 3x3 convs (resnet18/34).
class BasicBlock : public Block {
 public:
  static constexpr int64_t kExpansion = 1;
  /// Its conv-BN-ReLUs in forward order, the last one the block end (conv-BN-add-ReLU).
  static std::array<ConvSpec, 2> convs(int64_t in, int64_t planes, int64_t stride, const Variant& /*v*/) {
    return {{{in, planes, 3, stride, 1}, {planes, planes, 3, 1, 1}}};
  }
  BasicBlock(int64_t in, int64_t planes, int64_t stride, const Variant& v) {
    const auto c = convs(in, planes, stride, v);
    conv1_ = register_module("conv1", conv(c[0]));
    bn1_ = register_module("bn1", BatchNorm2d(planes));
    conv2_ = register_module("conv2", conv(c[1]));
    bn2_ = register_module("bn2", BatchNorm2d(planes));
    if (stride != 1 || in != planes) downsample_ = register_module("downsample", projection(in, planes, stride));
  }

  torch::Tensor forward(torch::Tensor x) override {
    torch::Tensor identity = shortcut(downsample_, x);
    torch::Tensor out = conv_bn_relu(conv1_, bn1_, x, use_fused(), use_folded());
    return conv_bn_add_relu(conv2_, bn2_, out, identity, use_fused(), use_folded());
  }
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override {
    const Value identity = shortcut(g, downsample_, prefix, x);
    const Value out = lower_conv_bn(g, prefix, 2, conv2_, bn2_, lower_conv_bn(g, prefix, 1, conv1_, bn1_, x, true), false);
    return g.apply(Fn::kRelu, g.add(out, identity));
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  nn::Sequential downsample_{nullptr};
};

// 1x1 reduce, 3x3 (strided, v1.5; grouped in ResNeXt), 1x1 expand by 4 (resnet50 and deeper,
// ResNeXt, Wide ResNet).
class Bottleneck : public Block {
 public:
  static constexpr int64_t kExpansion = 4;
  /// The 3x3 conv's channels: planes, scaled by width_per_group / 64, times groups.
  static int64_t width(int64_t planes, const Variant& v) {
    return planes * v.width_per_group / 64 * v.groups;
  }
  /// Its conv-BN-ReLUs in forward order, the last one the block end (conv-BN-add-ReLU).
  static std::array<ConvSpec, 3> convs(int64_t in, int64_t planes, int64_t stride, const Variant& v) {
    const int64_t w = width(planes, v);
    return {{{in, w, 1, 1, 0}, {w, w, 3, stride, 1, v.groups}, {w, planes * kExpansion, 1, 1, 0}}};
  }
  Bottleneck(int64_t in, int64_t planes, int64_t stride, const Variant& v) {
    const int64_t out = planes * kExpansion;
    const int64_t w = width(planes, v);
    const auto c = convs(in, planes, stride, v);
    conv1_ = register_module("conv1", conv(c[0]));
    bn1_ = register_module("bn1", BatchNorm2d(w));
    conv2_ = register_module("conv2", conv(c[1]));
    bn2_ = register_module("bn2", BatchNorm2d(w));
    conv3_ = register_module("conv3", conv(c[2]));
    bn3_ = register_module("bn3", BatchNorm2d(out));
    if (stride != 1 || in != out) downsample_ = register_module("downsample", projection(in, out, stride));
  }

  torch::Tensor forward(torch::Tensor x) override {
    torch::Tensor identity = shortcut(downsample_, x);
    torch::Tensor out = conv_bn_relu(conv1_, bn1_, x, use_fused(), use_folded());
    out = conv_bn_relu(conv2_, bn2_, out, use_fused(), use_folded());
    return conv_bn_add_relu(conv3_, bn3_, out, identity, use_fused(), use_folded());
  }
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override {
    const Value identity = shortcut(g, downsample_, prefix, x);
    Value out = lower_conv_bn(g, prefix, 2, conv2_, bn2_, lower_conv_bn(g, prefix, 1, conv1_, bn1_, x, true), true);
    out = lower_conv_bn(g, prefix, 3, conv3_, bn3_, out, false);
    return g.apply(Fn::kRelu, g.add(out, identity));
  }

 private:
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  nn::Sequential downsample_{nullptr};
};

class ResNet : public Model {
 public:
  template <typename B>
  ResNet(const ModelOptions& opts, const Variant& v, B* /*block type tag*/)
      : channels_last_(opts.channels_last),
        imagenet_stem_(opts.stem == ResnetStem::kImagenet),
        dropout_(opts.dropout),
        recompute_(opts.activation_checkpointing) {
    const ConvSpec stem = stem_conv(opts.in_channels, imagenet_stem_);
    conv1_ = register_module("conv1", conv(stem));
    bn1_ = register_module("bn1", BatchNorm2d(stem.out));
    int64_t in = stem.out;
    for (size_t i = 0; i < 4; ++i) {
      nn::Sequential layer;
      for (int64_t b = 0; b < v.blocks[i]; ++b) {
        auto block = std::make_shared<B>(in, kPlanes[i], block_stride(i, b), v);
        block->fused = &fused_;
        block->folded = &folded_;
        layer->push_back(block);
        in = kPlanes[i] * B::kExpansion;
      }
      layers_[i] = register_module(fmt::format("layer{}", i + 1), layer);
    }
    fc_ = register_module("fc", nn::Linear(512 * B::kExpansion, opts.num_classes));
  }

  // (N, C, H, W) -> (N, num_classes)
  torch::Tensor forward(torch::Tensor x) override {
    DLRUN_CHECK_INPUT(x.dim() == 4, "resnet needs (N, C, H, W) images, got shape {}",
                      fmt::join(x.sizes(), "x"));
    x = as_input(x);
    if (channels_last_) x = channels_last(x);
    x = conv_bn_relu(conv1_, bn1_, x, fused_, folded_);
    if (imagenet_stem_) x = torch::max_pool2d(x, kPoolKernel, kPoolStride, kPoolPad);  // (N, 64, H/4, W/4)
    for (auto& layer : layers_) {
      if (recompute_ == ActivationCheckpointing::kBlocks) {
        for (size_t b = 0; b < layer->size(); ++b) x = forward_span(layer, b, b + 1, x, true);
      } else {
        x = forward_span(layer, 0, layer->size(), x, recompute_ == ActivationCheckpointing::kStages);
      }
    }
    x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);  // (N, 512*expansion)
    // model.dropout before the classifier, as for the other models; functional, so the
    // state dict keeps torchvision's names (torchvision's ResNet has no dropout at all).
    if (dropout_ > 0) x = torch::dropout(x, dropout_, is_training());
    return fc_->forward(x);
  }

  // optim.layer_decay's blocks: the residual blocks (layer<s>.<i>.).
  std::string block_pattern() const override { return R"(layer\d+\.\d+\.)"; }
  Value lower(Graph& g, const Value& images) const override {
    Value x = g.apply(Fn::kRelu, g.conv("conv1", *conv1_, images, "bn1", bn1_.get()));
    if (imagenet_stem_) x = g.max_pool("the stem's max pool", x, kPoolKernel, kPoolStride, kPoolPad);
    for (size_t i = 0; i < layers_.size(); ++i) x = lower_sequential(g, *layers_[i], fmt::format("layer{}", i + 1), x);
    return g.linear("fc", *fc_, g.flatten(g.adaptive_avg_pool("avgpool", x, 1, 1)));
  }

 private:
  bool channels_last_;
  bool imagenet_stem_;
  double dropout_;
  ActivationCheckpointing recompute_;
  nn::Conv2d conv1_{nullptr};
  BatchNorm2d bn1_{nullptr};
  std::array<nn::Sequential, 4> layers_{nn::Sequential(nullptr), nn::Sequential(nullptr),
                                        nn::Sequential(nullptr), nn::Sequential(nullptr)};
  nn::Linear fc_{nullptr};
};

// f(block type tag, variant) for the family member `name`.
template <typename F>
auto with_variant(const std::string& name, F&& f) {
  const Variant& v = variant(name);
  if (v.bottleneck) return f(static_cast<Bottleneck*>(nullptr), v);
  return f(static_cast<BasicBlock*>(nullptr), v);
}

// The side of a convolution's (or pool's) output for an input of side `side`.
int64_t out_side(int64_t side, int64_t k, int64_t stride, int64_t pad) { return (side + 2 * pad - k) / stride + 1; }

// The distinct units in order of first appearance, each with its count.
class UnitList {
 public:
  // Adds the unit `c` on an input of side `side`; returns its output's side.
  int64_t add(const ConvSpec& c, int64_t side, bool tail) {
    if (c.groups != 1) fail_runtime("the units of a grouped convolution are not listed (ResNeXt): take a ResNet");
    const auto key = std::make_tuple(c.in, c.out, c.k, c.stride, side, tail);
    const auto it = seen_.find(key);
    if (it != seen_.end()) {
      ++units_[it->second].count;
    } else {
      seen_[key] = units_.size();
      ConvBnUnit u;
      u.in = c.in;
      u.out = c.out;
      u.k = c.k;
      u.stride = c.stride;
      u.pad = c.pad;
      u.side = side;
      u.tail = tail;
      u.count = 1;
      units_.push_back(u);
    }
    return out_side(side, c.k, c.stride, c.pad);
  }
  std::vector<ConvBnUnit> take() { return std::move(units_); }

 private:
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool>, size_t> seen_;
  std::vector<ConvBnUnit> units_;
};

}  // namespace

std::shared_ptr<Model> make_resnet(const ModelOptions& opts, const std::string& name) {
  return with_variant(name, [&](auto* tag, const Variant& v) -> std::shared_ptr<Model> {
    return std::make_shared<ResNet>(opts, v, tag);
  });
}

void zero_init_residual(Model& model) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> gammas;  // each block's BatchNorm weights, by name
  for (auto& [name, t] : state_dict(model))
    if (name.rfind("layer", 0) == 0 && (name.find(".bn2.weight") != std::string::npos || name.find(".bn3.weight") != std::string::npos))
      gammas.emplace(name, t);
  for (auto& [name, t] : gammas) {  // a block's last: bn3 (Bottleneck), else bn2 (BasicBlock)
    const std::string block = name.substr(0, name.rfind(".bn"));
    const bool last = name.find(".bn3.") != std::string::npos || gammas.count(block + ".bn3.weight") == 0;
    if (last) t.zero_();
  }
}

std::vector<std::pair<std::string, int64_t>> resnet_variants() {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const Variant& v : kVariants) out.emplace_back(v.name, v.parameters);
  return out;
}

}  // namespace dlrun::models::detail

namespace dlrun::models {

std::vector<ConvBnUnit> resnet_conv_bn_units(const std::string& name, int64_t image) {
  using namespace detail;
  return with_variant(name, [&](auto* tag, const Variant& v) {
    using B = std::remove_pointer_t<decltype(tag)>;
    UnitList units;
    const ConvSpec stem = stem_conv(3, true);
    int64_t side = units.add(stem, image, false);
    side = out_side(side, kPoolKernel, kPoolStride, kPoolPad);
    int64_t in = stem.out;
    for (size_t s = 0; s < 4; ++s)
      for (int64_t b = 0; b < v.blocks[s]; ++b) {
        const auto convs = B::convs(in, kPlanes[s], block_stride(s, b), v);
        for (size_t i = 0; i < convs.size(); ++i) side = units.add(convs[i], side, i + 1 == convs.size());
        in = kPlanes[s] * B::kExpansion;
      }
    return units.take();
  });
}

}  // namespace dlrun::models
