// `mlp`: the simplest baseline — a stack of fully connected layers over flattened pixels.
//
// It is the one model whose size depends on the image size (its first Linear sees every
// pixel), which is why build() takes the input height and width.
#include <fmt/ranges.h>

#include "models/blocks.h"
#include "models/recompute.h"
#include "models/zoo.h"

namespace dlrun::models::detail {
namespace {

class Mlp : public Model {
 public:
  Mlp(const ModelOptions& opts, int64_t in_features)
      : in_features_(in_features), recompute_(opts.activation_checkpointing == ActivationCheckpointing::kBlocks) {
    layers_ = register_module("layers", torch::nn::Sequential());
    int64_t width = in_features;
    for (int64_t hidden : opts.hidden) {
      hidden_starts_.push_back(layers_->size());
      layers_->push_back(torch::nn::Linear(width, hidden));
      layers_->push_back(torch::nn::ReLU(torch::nn::ReLUOptions().inplace(true)));
      if (opts.dropout > 0) layers_->push_back(torch::nn::Dropout(opts.dropout));
      width = hidden;
    }
    layers_->push_back(torch::nn::Linear(width, opts.num_classes));
  }

  // (N, C, H, W) -> (N, num_classes)
  torch::Tensor forward(torch::Tensor x) override {
    const int64_t features = x.dim() == 0 || x.size(0) == 0 ? 0 : x.numel() / x.size(0);
    DLRUN_CHECK_INPUT(x.dim() >= 2 && features == in_features_,
                      "mlp was built for {} input features (in_channels*H*W), got images of shape {}",
                      in_features_, fmt::join(x.sizes(), "x"));
    x = as_input(x).flatten(1);  // (N, C*H*W)
    // Each hidden layer (Linear, ReLU, Dropout) is a segment under activation checkpointing.
    for (size_t h = 0; h < hidden_starts_.size(); ++h) {
      const size_t end = h + 1 < hidden_starts_.size() ? hidden_starts_[h + 1] : layers_->size() - 1;
      x = forward_span(layers_, hidden_starts_[h], end, x, recompute_);
    }
    return forward_span(layers_, layers_->size() - 1, layers_->size(), x, false);
  }

  // optim.layer_decay's blocks: each module of the stack is a layer.
  std::string block_pattern() const override { return R"(layers\.\d+\.)"; }
  Value lower(Graph& g, const Value& images) const override {
    return lower_sequential(g, *layers_, "layers", g.flatten(images));
  }

 private:
  int64_t in_features_;
  bool recompute_;
  std::vector<size_t> hidden_starts_;  ///< where each hidden layer starts in layers_
  torch::nn::Sequential layers_{nullptr};
};

}  // namespace

std::shared_ptr<Model> make_mlp(const ModelOptions& opts, int64_t in_features) {
  DLRUN_CHECK_INPUT(!opts.hidden.empty(), "model.hidden: mlp needs at least one hidden layer");
  return std::make_shared<Mlp>(opts, in_features);
}

}  // namespace dlrun::models::detail
