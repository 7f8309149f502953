// A model's inference pass as a graph of operators, for an exporter (docs/design.md, "Writing
// ONNX"). Each model family states its eval-mode forward once more, next to forward() and in
// the same shape, as calls on a Graph (Model::lower); the exporter implements the Graph with its
// format's operators (src/export/onnx_format.cpp: ONNX). So a new family adds its lowering in its
// own file and the exporter does not change unless the family needs an operator the Graph lacks.
//
// A Value is a node's output: its name in the graph and an example of it, batch 1, computed by
// the same operator in LibTorch as the graph is written. The example gives the shapes the
// operators need (a reshape's sizes, a convolution's output side) without shape inference of our
// own, and the logits the example reaches are the model's (tests compare them). Axis 0 is the
// batch, dynamic in the graph: a reshape that moves it says -1 there.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dlrun::models {

class BatchNorm2dImpl;

/// A value of the graph: its name and an example (batch 1, float32).
struct Value {
  std::string name;
  torch::Tensor example;
  int64_t size(int64_t d) const { return example.size(d); }
  int64_t dim() const { return example.dim(); }
};

/// Elementwise functions, each torch's: relu, relu6 (hardtanh 0..6), sigmoid, hardsigmoid,
/// hardswish, silu, gelu (the exact erf form).
enum class Fn { kRelu, kRelu6, kSigmoid, kHardsigmoid, kHardswish, kSilu, kGelu };
/// Elementwise with broadcasting, and the matrix product of the last two axes.
enum class Bin { kAdd, kMul, kMatMul };

class Graph {
 public:
  virtual ~Graph() = default;

  /// A constant of the graph (a weight, or a tensor the model derives from its weights): float.
  virtual Value constant(const std::string& name, const torch::Tensor& t) = 0;
  /// conv(x) (weight, bias when it has one, its stride, padding, dilation and groups), then `bn`
  /// when given: a BatchNorm in evaluation, or folded into the convolution when the export
  /// folds. `name` and `bn_name` are the modules' state-dict prefixes.
  virtual Value conv(const std::string& name, const torch::nn::Conv2dImpl& conv, const Value& x,
                     const std::string& bn_name = "", const BatchNorm2dImpl* bn = nullptr) = 0;
  /// x @ weight^T + bias over the last axis (bias undefined: none).
  virtual Value linear(const std::string& name, const torch::Tensor& weight, const torch::Tensor& bias,
                       const Value& x) = 0;
  /// LayerNorm over the last axis.
  virtual Value layer_norm(const std::string& name, const torch::Tensor& weight, const torch::Tensor& bias,
                           double eps, const Value& x) = 0;
  virtual Value apply(Fn f, const Value& x) = 0;
  virtual Value binary(Bin op, const Value& a, const Value& b) = 0;
  /// softmax over the last axis.
  virtual Value softmax(const Value& x) = 0;
  /// x / max(||x||_2, 1e-12) over the last axis (torch's F.normalize).
  virtual Value l2_normalize(const Value& x) = 0;
  virtual Value transpose(const Value& x, const std::vector<int64_t>& perm) = 0;
  /// torch's reshape: one size may be -1.
  virtual Value reshape(const Value& x, const std::vector<int64_t>& sizes) = 0;
  /// x[start:end:step] along `axis`.
  virtual Value slice(const Value& x, int64_t axis, int64_t start, int64_t end, int64_t step = 1) = 0;
  /// x[index] along `axis`, which goes.
  virtual Value select(const Value& x, int64_t axis, int64_t index) = 0;
  virtual Value concat(const std::vector<Value>& xs, int64_t axis) = 0;
  /// Zeros appended at the end of each axis: `after[i]` along axis i.
  virtual Value pad_end(const Value& x, const std::vector<int64_t>& after) = 0;
  /// max_pool2d of (N, C, H, W), zero-free padding as torch's.
  virtual Value max_pool(const std::string& name, const Value& x, int64_t k, int64_t stride, int64_t padding) = 0;
  /// adaptive_avg_pool2d of (N, C, H, W) to (oh, ow).
  virtual Value adaptive_avg_pool(const std::string& name, const Value& x, int64_t oh, int64_t ow) = 0;
  /// (N, ...) -> (N, rest).
  virtual Value flatten(const Value& x) = 0;
  /// The constant `t` (1, ...) repeated along the batch of `like`: (N, ...).
  virtual Value expand_batch(const std::string& name, const torch::Tensor& t, const Value& like) = 0;

  // Composed of the above.
  Value linear(const std::string& name, const torch::nn::LinearImpl& fc, const Value& x) {
    return linear(name, fc.weight, fc.bias, x);
  }
  Value layer_norm(const std::string& name, const torch::nn::LayerNormImpl& ln, const Value& x) {
    return layer_norm(name, ln.weight, ln.bias, ln.options.eps(), x);
  }
  Value add(const Value& a, const Value& b) { return binary(Bin::kAdd, a, b); }
  Value mul(const Value& a, const Value& b) { return binary(Bin::kMul, a, b); }
  Value matmul(const Value& a, const Value& b) { return binary(Bin::kMatMul, a, b); }
  /// torch::roll(x, shift, axis): the last `shift` entries (mod the size) first.
  Value roll(const Value& x, int64_t shift, int64_t axis) {
    const int64_t n = x.size(axis), k = ((shift % n) + n) % n;
    if (k == 0) return x;
    return concat({slice(x, axis, n - k, n), slice(x, axis, 0, n - k)}, axis);
  }
};

/// A module that states its own evaluation forward in a graph (blocks, stages): lower_sequential
/// (models/blocks.h) lowers a Sequential of them child by child.
class Lowerable {
 public:
  virtual ~Lowerable() = default;
  /// forward() in evaluation, in `g`; `prefix` is the module's state-dict name.
  virtual Value lower(Graph& g, const std::string& prefix, const Value& x) const = 0;
};

}  // namespace dlrun::models
