// --format onnx: the model as an ONNX graph that onnxruntime (or any ONNX runtime) runs.
//
// LibTorch has no ONNX exporter (torch.onnx is Python), so each model states its evaluation
// forward as a graph (Model::lower, models/lowering.h), the model built from the checkpoint's
// config.yaml and loaded with its weights, and OnnxLowering below writes each of that graph's
// operators as standard ONNX operators, opset 17: Conv, BatchNormalization (or, with
// --fold-batchnorm, each BatchNorm folded into its convolution's weight and bias), Relu, Clip
// (ReLU6), Sigmoid, HardSigmoid, HardSwish, Erf (GELU, the exact form), MaxPool, AveragePool or
// MatMul for adaptive pooling, GlobalAveragePool, Add, Mul, Div, Max, MatMul, Gemm, Flatten,
// LayerNormalization, Softmax, ReduceL2, Transpose, Reshape, Slice, Gather, Concat, Pad, and
// Shape and Expand (a class token repeated along the batch). dlrun's fused conv+BN+ReLU operators are a way of running
// these modules, not other modules: they lower to the same three operators. The batch axis is
// dynamic; the image side is the run's. Weights are float32.
// docs/training.md, "ONNX"; tests/e2e/test_onnx.py and tests/models/onnx_zoo.py check the files
// with onnx.checker and compare onnxruntime's logits with dlrun's (and torchvision's).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <optional>
#include <set>

#include "base/build_info.h"
#include "base/error.h"
#include "base/fsutil.h"
#include "base/log.h"
#include "export/format.h"
#include "export/onnx_proto.h"
#include "models/batchnorm.h"
#include "models/model.h"

namespace dlrun::exporting {
namespace {

namespace nn = torch::nn;
using models::Value;

constexpr int64_t kOpset = 17;     // LayerNormalization-17, BatchNormalization-15, Gemm-13, ...; onnxruntime >= 1.13
constexpr int64_t kIrVersion = 8;  // the IR version that came with opset 17 (ONNX 1.12)

int64_t out_side(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  const int64_t n = in + 2 * p - d * (k - 1) - 1;
  return n < 0 ? 0 : n / s + 1;  // (a window that does not fit: no output)
}

torch::Tensor f32(const torch::Tensor& t) { return t.defined() ? t.detach().to(torch::kFloat32) : t; }

/// The output of `name` has at least one pixel, or the image side was too small for the model.
void check_side(const std::string& name, int64_t h, int64_t w) {
  DLRUN_CHECK_INPUT(h >= 1 && w >= 1, "ONNX export: the image side is too small for this model: {} would output "
                    "{}x{} (give a larger --image-size)", name, h, w);
}

/// models::Graph written as ONNX nodes; each operator also computes its example with LibTorch.
class OnnxLowering : public models::Graph {
 public:
  OnnxLowering(OnnxGraph& g, bool fold) : g_(g), fold_(fold) {}

  Value constant(const std::string& name, const torch::Tensor& t) override { return {g_.weight(name, t), f32(t)}; }

  Value conv(const std::string& name, const nn::Conv2dImpl& conv, const Value& x, const std::string& bn_name,
             const models::BatchNorm2dImpl* bn) override {
    const auto& o = conv.options;
    const auto* pad = std::get_if<torch::ExpandingArray<2>>(&o.padding());
    DLRUN_CHECK_INPUT(pad != nullptr && std::holds_alternative<torch::enumtype::kZeros>(o.padding_mode()),
                      "ONNX export: {} pads in a way dlrun does not lower (only explicit zero padding)", name);
    const std::vector<int64_t> k = {o.kernel_size()->at(0), o.kernel_size()->at(1)},
                               s = {o.stride()->at(0), o.stride()->at(1)}, p = {(*pad)->at(0), (*pad)->at(1)},
                               d = {o.dilation()->at(0), o.dilation()->at(1)};
    check_side(name, out_side(x.size(2), k[0], s[0], p[0], d[0]), out_side(x.size(3), k[1], s[1], p[1], d[1]));
    torch::Tensor weight = conv.weight, bias = conv.bias;
    if (bn != nullptr && fold_) {
      std::tie(weight, bias) = models::fold_batchnorm(conv, *bn);
      DLRUN_CHECK_INPUT(weight.defined(), "ONNX export: {} has no running statistics to fold", bn_name);
    }
    std::vector<std::string> in = {x.name, g_.weight(name + ".weight", weight)};
    if (bias.defined()) in.push_back(g_.weight(name + ".bias", bias));
    Value y{g_.node("Conv", in,
                    {{"kernel_shape", k}, {"strides", s}, {"pads", std::vector<int64_t>{p[0], p[1], p[0], p[1]}},
                     {"dilations", d}, {"group", o.groups()}}),
            torch::conv2d(x.example, f32(weight), f32(bias), s, p, d, o.groups())};
    if (bn != nullptr && !fold_) {
      DLRUN_CHECK_INPUT(bn->running_mean.defined() && bn->running_var.defined(),
                        "ONNX export: {} has no running statistics", bn_name);
      const double eps = bn->options.eps();
      y.name = g_.node("BatchNormalization",
                       {y.name, g_.weight(bn_name + ".weight", bn->weight), g_.weight(bn_name + ".bias", bn->bias),
                        g_.weight(bn_name + ".running_mean", bn->running_mean),
                        g_.weight(bn_name + ".running_var", bn->running_var)},
                       {{"epsilon", static_cast<float>(eps)}});
      y.example = torch::batch_norm(y.example, f32(bn->weight), f32(bn->bias), f32(bn->running_mean),
                                    f32(bn->running_var), false, 0.0, eps, false);
    }
    return y;
  }

  Value linear(const std::string& name, const torch::Tensor& weight, const torch::Tensor& bias, const Value& x) override {
    const torch::Tensor example = torch::linear(x.example, f32(weight), f32(bias));
    if (x.dim() == 2) {
      std::vector<std::string> in = {x.name, g_.weight(name + ".weight", weight)};
      if (bias.defined()) in.push_back(g_.weight(name + ".bias", bias));
      return {g_.node("Gemm", in, {{"transB", int64_t{1}}}), example};
    }
    std::string y = g_.node("MatMul", {x.name, g_.weight(name + ".weight_t", weight.t())});
    if (bias.defined()) y = g_.node("Add", {y, g_.weight(name + ".bias", bias)});
    return {y, example};
  }

  Value layer_norm(const std::string& name, const torch::Tensor& weight, const torch::Tensor& bias, double eps,
                   const Value& x) override {
    return {g_.node("LayerNormalization",
                    {x.name, g_.weight(name + ".weight", weight), g_.weight(name + ".bias", bias)},
                    {{"axis", int64_t{-1}}, {"epsilon", static_cast<float>(eps)}}),
            torch::layer_norm(x.example, {x.size(-1)}, f32(weight), f32(bias), eps)};
  }

  Value apply(models::Fn f, const Value& x) override {
    using models::Fn;
    const torch::Tensor& t = x.example;
    switch (f) {
      case Fn::kRelu: return {g_.node("Relu", {x.name}), torch::relu(t)};
      case Fn::kRelu6:
        return {g_.node("Clip", {x.name, scalar("relu6.min", 0.0), scalar("relu6.max", 6.0)}), torch::hardtanh(t, 0, 6)};
      case Fn::kSigmoid: return {g_.node("Sigmoid", {x.name}), torch::sigmoid(t)};
      case Fn::kHardsigmoid:  // relu6(x + 3) / 6
        return {g_.node("HardSigmoid", {x.name}, {{"alpha", 1.0f / 6.0f}, {"beta", 0.5f}}), torch::hardsigmoid(t)};
      case Fn::kHardswish: return {g_.node("HardSwish", {x.name}), torch::hardswish(t)};
      case Fn::kSilu: return {g_.node("Mul", {x.name, g_.node("Sigmoid", {x.name})}), torch::silu(t)};
      case Fn::kGelu: {  // x * 0.5 * (1 + erf(x / sqrt(2))), torch's exact form
        const std::string e = g_.node("Erf", {g_.node("Mul", {x.name, scalar("gelu.rsqrt2", M_SQRT1_2)})});
        const std::string half = g_.node("Mul", {x.name, scalar("gelu.half", 0.5)});
        return {g_.node("Mul", {half, g_.node("Add", {e, scalar("gelu.one", 1.0)})}), torch::gelu(t)};
      }
    }
    fail_runtime("ONNX export: an elementwise function without a lowering");
  }

  Value binary(models::Bin op, const Value& a, const Value& b) override {
    switch (op) {
      case models::Bin::kAdd: return {g_.node("Add", {a.name, b.name}), a.example + b.example};
      case models::Bin::kMul: return {g_.node("Mul", {a.name, b.name}), a.example * b.example};
      case models::Bin::kMatMul: return {g_.node("MatMul", {a.name, b.name}), torch::matmul(a.example, b.example)};
    }
    fail_runtime("ONNX export: a binary operator without a lowering");
  }

  Value softmax(const Value& x) override {
    return {g_.node("Softmax", {x.name}, {{"axis", int64_t{-1}}}), torch::softmax(x.example, -1)};
  }

  Value l2_normalize(const Value& x) override {
    constexpr double kEps = 1e-12;  // F.normalize's
    const std::string norm = g_.node("ReduceL2", {x.name}, {{"axes", std::vector<int64_t>{-1}}, {"keepdims", int64_t{1}}});
    return {g_.node("Div", {x.name, g_.node("Max", {norm, scalar("normalize.eps", kEps)})}),
            x.example / x.example.norm(2, -1, true).clamp_min(kEps)};
  }

  Value transpose(const Value& x, const std::vector<int64_t>& perm) override {
    return {g_.node("Transpose", {x.name}, {{"perm", perm}}), x.example.permute(perm)};
  }

  Value reshape(const Value& x, const std::vector<int64_t>& sizes) override {
    return {g_.node("Reshape", {x.name, ints(sizes)}), x.example.reshape(sizes)};
  }

  Value slice(const Value& x, int64_t axis, int64_t start, int64_t end, int64_t step) override {
    return {g_.node("Slice", {x.name, ints({start}), ints({end}), ints({axis}), ints({step})}),
            x.example.slice(axis, start, end, step)};
  }

  Value select(const Value& x, int64_t axis, int64_t index) override {
    return {g_.node("Gather", {x.name, ints({index}, /*scalar=*/true)}, {{"axis", axis}}), x.example.select(axis, index)};
  }

  Value concat(const std::vector<Value>& xs, int64_t axis) override {
    std::vector<std::string> names;
    std::vector<torch::Tensor> examples;
    for (const Value& v : xs) {
      names.push_back(v.name);
      examples.push_back(v.example);
    }
    return {g_.node("Concat", names, {{"axis", axis}}), torch::cat(examples, axis)};
  }

  Value pad_end(const Value& x, const std::vector<int64_t>& after) override {
    std::vector<int64_t> pads(after.size(), 0), torch_pads;
    pads.insert(pads.end(), after.begin(), after.end());
    for (auto it = after.rbegin(); it != after.rend(); ++it) torch_pads.insert(torch_pads.end(), {0, *it});
    return {g_.node("Pad", {x.name, ints(pads)}), torch::constant_pad_nd(x.example, torch_pads)};
  }

  Value max_pool(const std::string& name, const Value& x, int64_t k, int64_t stride, int64_t padding) override {
    check_side(name, out_side(x.size(2), k, stride, padding, 1), out_side(x.size(3), k, stride, padding, 1));
    return {g_.node("MaxPool", {x.name},
                    {{"kernel_shape", std::vector<int64_t>{k, k}}, {"strides", std::vector<int64_t>{stride, stride}},
                     {"pads", std::vector<int64_t>{padding, padding, padding, padding}}}),
            torch::max_pool2d(x.example, k, stride, padding)};
  }

  /// GlobalAveragePool for 1x1; AveragePool when the windows are equal and evenly spaced; else
  /// two products with averaging matrices, (oh, H) @ x @ (W, ow).
  Value adaptive_avg_pool(const std::string& name, const Value& x, int64_t oh, int64_t ow) override {
    const torch::Tensor example = torch::adaptive_avg_pool2d(x.example, {oh, ow});
    if (oh == 1 && ow == 1) return {g_.node("GlobalAveragePool", {x.name}), example};
    auto uniform = [](int64_t in, int64_t out) -> std::optional<std::pair<int64_t, int64_t>> {
      if (in < out) return std::nullopt;  // windows overlap by more than a stride can say: MatMul
      const int64_t k = (in + out - 1) / out, s = out > 1 ? (in - k) / (out - 1) : 1;
      for (int64_t i = 0; i < out; ++i) {
        const int64_t start = i * in / out, end = ((i + 1) * in + out - 1) / out;
        if (end - start != k || start != i * s) return std::nullopt;
      }
      return std::make_pair(k, s);
    };
    const auto a = uniform(x.size(2), oh), b = uniform(x.size(3), ow);
    if (a && b)
      return {g_.node("AveragePool", {x.name},
                      {{"kernel_shape", std::vector<int64_t>{a->first, b->first}},
                       {"strides", std::vector<int64_t>{a->second, b->second}}}),
              example};
    auto averaging = [](int64_t in, int64_t out) {  // row i averages inputs [floor(i*in/out), ceil((i+1)*in/out))
      auto m = torch::zeros({out, in});
      for (int64_t i = 0; i < out; ++i) {
        const int64_t start = i * in / out, end = ((i + 1) * in + out - 1) / out;
        m.index_put_({i, torch::indexing::Slice(start, end)}, 1.0 / static_cast<double>(end - start));
      }
      return m;
    };
    const std::string rows = g_.node("MatMul", {g_.weight(name + ".rows", averaging(x.size(2), oh)), x.name});
    return {g_.node("MatMul", {rows, g_.weight(name + ".cols", averaging(x.size(3), ow).t())}), example};
  }

  Value flatten(const Value& x) override {
    return {g_.node("Flatten", {x.name}, {{"axis", int64_t{1}}}), x.example.flatten(1)};
  }

  Value expand_batch(const std::string& name, const torch::Tensor& t, const Value& like) override {
    const std::string batch =
        g_.node("Slice", {g_.node("Shape", {like.name}), ints({0}), ints({1}), ints({0}), ints({1})});
    std::vector<int64_t> rest(t.sizes().begin() + 1, t.sizes().end());
    const std::string shape = g_.node("Concat", {batch, ints(rest)}, {{"axis", int64_t{0}}});
    std::vector<int64_t> sizes = t.sizes().vec();
    sizes[0] = like.size(0);
    return {g_.node("Expand", {g_.weight(name, t), shape}), f32(t).expand(sizes)};
  }

 private:
  /// A float scalar constant, written once per name.
  std::string scalar(const std::string& name, double v) {
    if (scalars_.insert(name).second) g_.weight(name, torch::tensor(static_cast<float>(v)));
    return name;
  }
  /// An int64 constant (a shape, starts, axes...), a scalar when `scalar`.
  std::string ints(const std::vector<int64_t>& v, bool scalar = false) {
    return g_.ints(fmt::format("ints_{}", ints_++), v, scalar);
  }

  OnnxGraph& g_;
  bool fold_;
  std::set<std::string> scalars_;
  int ints_ = 0;
};

}  // namespace

OnnxFiles onnx_files(models::Model& model, const ModelOptions& opts, int64_t side, bool fold,
                     const std::map<std::string, std::string>& metadata, const std::string& data_name, bool external) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  OnnxGraph g;
  OnnxLowering lower(g, fold);
  g.input("images", {-1, opts.in_channels, side, side}, "batch");
  const Value images{"images", torch::zeros({1, opts.in_channels, side, side})};
  const Value logits = model.lower(lower, images);
  model.train(was_training);
  DLRUN_CHECK(logits.dim() == 2 && logits.size(1) == opts.num_classes, ExitCode::kRuntime,
              "ONNX export: the graph of {} gives logits of shape {}", opts.name, fmt::join(logits.example.sizes(), "x"));
  g.name_output(logits.name, "logits");
  g.output("logits", {-1, opts.num_classes}, "batch");
  OnnxFiles files;
  files.initializers = g.initializers();
  // protobuf reads no message of 2 GiB or more: leave room for the graph besides the weights
  constexpr size_t kInlineMax = size_t{2000} * 1000 * 1000;
  if (external || g.weight_bytes() > kInlineMax) {
    DLRUN_CHECK_INPUT(!data_name.empty(), "ONNX export: the weights of {} are {:.2f} GB, more than one ONNX file holds "
                      "(2 GB); they need an external data file", opts.name, static_cast<double>(g.weight_bytes()) / 1e9);
    files.model = g.model_bytes("dlrun_" + opts.name, kOpset, kIrVersion, metadata, data_name, &files.data);
  } else {
    files.model = g.model_bytes("dlrun_" + opts.name, kOpset, kIrVersion, metadata);
  }
  return files;
}

size_t write_as_onnx(const std::string& path, const Weights& w) {
  DLRUN_CHECK(w.model != nullptr && w.config != nullptr, ExitCode::kRuntime, "ONNX export without a model");
  std::map<std::string, std::string> meta = {{"dlrun_version", build::version()},
                                             {"torch_version", build::torch_version()},
                                             {"model", w.config->model.name},
                                             {"step", std::to_string(w.step)},
                                             {"epoch", std::to_string(w.epoch)},
                                             {"folded_batchnorm", w.folded_batchnorm ? "true" : "false"},
                                             {"weights", w.weights}};
  if (w.manifest.contains("config_hash") && w.manifest["config_hash"].is_string())
    meta["config_hash"] = w.manifest["config_hash"].get<std::string>();
  if (w.dataset.is_object()) meta["dlrun_dataset"] = w.dataset.dump();  // class names, mean and std of the input
  if (w.model->dtype() != torch::kFloat32)
    log::info("ONNX export: model.dtype is {}; the ONNX weights are float32", c10::toString(w.model->dtype()));
  const std::string data_path = path + ".data";
  const OnnxFiles files = onnx_files(*w.model, w.config->model, w.image_size, w.folded_batchnorm, meta,
                                     std::filesystem::path(data_path).filename().string(), w.external_data);
  if (!files.data.empty()) {  // the data first: a model file is never there without its weights
    fsutil::write_file_atomic(data_path, files.data);
    log::info("ONNX export: the weights ({:.2f} GB) are in {}, ONNX external data; keep it beside {}",
              static_cast<double>(files.data.size()) / 1e9, data_path, path);
  }
  fsutil::write_file_atomic(path, files.model);
  return files.initializers;
}

}  // namespace dlrun::exporting
