// torchvision's Vision Transformer, layer for layer: vit_b_16, vit_b_32, vit_l_16, vit_l_32,
// vit_h_14.
//
// One row per member (kViTs: patch, layers, heads, width, MLP width, as torchvision's
// constructors take them). Modules under torchvision's names: class_token (1, 1, E), conv_proj
// (the patchify conv, patch x patch / patch), encoder.pos_embedding (1, 1 + (S / patch)^2, E),
// encoder.layers.encoder_layer_I (ln_1, self_attention: in_proj_weight, in_proj_bias, out_proj;
// ln_2, mlp.0, mlp.3), encoder.ln, heads.head. The position embeddings fix the image side
// (model.image_size, auto 224): build() refuses any other.
//
// Initialisation as torchvision's constructor (initialize() below, as it needs to tell the
// modules apart): conv_proj truncated normal of std sqrt(1 / fan_in) and zero bias; position
// embeddings N(0, 0.02); class token 0; attention in_proj Xavier-uniform with zero bias, out_proj
// the Linear default with zero bias; MLP Linears Xavier-uniform with biases N(0, 1e-6);
// LayerNorms 1 and 0; the head all zeros.
#include <fmt/ranges.h>

#include <cmath>

#include "models/blocks.h"
#include "models/recompute.h"
#include "models/zoo.h"

namespace dlrun::models::detail {
namespace {

namespace nn = torch::nn;

constexpr double kNormEps = 1e-6;

struct ViTVariant {
  const char* name;
  int64_t patch, layers, heads, width, mlp;
  int64_t parameters;  ///< torchvision's count (1000 classes, 224x224)
};
constexpr ViTVariant kViTs[] = {
    {"vit_b_16", 16, 12, 12, 768, 3072, 86567656},    {"vit_b_32", 32, 12, 12, 768, 3072, 88224232},
    {"vit_l_16", 16, 24, 16, 1024, 4096, 304326632},  {"vit_l_32", 32, 24, 16, 1024, 4096, 306535400},
    {"vit_h_14", 14, 32, 16, 1280, 5120, 632045800},
};

// ln_1, self-attention, + input; ln_2, MLP, + that.
class EncoderBlockImpl : public nn::Module, public Lowerable {
 public:
  EncoderBlockImpl(int64_t width, int64_t heads, int64_t mlp) {
    ln_1 = register_module("ln_1", nn::LayerNorm(nn::LayerNormOptions({width}).eps(kNormEps)));
    self_attention = register_module("self_attention", SelfAttention(width, heads));
    ln_2 = register_module("ln_2", nn::LayerNorm(nn::LayerNormOptions({width}).eps(kNormEps)));
    this->mlp = register_module("mlp", TransformerMlp(width, mlp));
  }

  // (N, L, E) -> (N, L, E)
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = self_attention->forward(ln_1->forward(x)) + x;
    return mlp->forward(ln_2->forward(y)) + y;
  }
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override {
    const Value y = g.add(self_attention->lower(g, prefix + ".self_attention", g.layer_norm(prefix + ".ln_1", *ln_1, x)), x);
    return g.add(mlp->lower(g, prefix + ".mlp", g.layer_norm(prefix + ".ln_2", *ln_2, y)), y);
  }

  nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  SelfAttention self_attention{nullptr};
  TransformerMlp mlp{nullptr};
};
TORCH_MODULE(EncoderBlock);

class EncoderImpl : public nn::Module {
 public:
  EncoderImpl(int64_t tokens, const ViTVariant& v) {
    pos_embedding = register_parameter("pos_embedding", torch::zeros({1, tokens, v.width}));
    layers = register_module("layers", nn::Sequential());
    for (int64_t i = 0; i < v.layers; ++i)
      layers->push_back(fmt::format("encoder_layer_{}", i), EncoderBlock(v.width, v.heads, v.mlp));
    ln = register_module("ln", nn::LayerNorm(nn::LayerNormOptions({v.width}).eps(kNormEps)));
  }

  torch::Tensor pos_embedding;
  nn::Sequential layers{nullptr};
  nn::LayerNorm ln{nullptr};
};
TORCH_MODULE(Encoder);

class VisionTransformer : public Model, public SelfInitializing {
 public:
  VisionTransformer(const ModelOptions& opts, const ViTVariant& v, int64_t image_size)
      : name_(v.name),
        image_size_(image_size),
        width_(v.width),
        recompute_(opts.activation_checkpointing == ActivationCheckpointing::kBlocks),
        dropout_(opts.dropout) {
    DLRUN_CHECK(image_size % v.patch == 0, ExitCode::kBadInput, "{} takes images whose side is a multiple of its "
                "patch, {}: model.image_size is {}", v.name, v.patch, image_size);
    const int64_t side = image_size / v.patch;
    class_token_ = register_parameter("class_token", torch::zeros({1, 1, v.width}));
    conv_proj_ = register_module(
        "conv_proj", nn::Conv2d(nn::Conv2dOptions(opts.in_channels, v.width, v.patch).stride(v.patch)));
    encoder_ = register_module("encoder", Encoder(1 + side * side, v));
    heads_ = register_module("heads", nn::Sequential());
    head_ = nn::Linear(v.width, opts.num_classes);
    heads_->push_back("head", head_);
  }

  // (N, C, S, S) -> (N, num_classes)
  torch::Tensor forward(torch::Tensor x) override {
    DLRUN_CHECK_INPUT(x.dim() == 4 && x.size(2) == image_size_ && x.size(3) == image_size_,
                      "{} is built for (N, C, {}, {}) images (model.image_size), got shape {}", name_, image_size_,
                      image_size_, fmt::join(x.sizes(), "x"));
    x = as_input(x);
    const int64_t n = x.size(0);
    x = conv_proj_->forward(x).reshape({n, width_, -1}).permute({0, 2, 1});  // (N, patches, E)
    x = torch::cat({class_token_.expand({n, -1, -1}), x}, 1) + encoder_->pos_embedding;
    // Under activation checkpointing each encoder layer is a segment.
    for (size_t i = 0; i < encoder_->layers->size(); ++i) x = forward_span(encoder_->layers, i, i + 1, x, recompute_);
    x = encoder_->ln->forward(x).select(1, 0);  // the class token
    if (dropout_ > 0) x = torch::dropout(x, dropout_, is_training());  // functional: torchvision's keys
    return head_->forward(x);
  }

  // optim.layer_decay's blocks: the encoder layers.
  std::string block_pattern() const override { return R"(encoder\.layers\.encoder_layer_\d+\.)"; }
  std::string last_block_pattern() const override { return R"(encoder\.ln\.)"; }  // the final norm, as timm
  // timm's no_weight_decay(): the class token and the position embedding.
  std::string no_decay_pattern() const override { return R"(^(class_token|encoder\.pos_embedding)$)"; }
  Value lower(Graph& g, const Value& images) const override {
    Value x = g.conv("conv_proj", *conv_proj_, images);
    x = g.transpose(g.reshape(x, {-1, width_, x.size(2) * x.size(3)}), {0, 2, 1});  // (N, patches, E)
    x = g.concat({g.expand_batch("class_token", class_token_, x), x}, 1);
    x = g.add(x, g.constant("encoder.pos_embedding", encoder_->pos_embedding));
    x = lower_sequential(g, *encoder_->layers, "encoder.layers", x);
    x = g.select(g.layer_norm("encoder.ln", *encoder_->ln, x), 1, 0);  // the class token
    return g.linear("heads.head", *head_, x);
  }

  // In state-dict order: the class token, conv_proj, the encoder, the head.
  void initialize(at::Generator& gen) override {
    torch::NoGradGuard no_grad;
    class_token_.zero_();
    fill_trunc_normal(conv_proj_->weight, std::sqrt(1.0 / static_cast<double>(conv_proj_->weight[0].numel())), -2,
                      2, gen);
    conv_proj_->bias.zero_();
    fill_normal(encoder_->pos_embedding, 0.02, gen);
    for (const auto& layer : *encoder_->layers) {
      auto* block = layer.ptr<EncoderBlockImpl>().get();
      block->ln_1->reset_parameters();
      SelfAttentionImpl& attention = *block->self_attention;
      fill_xavier_uniform(attention.in_proj_weight, gen);
      attention.in_proj_bias.zero_();
      fill_uniform(attention.out_proj->weight, 1.0 / std::sqrt(static_cast<double>(width_)), gen);
      attention.out_proj->bias.zero_();
      block->ln_2->reset_parameters();
      for (nn::LinearImpl* fc : {block->mlp->fc1.get(), block->mlp->fc2.get()}) {
        fill_xavier_uniform(fc->weight, gen);
        fill_normal(fc->bias, 1e-6, gen);
      }
    }
    encoder_->ln->reset_parameters();
    head_->weight.zero_();
    head_->bias.zero_();
  }

 private:
  std::string name_;
  int64_t image_size_, width_;
  bool recompute_;
  double dropout_;
  torch::Tensor class_token_;
  nn::Conv2d conv_proj_{nullptr};
  Encoder encoder_{nullptr};
  nn::Sequential heads_{nullptr};
  nn::Linear head_{nullptr};
};

}  // namespace

std::shared_ptr<Model> make_vit(const ModelOptions& opts, const std::string& name, int64_t image_size) {
  return make_member(kViTs, name, "ViT",
                     [&](const ViTVariant& v) { return std::make_shared<VisionTransformer>(opts, v, image_size); });
}

std::vector<std::pair<std::string, int64_t>> vit_variants() { return names_and_parameters(kViTs); }

}  // namespace dlrun::models::detail
