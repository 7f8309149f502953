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

namespace dlrun::models {

/// Every model: images (N, C, H, W) float -> logits (N, num_classes).
class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

/// Build the model named by opts.name. Parameters are initialized deterministically from
/// `seed` (the same seed gives bitwise-identical weights on every machine), using
/// torchvision's init for ResNets (kaiming_normal fan_out for convs, BN weight 1 bias 0,
/// Linear default) and PyTorch's default init otherwise.
/// Unknown name: dlrun::Error (exit 2) listing the valid names.
/// `input_hw` is the input height (= width) the model will see; only `mlp` needs it.
std::shared_ptr<Model> build(const ModelOptions& opts, uint64_t seed, int64_t input_hw = 28);

/// Names accepted by build().
std::vector<std::string> names();

/// Parameter count (trainable).
int64_t num_parameters(const torch::nn::Module& m);

/// "name:shape;name:shape;..." over parameters and buffers in state-dict order — an
/// architecture fingerprint that checkpoints use to refuse an incompatible resume.
std::string architecture_signature(const torch::nn::Module& m);

/// Parameters then buffers, in state-dict order (names as torchvision/PyTorch write them).
std::vector<std::pair<std::string, torch::Tensor>> state_dict(const torch::nn::Module& m);

}  // namespace dlrun::models
