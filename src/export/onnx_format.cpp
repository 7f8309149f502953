// --format onnx: the model as an ONNX graph that onnxruntime (or any ONNX runtime) runs.
//
// LibTorch has no ONNX exporter (torch.onnx is Python), so the graph is lowered here from the
// model's own modules, the model built from the checkpoint's config.yaml and loaded with its
// weights: the modules' types and options give the operators and their attributes, and the
// way each zoo model composes them (a sequence for mlp and convnet, residual blocks for the
// ResNets) gives the edges. Standard operators only, opset 17: Conv, BatchNormalization (or,
// with --fold-batchnorm, each BatchNorm folded into its convolution's weight and bias), Relu,
// MaxPool, AveragePool or MatMul for adaptive pooling, GlobalAveragePool, Add, Flatten, Gemm.
// dlrun's fused conv+BN+ReLU operators are a way of running these modules, not other
// modules: they lower to the same three operators. The batch axis is dynamic; the image side
// is the run's (the convnet's adaptive pooling depends on it). Weights are float32.
// docs/export.md, "ONNX"; tests/e2e/test_onnx.py checks the files with onnx.checker and
// compares onnxruntime's logits with dlrun's.
#include <fmt/format.h>

#include <optional>

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

constexpr int64_t kOpset = 17;     // BatchNormalization-15, Gemm-13, Relu-14, Add-14 ...; onnxruntime >= 1.13
constexpr int64_t kIrVersion = 8;  // the IR version that came with opset 17 (ONNX 1.12)

/// A value of the graph and, for images, its height and width.
struct Value {
  std::string name;
  int64_t h = 0, w = 0;
};

int64_t out_side(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  const int64_t n = in + 2 * p - d * (k - 1) - 1;
  return n < 0 ? 0 : n / s + 1;  // (a window that does not fit: no output)
}

class Lowering {
 public:
  Lowering(OnnxGraph& g, bool fold) : g_(g), fold_(fold) {}

  /// conv(x), then bn when given (a BatchNormalization node, or folded into the convolution),
  /// then ReLU when `relu`.
  Value conv_bn(const std::string& conv_name, const std::shared_ptr<nn::Conv2dImpl>& conv, const std::string& bn_name,
                const std::shared_ptr<models::BatchNorm2dImpl>& bn, const Value& x, bool relu) {
    const auto& o = conv->options;
    const auto* pad = std::get_if<torch::ExpandingArray<2>>(&o.padding());
    DLRUN_CHECK_INPUT(pad != nullptr && std::holds_alternative<torch::enumtype::kZeros>(o.padding_mode()),
                      "ONNX export: {} pads in a way dlrun does not lower (only explicit zero padding)", conv_name);
    const std::vector<int64_t> k = {o.kernel_size()->at(0), o.kernel_size()->at(1)},
                               s = {o.stride()->at(0), o.stride()->at(1)}, p = {(*pad)->at(0), (*pad)->at(1)},
                               d = {o.dilation()->at(0), o.dilation()->at(1)};
    std::vector<std::string> in = {x.name};
    if (bn && fold_) {
      const auto [weight, bias] = models::fold_batchnorm(nn::Conv2d(conv), models::BatchNorm2d(bn));
      DLRUN_CHECK_INPUT(weight.defined(), "ONNX export: {} has no running statistics to fold", bn_name);
      in.push_back(g_.weight(conv_name + ".weight", weight));
      in.push_back(g_.weight(conv_name + ".bias", bias));
    } else {
      in.push_back(g_.weight(conv_name + ".weight", conv->weight));
      if (conv->bias.defined()) in.push_back(g_.weight(conv_name + ".bias", conv->bias));
    }
    check_side(conv_name, out_side(x.h, k[0], s[0], p[0], d[0]), out_side(x.w, k[1], s[1], p[1], d[1]));
    Value y{g_.node("Conv", in,
                    {{"kernel_shape", k}, {"strides", s}, {"pads", std::vector<int64_t>{p[0], p[1], p[0], p[1]}},
                     {"dilations", d}, {"group", o.groups()}}),
            out_side(x.h, k[0], s[0], p[0], d[0]), out_side(x.w, k[1], s[1], p[1], d[1])};
    if (bn && !fold_) {
      DLRUN_CHECK_INPUT(bn->running_mean.defined() && bn->running_var.defined(),
                        "ONNX export: {} has no running statistics", bn_name);
      y.name = g_.node("BatchNormalization",
                       {y.name, g_.weight(bn_name + ".weight", bn->weight), g_.weight(bn_name + ".bias", bn->bias),
                        g_.weight(bn_name + ".running_mean", bn->running_mean),
                        g_.weight(bn_name + ".running_var", bn->running_var)},
                       {{"epsilon", static_cast<float>(bn->options.eps())}});
    }
    if (relu) y.name = g_.node("Relu", {y.name});
    return y;
  }

  /// adaptive_avg_pool2d to (oh, ow): GlobalAveragePool for 1x1; AveragePool when the windows
  /// are equal and evenly spaced; else two products with averaging matrices, (oh, H) @ x @ (W, ow).
  Value adaptive_pool(const std::string& name, const Value& x, int64_t oh, int64_t ow) {
    if (oh == 1 && ow == 1) return {g_.node("GlobalAveragePool", {x.name}), 1, 1};
    auto uniform = [](int64_t in, int64_t out) -> std::optional<std::pair<int64_t, int64_t>> {
      if (in < out) return std::nullopt;  // windows overlap by more than a stride can say: MatMul
      const int64_t k = (in + out - 1) / out, s = out > 1 ? (in - k) / (out - 1) : 1;
      for (int64_t i = 0; i < out; ++i) {
        const int64_t start = i * in / out, end = ((i + 1) * in + out - 1) / out;
        if (end - start != k || start != i * s) return std::nullopt;
      }
      return std::make_pair(k, s);
    };
    const auto a = uniform(x.h, oh), b = uniform(x.w, ow);
    if (a && b)
      return {g_.node("AveragePool", {x.name},
                      {{"kernel_shape", std::vector<int64_t>{a->first, b->first}},
                       {"strides", std::vector<int64_t>{a->second, b->second}}}),
              oh, ow};
    auto averaging = [](int64_t in, int64_t out) {  // row i averages inputs [floor(i*in/out), ceil((i+1)*in/out))
      auto m = torch::zeros({out, in});
      for (int64_t i = 0; i < out; ++i) {
        const int64_t start = i * in / out, end = ((i + 1) * in + out - 1) / out;
        m.index_put_({i, torch::indexing::Slice(start, end)}, 1.0 / static_cast<double>(end - start));
      }
      return m;
    };
    const std::string rows = g_.node("MatMul", {g_.weight(name + ".rows", averaging(x.h, oh)), x.name});
    return {g_.node("MatMul", {rows, g_.weight(name + ".cols", averaging(x.w, ow).t())}), oh, ow};
  }

  /// The modules of `seq` in order (mlp, and convnet's features and classifier).
  Value sequence(nn::Sequential& seq, const std::string& prefix, Value x) {
    const auto children = seq->named_children();
    for (size_t i = 0; i < children.size(); ++i) {
      const std::string name = prefix + "." + children[i].key();
      const auto& m = children[i].value();
      if (auto conv = std::dynamic_pointer_cast<nn::Conv2dImpl>(m)) {
        std::shared_ptr<models::BatchNorm2dImpl> bn;
        if (i + 1 < children.size()) bn = std::dynamic_pointer_cast<models::BatchNorm2dImpl>(children[i + 1].value());
        x = conv_bn(name, conv, bn ? prefix + "." + children[i + 1].key() : "", bn, x, false);
        if (bn) ++i;
      } else if (std::dynamic_pointer_cast<nn::ReLUImpl>(m)) {
        x.name = g_.node("Relu", {x.name});
      } else if (auto pool = std::dynamic_pointer_cast<nn::MaxPool2dImpl>(m)) {
        const auto& o = pool->options;
        DLRUN_CHECK_INPUT(!o.ceil_mode() && o.dilation()->at(0) == 1 && o.dilation()->at(1) == 1,
                          "ONNX export: {}: ceil_mode and dilation are not lowered", name);
        const std::vector<int64_t> k = {o.kernel_size()->at(0), o.kernel_size()->at(1)},
                                   s = {o.stride()->at(0), o.stride()->at(1)},
                                   p = {o.padding()->at(0), o.padding()->at(1)};
        check_side(name, out_side(x.h, k[0], s[0], p[0], 1), out_side(x.w, k[1], s[1], p[1], 1));
        x = {g_.node("MaxPool", {x.name},
                     {{"kernel_shape", k}, {"strides", s}, {"pads", std::vector<int64_t>{p[0], p[1], p[0], p[1]}}}),
             out_side(x.h, k[0], s[0], p[0], 1), out_side(x.w, k[1], s[1], p[1], 1)};
      } else if (auto ap = std::dynamic_pointer_cast<nn::AdaptiveAvgPool2dImpl>(m)) {
        const auto& size = ap->options.output_size();
        x = adaptive_pool(name, x, size->at(0).value_or(x.h), size->at(1).value_or(x.w));
      } else if (auto fc = std::dynamic_pointer_cast<nn::LinearImpl>(m)) {
        x = linear(name, fc, x);
      } else if (!std::dynamic_pointer_cast<nn::DropoutImpl>(m)) {  // dropout is the identity in inference
        fail_input("ONNX export: {} ({}) has no ONNX lowering", name, m->name());
      }
    }
    return x;
  }

  Value linear(const std::string& name, const std::shared_ptr<nn::LinearImpl>& fc, Value x) {
    if (!flat_) x.name = g_.node("Flatten", {x.name}, {{"axis", int64_t{1}}});
    flat_ = true;
    std::vector<std::string> in = {x.name, g_.weight(name + ".weight", fc->weight)};
    if (fc->bias.defined()) in.push_back(g_.weight(name + ".bias", fc->bias));
    return {g_.node("Gemm", in, {{"transB", int64_t{1}}})};
  }

  /// torchvision's ResNet (models/resnet.cpp): the stem, the residual blocks, global average
  /// pooling and the classifier.
  Value resnet(nn::Module& model, bool imagenet_stem, Value x) {
    x = conv_bn("conv1", conv_of(model, "conv1"), "bn1", bn_of(model, "bn1"), x, true);
    if (imagenet_stem) check_side("the stem's max pool", out_side(x.h, 3, 2, 1, 1), out_side(x.w, 3, 2, 1, 1));
    if (imagenet_stem)
      x = {g_.node("MaxPool", {x.name},
                   {{"kernel_shape", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}},
                    {"pads", std::vector<int64_t>{1, 1, 1, 1}}}),
           out_side(x.h, 3, 2, 1, 1), out_side(x.w, 3, 2, 1, 1)};
    for (int stage = 1; stage <= 4; ++stage) {
      const std::string layer = fmt::format("layer{}", stage);
      for (const auto& block : model.named_children()[layer]->named_children()) {
        const std::string p = layer + "." + block.key();
        nn::Module& b = *block.value();
        Value identity = x;
        const auto parts = b.named_children();
        if (parts.contains("downsample")) {
          auto ds = parts["downsample"];
          identity = conv_bn(p + ".downsample.0", conv_of(*ds, "0"), p + ".downsample.1", bn_of(*ds, "1"), x, false);
        }
        const bool bottleneck = parts.contains("conv3");
        Value out = conv_bn(p + ".conv1", conv_of(b, "conv1"), p + ".bn1", bn_of(b, "bn1"), x, true);
        out = conv_bn(p + ".conv2", conv_of(b, "conv2"), p + ".bn2", bn_of(b, "bn2"), out, bottleneck);
        if (bottleneck) out = conv_bn(p + ".conv3", conv_of(b, "conv3"), p + ".bn3", bn_of(b, "bn3"), out, false);
        out.name = g_.node("Relu", {g_.node("Add", {out.name, identity.name})});
        x = out;
      }
    }
    x = {g_.node("GlobalAveragePool", {x.name}), 1, 1};
    return linear("fc", std::dynamic_pointer_cast<nn::LinearImpl>(model.named_children()["fc"]), x);
  }

 private:
  /// The output of `name` has at least one pixel, or the image side was too small for the model.
  static void check_side(const std::string& name, int64_t h, int64_t w) {
    DLRUN_CHECK_INPUT(h >= 1 && w >= 1, "ONNX export: the image side is too small for this model: {} would output "
                      "{}x{} (give a larger --image-size)", name, h, w);
  }
  static std::shared_ptr<nn::Conv2dImpl> conv_of(nn::Module& m, const std::string& name) {
    auto c = std::dynamic_pointer_cast<nn::Conv2dImpl>(m.named_children()[name]);
    DLRUN_CHECK(c != nullptr, ExitCode::kRuntime, "ONNX export: {} is not a convolution", name);
    return c;
  }
  static std::shared_ptr<models::BatchNorm2dImpl> bn_of(nn::Module& m, const std::string& name) {
    auto b = std::dynamic_pointer_cast<models::BatchNorm2dImpl>(m.named_children()[name]);
    DLRUN_CHECK(b != nullptr, ExitCode::kRuntime, "ONNX export: {} is not a BatchNorm", name);
    return b;
  }

  OnnxGraph& g_;
  bool fold_;
  bool flat_ = false;
};

}  // namespace

std::string onnx_bytes(models::Model& model, const ModelOptions& opts, int64_t side, bool fold,
                       const std::map<std::string, std::string>& metadata, size_t* initializers) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  OnnxGraph g;
  Lowering lower(g, fold);
  const Value images{"images", side, side};
  g.input(images.name, {-1, opts.in_channels, side, side}, "batch");
  auto children = model.named_children();
  Value logits;
  if (opts.name == "mlp") {
    auto seq = std::dynamic_pointer_cast<nn::SequentialImpl>(children["layers"]);
    nn::Sequential s(seq);
    logits = lower.sequence(s, "layers", images);
  } else if (opts.name == "convnet") {
    nn::Sequential features(std::dynamic_pointer_cast<nn::SequentialImpl>(children["features"]));
    nn::Sequential classifier(std::dynamic_pointer_cast<nn::SequentialImpl>(children["classifier"]));
    logits = lower.sequence(classifier, "classifier", lower.sequence(features, "features", images));
  } else if (models::family(opts.name) == "resnet") {
    logits = lower.resnet(model, opts.stem == ResnetStem::kImagenet, images);
  } else {
    fail_input("ONNX export: model.name={} has no ONNX lowering (mlp, convnet and the ResNet family have)", opts.name);
  }
  g.rename_last_output("logits");
  g.output("logits", {-1, opts.num_classes}, "batch");
  model.train(was_training);
  if (initializers != nullptr) *initializers = g.initializers();
  return g.model_bytes("dlrun_" + opts.name, kOpset, kIrVersion, metadata);
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
  size_t initializers = 0;
  fsutil::write_file_atomic(path, onnx_bytes(*w.model, w.config->model, w.image_size, w.folded_batchnorm, meta,
                                             &initializers));
  return initializers;
}

}  // namespace dlrun::exporting
