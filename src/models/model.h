// Models: a registry keyed by config name (mlp, convnet, resnet18/34/50).
//
// ResNets with the ImageNet stem use torchvision's parameter names and shapes
// (conv1, bn1, layer1.0.conv1, layer1.0.downsample.0, fc, ...), so weights exported by
// dlrun load into torchvision.models.resnetXX() and give the same logits.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "config/options.h"
#include "models/lowering.h"

namespace dlrun::models {

/// Every model: images (N, C, H, W) float -> logits (N, num_classes).
class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  /// forward() in evaluation, as a graph of operators (models/lowering.h): `images` (N, C, H, W)
  /// -> the logits, every tensor named by its state-dict key. The ONNX export writes it.
  virtual Value lower(Graph& g, const Value& images) const = 0;

  /// The model's blocks, as optim.layer_decay counts layers (train/step/param_groups.h): an
  /// ECMAScript regular expression whose match at the start of a parameter's name is the name of
  /// the block that holds it ("layer1.0." in a ResNet); blocks are numbered in the order their
  /// parameters come. timm's group_matcher, for torchvision's names.
  virtual std::string block_pattern() const = 0;
  /// Parameters after the last block that belong to its layer (timm's MATCH_PREV_GROUP: ViT's and
  /// Swin's final norm, EfficientNet's and MobileNetV2's last 1x1 convolution): a regular
  /// expression matched at the start of the name ("": none, they are the head's).
  virtual std::string last_block_pattern() const { return ""; }
  /// What takes no weight decay under optim.no_decay_norm_bias beyond biases and 1-D (norm)
  /// parameters: a regular expression searched in each parameter's name ("": nothing more).
  /// timm's no_weight_decay(): ViT's class token and position embedding, Swin's tables.
  virtual std::string no_decay_pattern() const { return ""; }

  /// The floating dtype of the parameters and buffers (model.dtype; float32 unless
  /// set_dtype() changed it). forward() converts a floating input to it.
  torch::ScalarType dtype() const { return dtype_; }
  /// Convert every floating parameter and buffer to `t` (float32 or float64).
  void set_dtype(torch::ScalarType t) {
    to(t);
    dtype_ = t;
  }
  /// Run every conv-BN-ReLU through the dlrun::conv_bn_relu operator (src/kernels/ops.h)
  /// instead of the three modules — same parameters and buffers, same results within float
  /// tolerance. BatchNorms handed to a BatchNormSync stay unfused. Models without such triples
  /// (mlp) ignore it.
  void use_fused_conv_bn_relu(bool on) { fused_ = on; }
  bool fused_conv_bn_relu() const { return fused_; }
  /// In evaluation passes (eval mode, gradients off), fold every BatchNorm that follows a
  /// convolution into it (models/batchnorm.h, fold_batchnorm): conv-BN-ReLU becomes one
  /// dlrun::conv_bias_relu (one cuDNN call on CUDA), conv-BN one biased convolution. The
  /// parameters and buffers are not touched: the folded weights are computed per pass. Same
  /// outputs within float rounding (`dlrun eval --fold-batchnorm`). Models without
  /// BatchNorm (mlp) ignore it.
  void use_folded_batchnorm(bool on) { folded_ = on; }
  bool folded_batchnorm() const { return folded_; }

 protected:
  /// x in the model's dtype (unchanged when it already is, or is not floating, or autocast
  /// chooses the compute dtype).
  torch::Tensor as_input(const torch::Tensor& x) const {
    return x.is_floating_point() && x.scalar_type() != dtype_ && dtype_ == torch::kFloat64 ? x.to(dtype_) : x;
  }
  bool fused_ = false;
  bool folded_ = false;

 private:
  torch::ScalarType dtype_ = torch::kFloat32;
};

/// `x` stored NHWC with channels_last's exact strides. Tensor::contiguous(ChannelsLast) returns
/// an NCHW tensor unchanged when a size-1 dimension makes it count as both formats — a batch of
/// one-channel images, a first convolution's [out, 1, k, k] weight — and oneDNN then chooses
/// NCHW for that layer's output: the next layer converts it, and the backward pass runs
/// mixed-format elementwise kernels (both visible in a profile of the Fashion-MNIST convnet).
/// Such a tensor is copied into the exact layout.
inline torch::Tensor channels_last(const torch::Tensor& x) {
  if (x.dim() != 4) return x;
  torch::Tensor y = x.contiguous(torch::MemoryFormat::ChannelsLast);
  const auto want = c10::get_channels_last_strides_2d(y.sizes());
  if (y.strides() == c10::IntArrayRef(want)) return y;
  return torch::empty(y.sizes(), y.options().memory_format(torch::MemoryFormat::ChannelsLast)).copy_(y);
}

/// adaptive_avg_pool2d to (oh, ow), deterministic on CUDA too: where deterministic algorithms
/// are on (run.deterministic) and `x` is on CUDA, whose adaptive_avg_pool2d backward adds
/// atomically and is refused in that mode, it runs as adaptive_avg_pool_by_matmul; elsewhere
/// as torch::adaptive_avg_pool2d (bit for bit PyTorch's).
torch::Tensor adaptive_avg_pool(const torch::Tensor& x, int64_t oh, int64_t ow);
/// The same windows and means as two matrix products with averaging matrices,
/// (oh, H) @ x @ (W, ow), whose backward is matrix products too. Equal to
/// torch::adaptive_avg_pool2d within float rounding (tests/models/models_test.cpp).
torch::Tensor adaptive_avg_pool_by_matmul(const torch::Tensor& x, int64_t oh, int64_t ow);

/// Build the model named by opts.name. Parameters are initialized deterministically from
/// `seed` (the same seed gives bitwise-identical weights on every machine), using
/// torchvision's init for ResNets (kaiming_normal fan_out for convs, BN weight 1 bias 0,
/// Linear default) and PyTorch's default init otherwise.
/// Building never changes the global RNG state (its state is restored afterwards).
/// `input_h` x `input_w` is the image size the model will see; only `mlp` needs it (its first
/// Linear has in_channels*input_h*input_w inputs); the conv models accept any size (convnet:
/// at least 4x4) thanks to adaptive average pooling.
/// opts.channels_last: 4-D parameters are stored NHWC and forward() converts its input.
/// opts.dtype float64: initialised as for float32 (the same values), then converted; forward()
/// converts its input.
/// Unknown name: dlrun::Error (exit 2) listing the valid names.
std::shared_ptr<Model> build(const ModelOptions& opts, uint64_t seed, int64_t input_h, int64_t input_w);

/// build() for square images of side `input_hw` (28: MNIST / Fashion-MNIST).
std::shared_ptr<Model> build(const ModelOptions& opts, uint64_t seed, int64_t input_hw = 28);

/// Names accepted by build().
std::vector<std::string> names();

/// A model of the zoo, as `dlrun models` lists it.
struct ZooEntry {
  std::string name;
  std::string family;  ///< "resnet" (ResNet, ResNeXt, Wide ResNet), "mobilenet", "efficientnet", "convnet", "mlp"
  /// torchvision's (the model it reproduces, weight for weight) or dlrun's own.
  bool torchvision = false;
  /// The parameters of the usual shape: 1000 classes and 3 channels for torchvision's models
  /// (torchvision's own count), 10 classes and 1 channel of 28x28 for dlrun's.
  int64_t parameters = 0;
  int64_t image_size = 0;  ///< the side it is usually trained at (torchvision's weights' crop)
  int64_t min_image_size = 1;  ///< the smallest side it takes (build() refuses less, exit 2)
  bool fixed_image_size = false;  ///< built for image_size only, unless model.image_size says another (ViT)
  std::vector<std::string> features;  ///< the dlrun features that apply, docs/models.md
  /// What the fused conv+BN+ReLU operators (model.fused_conv_bn_relu) cover in it, or
  /// "nothing: " and why (`dlrun info CONFIG`).
  std::string fuses;
};

/// The zoo, in build()'s order of names.
std::vector<ZooEntry> zoo();

/// The family of a zoo name ("" when it is none).
std::string family(const std::string& name);

/// Parameter count (trainable).
int64_t num_parameters(const torch::nn::Module& m);

/// "name:shape;name:shape;..." over parameters and buffers in state-dict order, shapes written
/// "[64,3,7,7]" ("[]" for scalars), float64 tensors with ":float64" after the shape:
/// "conv1.weight:[64,3,7,7];bn1.weight:[64];...". An
/// architecture fingerprint that checkpoints use to refuse an incompatible resume.
std::string architecture_signature(const torch::nn::Module& m);

/// Parameters then buffers, in state-dict order (names as torchvision/PyTorch write them):
/// module by module in registration order, each module's own parameters then its own
/// buffers — exactly the key order of PyTorch's `model.state_dict()`. The tensors are the
/// module's own (aliases, not copies; possibly channels_last): copy_() into them to load.
std::vector<std::pair<std::string, torch::Tensor>> state_dict(const torch::nn::Module& m);

/// Copy `tensors` (name -> tensor, e.g. a checkpoint's model.pt) into `m`'s parameters and
/// buffers. Every state-dict entry of `m` must be present with its shape; otherwise
/// dlrun::Error (exit 2) naming `source` and the tensor.
void load_state_dict(torch::nn::Module& m, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                     const std::string& source);

}  // namespace dlrun::models
