// The model registry: config name -> constructor, plus the seeded, side-effect-free build.
//
// build() is the only way the rest of dlrun gets a model. It constructs the network, then
// re-draws its weights from a generator seeded by `seed` (init.cpp). LibTorch layers draw
// from the global CPU generator while being constructed; build() saves and restores that
// generator's state, so building a model never shifts the data order or augmentation stream.
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <map>
#include <mutex>

#include "config/choices.h"
#include "models/zoo.h"

namespace dlrun::models {
namespace {

// Everything a constructor may need; only mlp uses the image size.
struct BuildInput {
  const ModelOptions& opts;
  int64_t input_h;
  int64_t input_w;
};

struct Entry {
  std::string name;
  const char* family;
  detail::InitScheme scheme;
  std::function<std::shared_ptr<Model>(const BuildInput&)> make;
  int64_t parameters = 0;  ///< torchvision's count (1000 classes): models_test.cpp builds each to check it
  int64_t min_side = 1;    ///< the smallest image side it takes (torchvision's min_size)
  int64_t fixed_side = 0;  ///< the side it is built for unless model.image_size says (ViT: 224); 0: any
};

// The features of each family (docs/models.md).
const std::vector<std::string>& features_of(const std::string& family) {
  static const std::map<std::string, std::vector<std::string>> table = {
      {"mlp", {"amp", "ema", "swa", "ddp", "micro_batch", "onnx"}},
      {"convnet",
       {"amp", "channels_last", "activation_checkpointing:blocks", "fused_conv_bn_relu", "fold_batchnorm",
        "sync_batchnorm", "ema", "swa", "ddp", "micro_batch", "onnx"}},
      {"resnet",
       {"amp", "channels_last", "activation_checkpointing:blocks,stages", "fused_conv_bn_relu", "fold_batchnorm",
        "sync_batchnorm", "ema", "swa", "ddp", "micro_batch", "onnx"}},
      // ReLU6, SiLU and hard-swish have no fused operator yet
      {"efficientnet",
       {"amp", "channels_last", "activation_checkpointing:blocks", "fold_batchnorm", "sync_batchnorm", "ema", "swa",
        "ddp", "micro_batch", "stochastic_depth", "onnx"}},
      {"regnet",
       {"amp", "channels_last", "activation_checkpointing:blocks,stages", "fused_conv_bn_relu", "fold_batchnorm",
        "sync_batchnorm", "ema", "swa", "ddp", "micro_batch", "onnx"}},
      {"convnext",
       {"amp", "channels_last", "activation_checkpointing:blocks,stages", "ema", "swa", "ddp", "micro_batch",
        "stochastic_depth", "onnx"}},
      {"vit", {"amp", "activation_checkpointing:blocks", "ema", "swa", "ddp", "micro_batch", "onnx"}},
      {"swin",
       {"amp", "activation_checkpointing:blocks,stages", "ema", "swa", "ddp", "micro_batch", "stochastic_depth", "onnx"}},
      {"mobilenet",
       {"amp", "channels_last", "activation_checkpointing:blocks", "fold_batchnorm", "sync_batchnorm", "ema", "swa",
        "ddp", "micro_batch", "onnx"}},
  };
  return table.at(family);
}

// Which of a model's blocks the fused conv+BN+ReLU operators take (the ConvNormActs with a ReLU,
// the ResNets' and convnet's own triples), and which not.
std::string fusion_of(const std::string& family, const std::string& name) {
  if (family == "convnet") return "every conv-BN-ReLU (4)";
  if (family == "resnet")
    return "the stem's conv-BN-ReLU, each block's conv-BN-ReLUs and its conv-BN-add-ReLU end (the grouped 3x3 of "
           "ResNeXt included)";
  if (family == "regnet")
    return "the stem's conv-BN-ReLU and each block's 1x1 and grouped 3x3 conv-BN-ReLU; not: the projection and the "
           "last 1x1 (no ReLU: conv-BN), the add-ReLU end, the squeeze-excitation";
  if (name == "mobilenet_v3_large" || name == "mobilenet_v3_small")
    return "the conv-BN-ReLUs of its ReLU blocks; not: the hard-swish ones and the projections (no fused hard-swish "
           "kernel yet; --fold-batchnorm folds their BatchNorms in evaluation)";
  if (family == "mobilenet") return "nothing: its activation is ReLU6, which has no fused kernel yet (--fold-batchnorm folds "
                                    "its BatchNorms in evaluation)";
  if (family == "efficientnet")
    return "nothing: its activation is SiLU, which has no fused kernel yet (--fold-batchnorm folds its BatchNorms in "
           "evaluation)";
  if (family == "mlp") return "nothing: no convolution";
  return "nothing: no BatchNorm (LayerNorm)";
}

// The crop torchvision's ImageNet weights of a name were evaluated at, where it is not 224.
int64_t trained_side(const std::string& name) {
  static const std::map<std::string, int64_t> sides = {
      {"efficientnet_b1", 240}, {"efficientnet_b2", 288},   {"efficientnet_b3", 300},   {"efficientnet_b4", 380},
      {"efficientnet_b5", 456}, {"efficientnet_b6", 528},   {"efficientnet_b7", 600},   {"efficientnet_v2_s", 384},
      {"efficientnet_v2_m", 480}, {"efficientnet_v2_l", 480},
      {"swin_v2_t", 256},       {"swin_v2_s", 256},       {"swin_v2_b", 256},
  };
  const auto it = sides.find(name);
  return it == sides.end() ? 224 : it->second;
}

const std::vector<Entry>& registry() {
  using detail::InitScheme;
  static const std::vector<Entry> entries = [] {
    std::vector<Entry> e = {
        {"mlp", "mlp", InitScheme::kPytorchDefault,
         [](const BuildInput& in) {
           return detail::make_mlp(in.opts, in.opts.in_channels * in.input_h * in.input_w);
         }},
        {"convnet", "convnet", InitScheme::kPytorchDefault,
         [](const BuildInput& in) { return detail::make_convnet(in.opts); }},
    };
    for (const auto& [name, parameters] : detail::resnet_variants())
      e.push_back({name, "resnet", InitScheme::kTorchvisionResNet,
                   [name = name](const BuildInput& in) { return detail::make_resnet(in.opts, name); }, parameters});
    for (const auto& [name, parameters] : detail::mobilenet_variants())
      e.push_back({name, "mobilenet", InitScheme::kTorchvisionMobile,
                   [name = name](const BuildInput& in) { return detail::make_mobilenet(in.opts, name); }, parameters});
    for (const auto& [name, parameters] : detail::efficientnet_variants())
      e.push_back({name, "efficientnet", InitScheme::kTorchvisionEfficientNet,
                   [name = name](const BuildInput& in) { return detail::make_efficientnet(in.opts, name); }, parameters});
    for (const auto& [name, parameters] : detail::regnet_variants())
      e.push_back({name, "regnet", InitScheme::kTorchvisionRegNet,
                   [name = name](const BuildInput& in) { return detail::make_regnet(in.opts, name); }, parameters});
    for (const auto& [name, parameters] : detail::convnext_variants())
      e.push_back({name, "convnext", InitScheme::kTorchvisionConvNeXt,
                   [name = name](const BuildInput& in) { return detail::make_convnext(in.opts, name); }, parameters,
                   32});  // its 4x4/4 stem and three 2x2/2 downsamplings
    for (const auto& [name, parameters] : detail::vit_variants())
      e.push_back({name, "vit", InitScheme::kOwn,
                   [name = name](const BuildInput& in) { return detail::make_vit(in.opts, name, in.input_h); },
                   parameters, 1, 224});
    for (const auto& [name, parameters] : detail::swin_variants())
      e.push_back({name, "swin", InitScheme::kOwn,
                   [name = name](const BuildInput& in) { return detail::make_swin(in.opts, name); }, parameters});
    return e;
  }();
  return entries;
}

// Saves the global CPU generator's state and puts it back on scope exit.
class GlobalCpuRngGuard {
 public:
  GlobalCpuRngGuard() : gen_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    state_ = gen_.get_state();
  }
  ~GlobalCpuRngGuard() {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    gen_.set_state(state_);
  }
  GlobalCpuRngGuard(const GlobalCpuRngGuard&) = delete;
  GlobalCpuRngGuard& operator=(const GlobalCpuRngGuard&) = delete;

 private:
  at::Generator gen_;
  at::Tensor state_;
};

}  // namespace

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const auto& e : registry()) out.emplace_back(e.name);
  return out;
}

std::vector<ZooEntry> zoo() {
  std::vector<ZooEntry> out;
  for (const auto& e : registry()) {
    ZooEntry z;
    z.name = e.name;
    z.family = e.family;
    z.torchvision = e.parameters > 0;
    z.features = features_of(e.family);
    z.fuses = fusion_of(e.family, e.name);
    z.min_image_size = e.min_side;
    z.fixed_image_size = e.fixed_side > 0;
    if (z.torchvision) {
      z.parameters = e.parameters;
      z.image_size = e.fixed_side > 0 ? e.fixed_side : trained_side(e.name);
    } else {  // dlrun's small models, at their defaults (ModelOptions): built, they are tiny
      ModelOptions o;
      o.name = e.name;
      z.image_size = 28;
      GlobalCpuRngGuard keep_global_rng;
      z.parameters = num_parameters(*e.make(BuildInput{o, 28, 28}));
    }
    out.push_back(std::move(z));
  }
  return out;
}

std::string family(const std::string& name) {
  for (const auto& e : registry())
    if (e.name == name) return e.family;
  return "";
}

namespace {
// model.name takes these names (config/choices.h): the schema lists no model of its own.
[[maybe_unused]] const bool kNamesRegistered = config::register_choices("model.name", names);
}  // namespace

std::shared_ptr<Model> build(const ModelOptions& opts, uint64_t seed, int64_t input_h, int64_t input_w) {
  const Entry* entry = nullptr;
  for (const auto& e : registry())
    if (opts.name == e.name) entry = &e;
  if (entry == nullptr)
    throw Error(ExitCode::kBadInput, SourceLoc{}, "model.name",
                fmt::format("unknown model '{}'; valid names: {}", opts.name, fmt::join(names(), ", ")));
  DLRUN_CHECK_INPUT(opts.num_classes > 0, "model.num_classes must be positive, got {}", opts.num_classes);
  DLRUN_CHECK_INPUT(opts.in_channels > 0, "model.in_channels must be positive, got {}", opts.in_channels);
  DLRUN_CHECK_INPUT(input_h > 0 && input_w > 0, "model {}: bad input image size {}x{}", opts.name, input_h, input_w);
  // The side the model is built for: model.image_size when given (the data's must be it), else
  // the family's fixed side (ViT), else any.
  if (opts.image_size > 0 && (input_h != opts.image_size || input_w != opts.image_size))
    throw Error(ExitCode::kBadInput, SourceLoc{}, "model.image_size",
                fmt::format("{} is built for {}x{} images (model.image_size), and these are {}x{}", opts.name,
                            opts.image_size, opts.image_size, input_h, input_w),
                fmt::format("resize them (data.image_size: {}), or set model.image_size: {}", opts.image_size, input_h));
  if (opts.image_size <= 0 && entry->fixed_side > 0 && (input_h != entry->fixed_side || input_w != entry->fixed_side))
    throw Error(ExitCode::kBadInput, SourceLoc{}, "model.image_size",
                fmt::format("{} is built for {}x{} images (model.image_size: auto, torchvision's), and these are {}x{}",
                            opts.name, entry->fixed_side, entry->fixed_side, input_h, input_w),
                fmt::format("resize them (data.image_size: {}), or build it for them (model.image_size: {}; "
                            "torchvision's weights then do not fit its position embeddings)",
                            entry->fixed_side, input_h));
  if (input_h < entry->min_side || input_w < entry->min_side)
    throw Error(ExitCode::kBadInput, SourceLoc{}, "model.name",
                fmt::format("{} takes images of at least {}x{}, and these are {}x{}", opts.name, entry->min_side,
                            entry->min_side, input_h, input_w),
                fmt::format("resize them: data.image_size: {} (or more)", entry->min_side));

  std::shared_ptr<Model> model;
  {
    GlobalCpuRngGuard keep_global_rng;
    model = entry->make(BuildInput{opts, input_h, input_w});
  }
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  if (auto* own = dynamic_cast<detail::SelfInitializing*>(model.get()))
    own->initialize(gen);
  else
    detail::initialize(*model, entry->scheme, gen);
  if (opts.zero_init_residual) {  // config validation allows it for the ResNet family only
    DLRUN_CHECK_INPUT(std::string(entry->family) == "resnet", "model.zero_init_residual: {} is not of the ResNet family",
                      opts.name);
    detail::zero_init_residual(*model);
  }
  if (opts.dtype == ModelDtype::kFloat64) model->set_dtype(torch::kFloat64);
  if (opts.channels_last) detail::to_channels_last(*model);
  return model;
}

std::shared_ptr<Model> build(const ModelOptions& opts, uint64_t seed, int64_t input_hw) {
  return build(opts, seed, input_hw, input_hw);
}

}  // namespace dlrun::models
