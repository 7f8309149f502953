// torchvision's Swin Transformer, layer for layer: swin_t, swin_s, swin_b (V1) and swin_v2_t,
// swin_v2_s, swin_v2_b.
//
// One row per member (kSwins: width, depths and heads per stage, default stochastic depth,
// window; 4x4 patches). V2 differs in three places, each a flag here: its attention is cosine
// attention scaled by a learned logit_scale, with the position bias from a small MLP (cpb_mlp)
// of the log-spaced relative coordinates (the relative_coords_table buffer) and the key's bias
// held at zero; its blocks normalise after each branch (post-norm); its patch merging normalises
// after the reduction. Modules under torchvision's names, on (N, H, W, C) activations:
// features.0 (the patchify conv "0" and its LayerNorm "2"), features.1, .3, .5, .7 (stages of
// blocks: norm1, attn — relative_position_bias_table, the relative_position_index buffer, qkv,
// proj —, norm2, mlp.0, mlp.3; every second block's windows shifted by half a window),
// features.2, .4, .6 (patch merging: reduction, norm), norm, head. The windowed attention is
// torchvision's shifted_window_attention step for step (padding to whole windows, the roll, the
// mask of -100 between regions a shift brought together), so the logits agree bit for bit.
//
// Stochastic depth (model.stochastic_depth; auto: torchvision's 0.2, 0.3, 0.5): block k of K,
// from 0, drops both its branches per sample with probability p * k / (K - 1).
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "models/blocks.h"
#include "models/recompute.h"
#include "models/zoo.h"

namespace dlrun::models::detail {
namespace {

namespace nn = torch::nn;

constexpr int64_t kPatch = 4;

struct SwinVariant {
  const char* name;
  int64_t width;
  std::array<int64_t, 4> depths, heads;
  double stochastic_depth;  ///< torchvision's default
  int64_t window;
  bool v2;
  int64_t parameters;  ///< torchvision's count (1000 classes)
};
constexpr SwinVariant kSwins[] = {
    {"swin_t", 96, {2, 2, 6, 2}, {3, 6, 12, 24}, 0.2, 7, false, 28288354},
    {"swin_s", 96, {2, 2, 18, 2}, {3, 6, 12, 24}, 0.3, 7, false, 49606258},
    {"swin_b", 128, {2, 2, 18, 2}, {4, 8, 16, 32}, 0.5, 7, false, 87768224},
    {"swin_v2_t", 96, {2, 2, 6, 2}, {3, 6, 12, 24}, 0.2, 8, true, 28351570},
    {"swin_v2_s", 96, {2, 2, 18, 2}, {3, 6, 12, 24}, 0.3, 8, true, 49737442},
    {"swin_v2_b", 128, {2, 2, 18, 2}, {4, 8, 16, 32}, 0.5, 8, true, 87930848},
};

// ShiftedWindowAttention (V2: ShiftedWindowAttentionV2): multi-head attention within windows of
// window x window, with a bias per relative position and head.
class WindowAttentionImpl : public nn::Module, public Lowerable {
 public:
  WindowAttentionImpl(int64_t dim, int64_t heads, int64_t window, int64_t shift, bool v2)
      : heads_(heads), window_(window), shift_(shift), v2_(v2) {
    qkv = register_module("qkv", nn::Linear(dim, 3 * dim));
    proj = register_module("proj", nn::Linear(dim, dim));
    if (!v2) {
      table = register_parameter("relative_position_bias_table",
                                 torch::zeros({(2 * window_ - 1) * (2 * window_ - 1), heads}));
    } else {
      // The offsets (dy, dx) of a window, each scaled to [-8, 8] and log-spaced: the MLP's input.
      auto r = torch::arange(-(window_ - 1), window_, torch::kFloat32);
      torch::Tensor coords = torch::stack(torch::meshgrid({r, r}, "ij")).permute({1, 2, 0}).contiguous().unsqueeze(0);
      coords = coords / static_cast<double>(window_ - 1) * 8;
      coords = torch::sign(coords) * torch::log2(torch::abs(coords) + 1.0) / 3.0;
      coords_ = register_buffer("relative_coords_table", coords);
      logit_scale = register_parameter("logit_scale", torch::full({heads, 1, 1}, std::log(10.0)));
      cpb_mlp = register_module("cpb_mlp", nn::Sequential());
      cpb_mlp->push_back("0", nn::Linear(2, 512));
      cpb_mlp->push_back("1", nn::Functional(torch::relu));
      cpb_mlp->push_back("2", nn::Linear(nn::LinearOptions(512, heads).bias(false)));
    }
    // For each pair of positions (i, j) in a window, the row of their offset in the table.
    torch::Tensor coords = torch::stack(torch::meshgrid({torch::arange(window_), torch::arange(window_)}, "ij"))
                               .flatten(1);                                     // (2, W*W)
    torch::Tensor rel = (coords.unsqueeze(2) - coords.unsqueeze(1)).permute({1, 2, 0}).contiguous();  // (W*W, W*W, 2)
    rel.select(2, 0).add_(window_ - 1).mul_(2 * window_ - 1);
    rel.select(2, 1).add_(window_ - 1);
    // int64 as torchvision's; Module::to(dtype) (model.dtype float64) converts every buffer, so it is
    // read back as int64 where it indexes
    index_ = register_buffer("relative_position_index", rel.sum(-1).flatten());
  }

  // (N, H, W, C) -> (N, H, W, C)
  torch::Tensor forward(const torch::Tensor& input) {
    const int64_t n = input.size(0), h = input.size(1), w = input.size(2), c = input.size(3), ww = window_ * window_;
    const int64_t pad_r = (window_ - w % window_) % window_, pad_b = (window_ - h % window_) % window_;
    torch::Tensor x = torch::constant_pad_nd(input, {0, 0, 0, pad_r, 0, pad_b});
    const int64_t ph = x.size(1), pw = x.size(2);
    const int64_t shift_h = window_ >= ph ? 0 : shift_, shift_w = window_ >= pw ? 0 : shift_;
    const bool shifted = shift_h + shift_w > 0;
    if (shifted) x = torch::roll(x, {-shift_h, -shift_w}, {1, 2});
    const int64_t windows = (ph / window_) * (pw / window_);
    x = x.view({n, ph / window_, window_, pw / window_, window_, c}).permute({0, 1, 3, 2, 4, 5}).reshape({n * windows, ww, c});
    torch::Tensor bias = qkv->bias;
    if (v2_) {  // the key's bias stays zero
      bias = bias.clone();
      bias.slice(0, c, 2 * c).zero_();
    }
    torch::Tensor qkv_ = torch::linear(x, qkv->weight, bias).reshape({x.size(0), ww, 3, heads_, c / heads_}).permute({2, 0, 3, 1, 4});
    torch::Tensor attn;
    if (v2_) {  // cosine attention
      namespace F = torch::nn::functional;
      attn = F::normalize(qkv_[0], F::NormalizeFuncOptions().dim(-1))
                 .matmul(F::normalize(qkv_[1], F::NormalizeFuncOptions().dim(-1)).transpose(-2, -1));
      attn = attn * torch::clamp_max(logit_scale, std::log(100.0)).exp();
    } else {
      torch::Tensor q = qkv_[0] * std::pow(static_cast<double>(c / heads_), -0.5);
      attn = q.matmul(qkv_[1].transpose(-2, -1));
    }
    torch::Tensor per_offset = v2_ ? cpb_mlp->forward(coords_).view({-1, heads_}) : table;
    torch::Tensor position = per_offset.index({index_.to(torch::kLong)}).view({ww, ww, -1}).permute({2, 0, 1}).contiguous().unsqueeze(0);
    attn = attn + (v2_ ? 16 * torch::sigmoid(position) : position);
    if (shifted) {
      attn = attn.view({n, windows, heads_, ww, ww}) + mask(ph, pw, shift_h, shift_w, x.options()).unsqueeze(1).unsqueeze(0);
      attn = attn.view({-1, heads_, ww, ww});
    }
    x = torch::softmax(attn, -1).matmul(qkv_[2]).transpose(1, 2).reshape({x.size(0), ww, c});
    x = proj->forward(x);
    x = x.view({n, ph / window_, pw / window_, window_, window_, c}).permute({0, 1, 3, 2, 4, 5}).reshape({n, ph, pw, c});
    if (shifted) x = torch::roll(x, {shift_h, shift_w}, {1, 2});
    return x.slice(1, 0, h).slice(2, 0, w).contiguous();
  }

  // forward() step for step; what depends on the weights alone (the position bias, V2's
  // clamped logit scale, the key's zero bias) and the shift's mask are the graph's constants.
  Value lower(Graph& g, const std::string& prefix, const Value& input) const override {
    torch::NoGradGuard no_grad;
    const int64_t h = input.size(1), w = input.size(2), c = input.size(3), ww = window_ * window_;
    const int64_t pad_r = (window_ - w % window_) % window_, pad_b = (window_ - h % window_) % window_;
    Value x = pad_b + pad_r > 0 ? g.pad_end(input, {0, pad_b, pad_r, 0}) : input;
    const int64_t ph = h + pad_b, pw = w + pad_r;
    const int64_t shift_h = window_ >= ph ? 0 : shift_, shift_w = window_ >= pw ? 0 : shift_;
    x = g.roll(g.roll(x, -shift_h, 1), -shift_w, 2);
    const int64_t windows = (ph / window_) * (pw / window_);
    x = g.reshape(x, {-1, ph / window_, window_, pw / window_, window_, c});
    x = g.reshape(g.transpose(x, {0, 1, 3, 2, 4, 5}), {-1, ww, c});  // (N * windows, W*W, C)
    torch::Tensor bias = qkv->bias.detach().clone();
    if (v2_) bias.slice(0, c, 2 * c).zero_();
    Value qkv_ = g.linear(prefix + ".qkv", qkv->weight, bias, x);
    qkv_ = g.transpose(g.reshape(qkv_, {-1, ww, 3, heads_, c / heads_}), {2, 0, 3, 1, 4});
    Value q = g.select(qkv_, 0, 0), k = g.select(qkv_, 0, 1);
    const Value v = g.select(qkv_, 0, 2);
    Value attn;
    if (v2_) {
      attn = g.matmul(g.l2_normalize(q), g.transpose(g.l2_normalize(k), {0, 1, 3, 2}));
      attn = g.mul(attn, g.constant(prefix + ".logit_scale", torch::clamp_max(logit_scale, std::log(100.0)).exp()));
    } else {
      q = g.mul(q, g.constant(prefix + ".scale", torch::tensor(std::pow(static_cast<double>(c / heads_), -0.5))));
      attn = g.matmul(q, g.transpose(k, {0, 1, 3, 2}));
    }
    torch::Tensor per_offset = v2_ ? cpb_mlp.ptr()->forward(coords_).view({-1, heads_}) : table;
    torch::Tensor position = per_offset.index({index_.to(torch::kLong)}).view({ww, ww, -1}).permute({2, 0, 1}).unsqueeze(0);
    attn = g.add(attn, g.constant(prefix + ".position_bias", v2_ ? 16 * torch::sigmoid(position) : position));
    if (shift_h + shift_w > 0) {
      const torch::Tensor m = mask(ph, pw, shift_h, shift_w, torch::TensorOptions()).unsqueeze(1).unsqueeze(0);
      attn = g.add(g.reshape(attn, {-1, windows, heads_, ww, ww}), g.constant(prefix + ".shift_mask", m));
      attn = g.reshape(attn, {-1, heads_, ww, ww});
    }
    x = g.reshape(g.transpose(g.matmul(g.softmax(attn), v), {0, 2, 1, 3}), {-1, ww, c});
    x = g.linear(prefix + ".proj", *proj, x);
    x = g.reshape(x, {-1, ph / window_, pw / window_, window_, window_, c});
    x = g.reshape(g.transpose(x, {0, 1, 3, 2, 4, 5}), {-1, ph, pw, c});
    x = g.roll(g.roll(x, shift_h, 1), shift_w, 2);
    if (pad_b > 0) x = g.slice(x, 1, 0, h);
    if (pad_r > 0) x = g.slice(x, 2, 0, w);
    return x;
  }

  nn::Linear qkv{nullptr}, proj{nullptr};
  torch::Tensor table;           ///< V1: the bias per offset and head
  torch::Tensor logit_scale;     ///< V2
  nn::Sequential cpb_mlp{nullptr};  ///< V2: offset -> bias per head

 private:
  // (windows, W*W, W*W): 0 within a region, -100 between regions the roll brought together.
  torch::Tensor mask(int64_t ph, int64_t pw, int64_t sh, int64_t sw, const torch::TensorOptions& options) const {
    torch::Tensor m = torch::zeros({ph, pw}, options);
    const std::array<std::pair<int64_t, int64_t>, 3> hs = {{{0, ph - window_}, {ph - window_, ph - sh}, {ph - sh, ph}}};
    const std::array<std::pair<int64_t, int64_t>, 3> ws = {{{0, pw - window_}, {pw - window_, pw - sw}, {pw - sw, pw}}};
    double count = 0;
    for (const auto& [h0, h1] : hs)
      for (const auto& [w0, w1] : ws) {
        m.slice(0, h0, h1).slice(1, w0, w1).fill_(count);
        count += 1;
      }
    m = m.view({ph / window_, window_, pw / window_, window_}).permute({0, 2, 1, 3}).reshape({-1, window_ * window_});
    m = m.unsqueeze(1) - m.unsqueeze(2);
    return m.masked_fill(m != 0, -100.0).masked_fill(m == 0, 0.0);
  }

  int64_t heads_;
  int64_t window_;  // the side of a window
  int64_t shift_;
  bool v2_;
  torch::Tensor index_, coords_;
};
TORCH_MODULE(WindowAttention);

// x + sd(attn(norm1(x))), then + sd(mlp(norm2(.))); V2: x + sd(norm1(attn(x))), ...
class SwinBlockImpl : public nn::Module, public Lowerable {
 public:
  SwinBlockImpl(int64_t dim, int64_t heads, int64_t window, int64_t shift, bool v2, double drop)
      : drop_(drop), v2_(v2) {
    norm1 = register_module("norm1", nn::LayerNorm(nn::LayerNormOptions({dim})));
    attn = register_module("attn", WindowAttention(dim, heads, window, shift, v2));
    norm2 = register_module("norm2", nn::LayerNorm(nn::LayerNormOptions({dim})));
    mlp = register_module("mlp", TransformerMlp(dim, 4 * dim));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    if (v2_) {
      torch::Tensor y = x + stochastic_depth(norm1->forward(attn->forward(x)), drop_, is_training());
      return y + stochastic_depth(norm2->forward(mlp->forward(y)), drop_, is_training());
    }
    torch::Tensor y = x + stochastic_depth(attn->forward(norm1->forward(x)), drop_, is_training());
    return y + stochastic_depth(mlp->forward(norm2->forward(y)), drop_, is_training());
  }
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override {
    auto norm = [&](const char* n, const nn::LayerNorm& ln, const Value& v) { return g.layer_norm(prefix + n, *ln, v); };
    const std::string a = prefix + ".attn", m = prefix + ".mlp";
    if (v2_) {
      const Value y = g.add(x, norm(".norm1", norm1, attn->lower(g, a, x)));
      return g.add(y, norm(".norm2", norm2, mlp->lower(g, m, y)));
    }
    const Value y = g.add(x, attn->lower(g, a, norm(".norm1", norm1, x)));
    return g.add(y, mlp->lower(g, m, norm(".norm2", norm2, y)));
  }

  nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  WindowAttention attn{nullptr};
  TransformerMlp mlp{nullptr};

 private:
  double drop_;
  bool v2_;
};
TORCH_MODULE(SwinBlock);

// PatchMerging: each 2x2 of (N, H, W, C) (padded to even) concatenated, LayerNorm, Linear to 2C
// (V2: Linear, then LayerNorm).
class PatchMergingImpl : public nn::Module, public Lowerable {
 public:
  PatchMergingImpl(int64_t dim, bool v2) : v2_(v2) {
    reduction = register_module("reduction", nn::Linear(nn::LinearOptions(4 * dim, 2 * dim).bias(false)));
    norm = register_module("norm", nn::LayerNorm(nn::LayerNormOptions({v2 ? 2 * dim : 4 * dim})));
  }

  torch::Tensor forward(const torch::Tensor& input) {
    using torch::indexing::Slice;
    const int64_t h = input.size(1), w = input.size(2);
    torch::Tensor x = torch::constant_pad_nd(input, {0, 0, 0, w % 2, 0, h % 2});
    auto at = [&](int64_t i, int64_t j) { return x.index({Slice(), Slice(i, None, 2), Slice(j, None, 2), Slice()}); };
    x = torch::cat({at(0, 0), at(1, 0), at(0, 1), at(1, 1)}, -1);
    return v2_ ? norm->forward(reduction->forward(x)) : reduction->forward(norm->forward(x));
  }
  Value lower(Graph& g, const std::string& prefix, const Value& input) const override {
    const int64_t h = input.size(1), w = input.size(2);
    const Value x = h % 2 + w % 2 > 0 ? g.pad_end(input, {0, h % 2, w % 2, 0}) : input;
    auto at = [&](int64_t i, int64_t j) { return g.slice(g.slice(x, 1, i, x.size(1), 2), 2, j, x.size(2), 2); };
    const Value y = g.concat({at(0, 0), at(1, 0), at(0, 1), at(1, 1)}, 3);
    const std::string r = prefix + ".reduction", n = prefix + ".norm";
    return v2_ ? g.layer_norm(n, *norm, g.linear(r, *reduction, y)) : g.linear(r, *reduction, g.layer_norm(n, *norm, y));
  }

  nn::Linear reduction{nullptr};
  nn::LayerNorm norm{nullptr};

 private:
  bool v2_;
  static constexpr auto None = torch::indexing::None;
};
TORCH_MODULE(PatchMerging);

// The patch embedding: conv "0", then LayerNorm "2" over NHWC (torchvision's Permute is "1").
class PatchEmbedImpl : public nn::SequentialImpl, public Lowerable {
 public:
  PatchEmbedImpl(int64_t in, int64_t dim) {
    conv = nn::Conv2d(nn::Conv2dOptions(in, dim, kPatch).stride(kPatch));
    norm = nn::LayerNorm(nn::LayerNormOptions({dim}));
    push_back("0", conv);
    push_back("2", norm);
  }
  torch::Tensor forward(const torch::Tensor& x) { return norm->forward(conv->forward(x).permute({0, 2, 3, 1})); }
  Value lower(Graph& g, const std::string& prefix, const Value& x) const override {
    return g.layer_norm(prefix + ".2", *norm, g.transpose(g.conv(prefix + ".0", *conv, x), {0, 2, 3, 1}));
  }

  nn::Conv2d conv{nullptr};
  nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(PatchEmbed);

class SwinTransformer : public Model, public SelfInitializing {
 public:
  SwinTransformer(const ModelOptions& opts, const SwinVariant& v)
      : name_(v.name),
        recompute_(opts.activation_checkpointing),
        dropout_(opts.dropout) {
    const double p = is_auto(opts.stochastic_depth) ? v.stochastic_depth : opts.stochastic_depth;
    int64_t total = 0;
    for (int64_t d : v.depths) total += d;
    features_ = register_module("features", nn::Sequential());
    features_->push_back(PatchEmbed(opts.in_channels, v.width));
    int64_t index = 0, dim = v.width;
    for (size_t s = 0; s < v.depths.size(); ++s) {
      Chain stage;
      for (int64_t b = 0; b < v.depths[s]; ++b, ++index)
        stage->push_back(SwinBlock(dim, v.heads[s], v.window, b % 2 == 0 ? 0 : v.window / 2, v.v2,
                                   p * static_cast<double>(index) / static_cast<double>(total - 1)));
      stages_.push_back(features_->size());
      features_->push_back(stage);
      if (s + 1 == v.depths.size()) break;
      features_->push_back(PatchMerging(dim, v.v2));
      dim *= 2;
    }
    norm_ = register_module("norm", nn::LayerNorm(nn::LayerNormOptions({dim})));
    head_ = register_module("head", nn::Linear(dim, opts.num_classes));
  }

  // (N, C, H, W) -> (N, num_classes)
  torch::Tensor forward(torch::Tensor x) override {
    DLRUN_CHECK_INPUT(x.dim() == 4, "{} needs (N, C, H, W) images, got shape {}", name_, fmt::join(x.sizes(), "x"));
    x = as_input(x);
    // Under activation checkpointing a segment is a block (blocks) or a stage (stages).
    x = forward_stages(features_, x, stages_, recompute_);
    x = norm_->forward(x).permute({0, 3, 1, 2});
    x = adaptive_avg_pool(x, 1, 1).flatten(1);
    if (dropout_ > 0) x = torch::dropout(x, dropout_, is_training());  // functional: torchvision has none
    return head_->forward(x);
  }

  // optim.layer_decay's blocks: the Swin blocks (features.<stage>.<i>.); patch merging joins the next block.
  std::string block_pattern() const override { return R"(features\.\d+\.\d+\.(?=norm1|attn|mlp|norm2))"; }
  std::string last_block_pattern() const override { return R"(norm\.)"; }  // the final norm, as timm
  // timm's no_weight_decay(): V1's relative position bias tables, V2's logit scales and the MLP
  // that computes its position bias.
  std::string no_decay_pattern() const override {
    return R"(relative_position_bias_table$|logit_scale$|cpb_mlp\.)";
  }
  Value lower(Graph& g, const Value& images) const override {
    Value x = g.layer_norm("norm", *norm_, lower_sequential(g, *features_, "features", images));
    x = g.adaptive_avg_pool("avgpool", g.transpose(x, {0, 3, 1, 2}), 1, 1);
    return g.linear("head", *head_, g.flatten(x));
  }

  // torchvision's constructor: every Linear truncated normal (std 0.02) with zero bias (the
  // blocks' Xavier MLPs are drawn over, V2's cpb_mlp too), V1's bias tables truncated normal
  // (std 0.02), V2's logit scales log(10), the
  // patchify conv PyTorch's default, LayerNorms 1 and 0; in state-dict order.
  void initialize(at::Generator& gen) override {
    torch::NoGradGuard no_grad;
    for (const auto& m : modules(/*include_self=*/false)) {
      if (auto* attn = dynamic_cast<WindowAttentionImpl*>(m.get())) {
        if (attn->table.defined()) fill_trunc_normal(attn->table, 0.02, -2, 2, gen);
        if (attn->logit_scale.defined()) attn->logit_scale.fill_(std::log(10.0));
      } else if (auto* linear = dynamic_cast<nn::LinearImpl*>(m.get())) {
        fill_trunc_normal(linear->weight, 0.02, -2, 2, gen);
        if (linear->bias.defined()) linear->bias.zero_();
      } else if (auto* conv = dynamic_cast<nn::Conv2dImpl*>(m.get())) {
        const double bound = 1.0 / std::sqrt(static_cast<double>(conv->weight[0].numel()));
        fill_uniform(conv->weight, bound, gen);
        fill_uniform(conv->bias, bound, gen);
      } else if (auto* ln = dynamic_cast<nn::LayerNormImpl*>(m.get())) {
        ln->reset_parameters();
      }
    }
  }

 private:
  std::string name_;
  ActivationCheckpointing recompute_;
  double dropout_;
  std::vector<size_t> stages_;  ///< the indices in features of the stages
  nn::Sequential features_{nullptr};
  nn::LayerNorm norm_{nullptr};
  nn::Linear head_{nullptr};
};

}  // namespace

std::shared_ptr<Model> make_swin(const ModelOptions& opts, const std::string& name) {
  return make_member(kSwins, name, "Swin", [&](const SwinVariant& v) { return std::make_shared<SwinTransformer>(opts, v); });
}

std::vector<std::pair<std::string, int64_t>> swin_variants() { return names_and_parameters(kSwins); }

}  // namespace dlrun::models::detail
