// The optimizer's parameter groups: which parameters take weight decay, and each one's share of
// the learning rate. Two rules decide them, as timm's optimizer factory does:
//
// - optim.no_decay_norm_bias: biases, 1-D parameters (the norms' weights) and what the model
//   names as embeddings (Model::no_decay_pattern: ViT's class token and position embedding, Swin's
//   relative position tables) take weight decay 0; lamb and lars also leave them out of the
//   layer-wise trust ratio (unless optim.always_adapt).
// - optim.layer_decay (BEiT's layer-wise learning-rate decay, timm's param_groups_layer_decay):
//   the model's blocks (Model::block_pattern) are layers 1..L in the order their parameters come;
//   what comes before the first block (the stem, the embeddings) is layer 0, what comes after the
//   last layer L+1 (the head) unless the model counts it in the last block (ViT's and Swin's final
//   norm, EfficientNet's last 1x1 convolution: Model::last_block_pattern, as timm groups them), what
//   lies between two blocks (a downsampling layer) the next block's layer. Layer i's rate is the schedule's times layer_decay^(L+1-i): the head
//   learns at the full rate, the stem at layer_decay^(L+1) of it.
//
// `dlrun info CONFIG` lists the groups.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "config/options.h"

namespace dlrun::train {

struct ParamGroup {
  std::string name;   ///< "decay", "no_decay"; with layer decay "layer_3.decay"
  int64_t layer = -1;  ///< its layer under optim.layer_decay (-1: off)
  double weight_decay = 0.0;
  double lr_scale = 1.0;  ///< its learning rate is the schedule's times this
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
};

/// The groups of `model`'s trainable parameters under `opts` (never empty: one group, possibly
/// without parameters, at least). Without layer decay: "decay" then "no_decay" (when it has
/// parameters); with it, by layer, decay before no_decay. A layer decay for a module that is not
/// one of dlrun's models, or whose blocks match no parameter: exit 2.
std::vector<ParamGroup> param_groups(const OptimOptions& opts, torch::nn::Module& model);

}  // namespace dlrun::train
