// torchvision's Swin Transformer (V1), layer for layer: swin_t, swin_s, swin_b.
//
// One row per member (kSwins: width, depths and heads per stage, default stochastic depth;
// 4x4 patches, 7x7 windows). Modules under torchvision's names, on (N, H, W, C) activations:
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

constexpr int64_t kPatch = 4, kWindow = 7;

struct SwinVariant {
  const char* name;
  int64_t width;
  std::array<int64_t, 4> depths, heads;
  double stochastic_depth;  ///< torchvision's default
  int64_t parameters;       ///< torchvision's count (1000 classes)
};
constexpr SwinVariant kSwins[] = {
    {"swin_t", 96, {2, 2, 6, 2}, {3, 6, 12, 24}, 0.2, 28288354},
    {"swin_s", 96, {2, 2, 18, 2}, {3, 6, 12, 24}, 0.3, 49606258},
    {"swin_b", 128, {2, 2, 18, 2}, {4, 8, 16, 32}, 0.5, 87768224},
};

// ShiftedWindowAttention: multi-head attention within windows of kWindow x kWindow, with a
// learned bias per relative position and head.
class WindowAttentionImpl : public nn::Module {
 public:
  WindowAttentionImpl(int64_t dim, int64_t heads, int64_t shift) : heads_(heads), shift_(shift) {
    qkv = register_module("qkv", nn::Linear(dim, 3 * dim));
    proj = register_module("proj", nn::Linear(dim, dim));
    table = register_parameter("relative_position_bias_table",
                               torch::zeros({(2 * kWindow - 1) * (2 * kWindow - 1), heads}));
    // For each pair of positions (i, j) in a window, the row of their offset in the table.
    torch::Tensor coords = torch::stack(torch::meshgrid({torch::arange(kWindow), torch::arange(kWindow)}, "ij"))
                               .flatten(1);                                     // (2, W*W)
    torch::Tensor rel = (coords.unsqueeze(2) - coords.unsqueeze(1)).permute({1, 2, 0}).contiguous();  // (W*W, W*W, 2)
    rel.select(2, 0).add_(kWindow - 1).mul_(2 * kWindow - 1);
    rel.select(2, 1).add_(kWindow - 1);
    index_ = register_buffer("relative_position_index", rel.sum(-1).flatten());
  }

  // (N, H, W, C) -> (N, H, W, C)
  torch::Tensor forward(const torch::Tensor& input) {
    const int64_t n = input.size(0), h = input.size(1), w = input.size(2), c = input.size(3), ww = kWindow * kWindow;
    const int64_t pad_r = (kWindow - w % kWindow) % kWindow, pad_b = (kWindow - h % kWindow) % kWindow;
    torch::Tensor x = torch::constant_pad_nd(input, {0, 0, 0, pad_r, 0, pad_b});
    const int64_t ph = x.size(1), pw = x.size(2);
    const int64_t shift_h = kWindow >= ph ? 0 : shift_, shift_w = kWindow >= pw ? 0 : shift_;
    const bool shifted = shift_h + shift_w > 0;
    if (shifted) x = torch::roll(x, {-shift_h, -shift_w}, {1, 2});
    const int64_t windows = (ph / kWindow) * (pw / kWindow);
    x = x.view({n, ph / kWindow, kWindow, pw / kWindow, kWindow, c}).permute({0, 1, 3, 2, 4, 5}).reshape({n * windows, ww, c});
    torch::Tensor qkv_ = qkv->forward(x).reshape({x.size(0), ww, 3, heads_, c / heads_}).permute({2, 0, 3, 1, 4});
    torch::Tensor q = qkv_[0] * std::pow(static_cast<double>(c / heads_), -0.5);
    torch::Tensor attn = q.matmul(qkv_[1].transpose(-2, -1));
    attn = attn + table.index({index_}).view({ww, ww, -1}).permute({2, 0, 1}).contiguous().unsqueeze(0);
    if (shifted) {
      attn = attn.view({n, windows, heads_, ww, ww}) + mask(ph, pw, shift_h, shift_w, x.options()).unsqueeze(1).unsqueeze(0);
      attn = attn.view({-1, heads_, ww, ww});
    }
    x = torch::softmax(attn, -1).matmul(qkv_[2]).transpose(1, 2).reshape({x.size(0), ww, c});
    x = proj->forward(x);
    x = x.view({n, ph / kWindow, pw / kWindow, kWindow, kWindow, c}).permute({0, 1, 3, 2, 4, 5}).reshape({n, ph, pw, c});
    if (shifted) x = torch::roll(x, {shift_h, shift_w}, {1, 2});
    return x.slice(1, 0, h).slice(2, 0, w).contiguous();
  }

  nn::Linear qkv{nullptr}, proj{nullptr};
  torch::Tensor table;

 private:
  // (windows, W*W, W*W): 0 within a region, -100 between regions the roll brought together.
  static torch::Tensor mask(int64_t ph, int64_t pw, int64_t sh, int64_t sw, const torch::TensorOptions& options) {
    torch::Tensor m = torch::zeros({ph, pw}, options);
    const std::array<std::pair<int64_t, int64_t>, 3> hs = {{{0, ph - kWindow}, {ph - kWindow, ph - sh}, {ph - sh, ph}}};
    const std::array<std::pair<int64_t, int64_t>, 3> ws = {{{0, pw - kWindow}, {pw - kWindow, pw - sw}, {pw - sw, pw}}};
    double count = 0;
    for (const auto& [h0, h1] : hs)
      for (const auto& [w0, w1] : ws) {
        m.slice(0, h0, h1).slice(1, w0, w1).fill_(count);
        count += 1;
      }
    m = m.view({ph / kWindow, kWindow, pw / kWindow, kWindow}).permute({0, 2, 1, 3}).reshape({-1, kWindow * kWindow});
    m = m.unsqueeze(1) - m.unsqueeze(2);
    return m.masked_fill(m != 0, -100.0).masked_fill(m == 0, 0.0);
  }

  int64_t heads_, shift_;
  torch::Tensor index_;
};
TORCH_MODULE(WindowAttention);

// x + sd(attn(norm1(x))), then + sd(mlp(norm2(.))).
class SwinBlockImpl : public nn::Module {
 public:
  SwinBlockImpl(int64_t dim, int64_t heads, int64_t shift, double drop) : drop_(drop) {
    norm1 = register_module("norm1", nn::LayerNorm(nn::LayerNormOptions({dim})));
    attn = register_module("attn", WindowAttention(dim, heads, shift));
    norm2 = register_module("norm2", nn::LayerNorm(nn::LayerNormOptions({dim})));
    mlp = register_module("mlp", TransformerMlp(dim, 4 * dim));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor y = x + stochastic_depth(attn->forward(norm1->forward(x)), drop_, is_training());
    return y + stochastic_depth(mlp->forward(norm2->forward(y)), drop_, is_training());
  }

  nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  WindowAttention attn{nullptr};
  TransformerMlp mlp{nullptr};

 private:
  double drop_;
};
TORCH_MODULE(SwinBlock);

// PatchMerging: each 2x2 of (N, H, W, C) (padded to even) concatenated, LayerNorm, Linear to 2C.
class PatchMergingImpl : public nn::Module {
 public:
  explicit PatchMergingImpl(int64_t dim) {
    reduction = register_module("reduction", nn::Linear(nn::LinearOptions(4 * dim, 2 * dim).bias(false)));
    norm = register_module("norm", nn::LayerNorm(nn::LayerNormOptions({4 * dim})));
  }

  torch::Tensor forward(const torch::Tensor& input) {
    using torch::indexing::Slice;
    const int64_t h = input.size(1), w = input.size(2);
    torch::Tensor x = torch::constant_pad_nd(input, {0, 0, 0, w % 2, 0, h % 2});
    auto at = [&](int64_t i, int64_t j) { return x.index({Slice(), Slice(i, None, 2), Slice(j, None, 2), Slice()}); };
    x = torch::cat({at(0, 0), at(1, 0), at(0, 1), at(1, 1)}, -1);
    return reduction->forward(norm->forward(x));
  }

  nn::Linear reduction{nullptr};
  nn::LayerNorm norm{nullptr};

 private:
  static constexpr auto None = torch::indexing::None;
};
TORCH_MODULE(PatchMerging);

// The patch embedding: conv "0", then LayerNorm "2" over NHWC (torchvision's Permute is "1").
class PatchEmbedImpl : public nn::SequentialImpl {
 public:
  PatchEmbedImpl(int64_t in, int64_t dim) {
    conv = nn::Conv2d(nn::Conv2dOptions(in, dim, kPatch).stride(kPatch));
    norm = nn::LayerNorm(nn::LayerNormOptions({dim}));
    push_back("0", conv);
    push_back("2", norm);
  }
  torch::Tensor forward(const torch::Tensor& x) { return norm->forward(conv->forward(x).permute({0, 2, 3, 1})); }

  nn::Conv2d conv{nullptr};
  nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(PatchEmbed);

class SwinTransformer : public Model, public SelfInitializing {
 public:
  SwinTransformer(const ModelOptions& opts, const SwinVariant& v)
      : name_(v.name),
        recompute_blocks_(opts.activation_checkpointing == ActivationCheckpointing::kBlocks),
        recompute_stages_(opts.activation_checkpointing == ActivationCheckpointing::kStages),
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
        stage->push_back(SwinBlock(dim, v.heads[s], b % 2 == 0 ? 0 : kWindow / 2,
                                   p * static_cast<double>(index) / static_cast<double>(total - 1)));
      stages_.push_back(features_->size());
      features_->push_back(stage);
      if (s + 1 == v.depths.size()) break;
      features_->push_back(PatchMerging(dim));
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
    for (size_t i = 0; i < features_->size(); ++i) {
      const bool stage = std::find(stages_.begin(), stages_.end(), i) != stages_.end();
      if (!stage || !recompute_blocks_) {
        x = forward_span(features_, i, i + 1, x, stage && recompute_stages_);
        continue;
      }
      nn::Sequential blocks(std::static_pointer_cast<nn::SequentialImpl>(features_->ptr(i)));
      for (size_t b = 0; b < blocks->size(); ++b) x = forward_span(blocks, b, b + 1, x, true);
    }
    x = norm_->forward(x).permute({0, 3, 1, 2});
    x = adaptive_avg_pool(x, 1, 1).flatten(1);
    if (dropout_ > 0) x = torch::dropout(x, dropout_, is_training());  // functional: torchvision has none
    return head_->forward(x);
  }

  // torchvision's constructor: every Linear truncated normal (std 0.02) with zero bias (the
  // blocks' Xavier MLPs are drawn over), the bias tables truncated normal (std 0.02), the
  // patchify conv PyTorch's default, LayerNorms 1 and 0; in state-dict order.
  void initialize(at::Generator& gen) override {
    torch::NoGradGuard no_grad;
    for (const auto& m : modules(/*include_self=*/false)) {
      if (auto* attn = dynamic_cast<WindowAttentionImpl*>(m.get())) {
        fill_trunc_normal(attn->table, 0.02, -2, 2, gen);
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
  bool recompute_blocks_, recompute_stages_;
  double dropout_;
  std::vector<size_t> stages_;  ///< the indices in features of the stages
  nn::Sequential features_{nullptr};
  nn::LayerNorm norm_{nullptr};
  nn::Linear head_{nullptr};
};

}  // namespace

std::shared_ptr<Model> make_swin(const ModelOptions& opts, const std::string& name) {
  for (const SwinVariant& v : kSwins)
    if (name == v.name) return std::make_shared<SwinTransformer>(opts, v);
  fail_runtime("{} is not a member of the Swin family", name);
}

std::vector<std::pair<std::string, int64_t>> swin_variants() {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const SwinVariant& v : kSwins) out.emplace_back(v.name, v.parameters);
  return out;
}

}  // namespace dlrun::models::detail
