// `convnet`: a small, fast CNN for 28x28 / 32x32 images (the quickstart model).
//
// Two stages of two 3x3 conv-BN-ReLU layers, each stage ending in a 2x2 max pool, then
// adaptive average pooling to 3x3 (7x7 for 28x28 inputs, 8x8 for 32x32), flatten and a linear
// classifier. With width w: C->w->w, pool, w->2w->2w, pool. Keeping a 3x3 grid instead of
// global pooling keeps some layout and is worth about a point of Fashion-MNIST accuracy at 3
// epochs (91.3% vs 90.3% in a PyTorch run of the quickstart recipe), for 5k more weights. Convs
// have no bias (the BatchNorm after each one has it).
#include <fmt/ranges.h>

#include "models/blocks.h"
#include "models/recompute.h"
#include "models/zoo.h"

namespace dlrun::models::detail {
namespace {

// Appends one conv-BN-ReLU unit (three modules) and returns the index of its first.
size_t add_conv_bn_relu(torch::nn::Sequential& seq, int64_t in, int64_t out) {
  const size_t first = seq->size();
  seq->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 3).padding(1).bias(false)));
  seq->push_back(BatchNorm2d(out));
  seq->push_back(torch::nn::ReLU(torch::nn::ReLUOptions().inplace(true)));
  return first;
}

constexpr int64_t kPoolSide = 3;  // features are pooled to a kPoolSide x kPoolSide grid

class ConvNet : public Model {
 public:
  explicit ConvNet(const ModelOptions& opts)
      : channels_last_(opts.channels_last), recompute_(opts.activation_checkpointing == ActivationCheckpointing::kBlocks) {
    const int64_t w = opts.width;
    features_ = register_module("features", torch::nn::Sequential());
    units_.push_back(add_conv_bn_relu(features_, opts.in_channels, w));
    units_.push_back(add_conv_bn_relu(features_, w, w));
    features_->push_back(torch::nn::MaxPool2d(2));
    units_.push_back(add_conv_bn_relu(features_, w, 2 * w));
    units_.push_back(add_conv_bn_relu(features_, 2 * w, 2 * w));
    features_->push_back(torch::nn::MaxPool2d(2));
    pool_ = features_->size();
    features_->push_back(torch::nn::AdaptiveAvgPool2d(kPoolSide));
    classifier_ = register_module("classifier", torch::nn::Sequential());
    if (opts.dropout > 0) classifier_->push_back(torch::nn::Dropout(opts.dropout));
    classifier_->push_back(torch::nn::Linear(2 * w * kPoolSide * kPoolSide, opts.num_classes));
  }

  // (N, C, H, W) -> (N, num_classes)
  torch::Tensor forward(torch::Tensor x) override {
    DLRUN_CHECK_INPUT(x.dim() == 4 && x.size(2) >= 4 && x.size(3) >= 4,
                      "convnet needs (N, C, H, W) images of at least 4x4, got shape {}",
                      fmt::join(x.sizes(), "x"));
    x = as_input(x);
    if (channels_last_) x = channels_last(x);
    // Module by module; each conv-BN-ReLU unit in one call (the fused operator when
    // use_fused_conv_bn_relu), a segment of its own under activation checkpointing.
    for (size_t i = 0, u = 0; i < features_->size();) {
      if (u < units_.size() && units_[u] == i) {
        ++u;
        torch::nn::Conv2d conv(features_->ptr<torch::nn::Conv2dImpl>(i));
        BatchNorm2d bn(features_->ptr<BatchNorm2dImpl>(i + 1));
        SegmentFn unit = [conv, bn, fused = fused_, folded = folded_](const torch::Tensor& t) mutable {
          return conv_bn_relu(conv, bn, t, fused, folded);
        };
        x = recompute_ ? checkpoint(unit, x, {features_->ptr(i), features_->ptr(i + 1)}) : unit(x);
        i += 3;
      } else if (i == pool_) {
        x = adaptive_avg_pool(x, kPoolSide, kPoolSide);
        ++i;
      } else {
        x = forward_span(features_, i, i + 1, x, false);
        ++i;
      }
    }                                            // (N, 2w, 3, 3)
    return classifier_->forward(x.flatten(1));  // (N, 2w*9) -> (N, num_classes)
  }

  // optim.layer_decay's blocks: each module of the feature stack (a convolution, a BatchNorm) is a layer.
  std::string block_pattern() const override { return R"(features\.\d+\.)"; }
  Value lower(Graph& g, const Value& images) const override {
    return lower_sequential(g, *classifier_, "classifier", g.flatten(lower_sequential(g, *features_, "features", images)));
  }

 private:
  bool channels_last_;
  bool recompute_;
  std::vector<size_t> units_;  ///< where each conv-BN-ReLU unit starts in features_
  size_t pool_ = 0;            ///< the AdaptiveAvgPool2d's index in features_
  torch::nn::Sequential features_{nullptr};
  torch::nn::Sequential classifier_{nullptr};
};

}  // namespace

std::shared_ptr<Model> make_convnet(const ModelOptions& opts) {
  DLRUN_CHECK_INPUT(opts.width > 0, "model.width must be positive, got {}", opts.width);
  return std::make_shared<ConvNet>(opts);
}

}  // namespace dlrun::models::detail

namespace dlrun::models {

torch::Tensor adaptive_avg_pool_by_matmul(const torch::Tensor& x, int64_t oh, int64_t ow) {
  // Row i of the (out, in) matrix averages inputs [floor(i*in/out), ceil((i+1)*in/out)), the
  // windows of adaptive_avg_pool2d; built with device ops, so no host copy waits on the device.
  auto averaging = [&](int64_t in, int64_t out) {
    const auto idx = torch::TensorOptions().dtype(torch::kLong).device(x.device());
    const auto i = torch::arange(out, idx).view({out, 1});
    const auto start = torch::div(i * in, out, "floor"), end = torch::div((i + 1) * in + out - 1, out, "floor");
    const auto j = torch::arange(in, idx).view({1, in});
    const auto inside = (j >= start) & (j < end);
    return inside.to(x.scalar_type()) / (end - start).to(x.scalar_type());
  };
  return torch::matmul(torch::matmul(averaging(x.size(2), oh), x), averaging(x.size(3), ow).t());
}

torch::Tensor adaptive_avg_pool(const torch::Tensor& x, int64_t oh, int64_t ow) {
  if (x.is_cuda() && at::globalContext().deterministicAlgorithms()) return adaptive_avg_pool_by_matmul(x, oh, ow);
  return torch::adaptive_avg_pool2d(x, {oh, ow});
}

}  // namespace dlrun::models
