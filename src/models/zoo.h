// Private to src/models: the constructors behind the registry, and the initializers.
//
// registry.cpp maps a config name to one of the make_* functions below, then initializes the
// result with a dedicated generator (init.cpp) so the weights depend on the seed only.
#pragma once

#include <ATen/core/Generator.h>

#include <memory>

#include "models/batchnorm.h"
#include "models/model.h"

namespace dlrun::models::detail {

/// The member `name` of a family's table of variants (each with .name), built by `make(variant)`;
/// fail_runtime naming `family` when it is none (the registry asks only for its own names).
template <typename Variant, size_t N, typename Make>
std::shared_ptr<Model> make_member(const Variant (&table)[N], const std::string& name, const char* family, Make make) {
  for (const Variant& v : table)
    if (name == v.name) return make(v);
  fail_runtime("{} is not a member of the {} family", name, family);
}

/// A family's names, each with torchvision's parameter count (each variant's .parameters).
template <typename Variant, size_t N>
std::vector<std::pair<std::string, int64_t>> names_and_parameters(const Variant (&table)[N]) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const Variant& v : table) out.emplace_back(v.name, v.parameters);
  return out;
}

/// flatten -> [Linear -> ReLU (-> Dropout)] per hidden width -> Linear(num_classes).
std::shared_ptr<Model> make_mlp(const ModelOptions& opts, int64_t in_features);

/// A 4-conv BN/ReLU CNN for small images (28x28, 32x32); base width opts.width.
std::shared_ptr<Model> make_convnet(const ModelOptions& opts);

/// The member `name` of torchvision's ResNet family (ResNet v1.5, ResNeXt, Wide ResNet; one of
/// resnet_names()), with the stem that opts.stem names.
std::shared_ptr<Model> make_resnet(const ModelOptions& opts, const std::string& name);
/// The family's names, each with torchvision's parameter count (1000 classes).
std::vector<std::pair<std::string, int64_t>> resnet_variants();
/// torchvision's zero_init_residual: each residual block's last BatchNorm weight (bn3 of a
/// Bottleneck, bn2 of a BasicBlock) set to 0.
void zero_init_residual(Model& model);

/// torchvision's MobileNet family: `name` one of mobilenet_variants().
std::shared_ptr<Model> make_mobilenet(const ModelOptions& opts, const std::string& name);
std::vector<std::pair<std::string, int64_t>> mobilenet_variants();

/// torchvision's EfficientNet (b0-b7): `name` one of efficientnet_variants().
std::shared_ptr<Model> make_efficientnet(const ModelOptions& opts, const std::string& name);
std::vector<std::pair<std::string, int64_t>> efficientnet_variants();

/// torchvision's RegNet (every regnet_x_* and regnet_y_*): `name` one of regnet_variants().
std::shared_ptr<Model> make_regnet(const ModelOptions& opts, const std::string& name);
std::vector<std::pair<std::string, int64_t>> regnet_variants();

/// torchvision's ConvNeXt (tiny, small, base, large): `name` one of convnext_variants().
std::shared_ptr<Model> make_convnext(const ModelOptions& opts, const std::string& name);
std::vector<std::pair<std::string, int64_t>> convnext_variants();

/// torchvision's Vision Transformer (vit_b_16 ... vit_h_14) for images of side `image_size`:
/// `name` one of vit_variants().
std::shared_ptr<Model> make_vit(const ModelOptions& opts, const std::string& name, int64_t image_size);
std::vector<std::pair<std::string, int64_t>> vit_variants();

/// torchvision's Swin Transformer (swin_t, swin_s, swin_b): `name` one of swin_variants().
std::shared_ptr<Model> make_swin(const ModelOptions& opts, const std::string& name);
std::vector<std::pair<std::string, int64_t>> swin_variants();

/// How parameters are drawn.
enum class InitScheme {
  kPytorchDefault,     ///< Conv/Linear: U(+-1/sqrt(fan_in)) weight and bias; norms: 1 and 0
  kTorchvisionResNet,  ///< Conv: kaiming_normal(fan_out, relu); Linear: default; norms: 1 and 0
  kTorchvisionMobile,  ///< Conv: kaiming_normal(fan_out), zero bias; Linear: N(0, 0.01), zero bias; norms: 1 and 0
  kTorchvisionEfficientNet,  ///< as kTorchvisionMobile, but Linear: U(+-1/sqrt(out_features)), zero bias
  kOwn,  ///< the model's own SelfInitializing::initialize()
  kTorchvisionConvNeXt,  ///< Conv and Linear: trunc_normal(std 0.02), zero bias; norms: 1 and 0
  kTorchvisionRegNet,  ///< Conv: N(0, 2 / fan_out), bias the default's; Linear: N(0, 0.01), zero bias; norms: 1 and 0
};

/// A model whose constructor's rule tells its modules apart (ViT's zero head, its Xavier MLPs):
/// build() calls its initialize(), which draws from `gen` alone in state-dict order.
class SelfInitializing {
 public:
  virtual ~SelfInitializing() = default;
  virtual void initialize(at::Generator& gen) = 0;
};

/// The draws initialize() makes, each in float64 from `gen`, rounded to `p`'s dtype.
void fill_uniform(torch::Tensor& p, double bound, at::Generator& gen);  ///< U(-bound, bound)
void fill_normal(torch::Tensor& p, double std, at::Generator& gen);     ///< N(0, std^2)
/// N(0, std^2) truncated to [a, b], as torch.nn.init.trunc_normal_ (inverse CDF of a uniform).
void fill_trunc_normal(torch::Tensor& p, double std, double a, double b, at::Generator& gen);
/// torch.nn.init.xavier_uniform_: U(+-sqrt(6 / (fan_in + fan_out))) of a (out, in) weight.
void fill_xavier_uniform(torch::Tensor& p, at::Generator& gen);

/// Re-draw every parameter of `m` and its descendants from `gen` alone, in state-dict order.
/// Values are drawn in float64 and rounded, so they do not depend on the CPU's vector units.
/// Also resets BatchNorm running statistics.
void initialize(torch::nn::Module& m, InitScheme scheme, at::Generator& gen);

/// Store every 4-D parameter and buffer of `m` in channels_last (NHWC) memory format.
void to_channels_last(torch::nn::Module& m);

}  // namespace dlrun::models::detail
