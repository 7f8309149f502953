// BatchNorm2d for every dlrun model: torch::nn::BatchNorm2d (same parameters, buffers and
// state-dict names, so checkpoints and torchvision exports are unchanged) whose training-mode
// forward can be handed to a BatchNormSync — synchronised BatchNorm across ranks
// (dist.sync_bn, src/distributed/sync_bn.h), set on a built model by set_batchnorm_sync, the way
// torch.nn.SyncBatchNorm.convert_sync_batchnorm converts one.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dlrun::models {

class Model;

/// Computes a training-mode BatchNorm forward (statistics, running-statistics update,
/// normalisation) in some other way than the local batch alone.
class BatchNormSync {
 public:
  virtual ~BatchNormSync() = default;
  virtual torch::Tensor forward(const torch::Tensor& x, torch::nn::BatchNorm2dImpl& bn) = 0;
};

class BatchNorm2dImpl : public torch::nn::BatchNorm2dImpl {
 public:
  using torch::nn::BatchNorm2dImpl::BatchNorm2dImpl;
  /// (N, C, H, W) -> (N, C, H, W)
  torch::Tensor forward(const torch::Tensor& x) {
    return sync && is_training() ? sync->forward(x, *this) : torch::nn::BatchNorm2dImpl::forward(x);
  }
  std::shared_ptr<BatchNormSync> sync;  ///< null: plain BatchNorm
};
TORCH_MODULE(BatchNorm2d);

/// Hand the training-mode forward of every BatchNorm in `model` to `sync` (null: plain
/// again). Returns how many BatchNorm layers there are.
int set_batchnorm_sync(torch::nn::Module& model, const std::shared_ptr<BatchNormSync>& sync);

/// relu(bn(conv(x))): through the fused dlrun::conv_bn_relu operator when `fused` (and `bn` is
/// not synchronised across ranks, and the fused kernels passed their self-check on x's device,
/// dtype and memory format: kernels::fused_checked), else the three modules. Both update the
/// running statistics and num_batches_tracked alike.
///
/// `folded`: in an evaluation pass (bn in eval mode, gradients off) the BatchNorm is folded into
/// the convolution instead (fold_batchnorm) and the pair runs as one dlrun::conv_bias_relu —
/// one cuDNN conv-bias-ReLU call on CUDA. Anything else runs as without it.
torch::Tensor conv_bn_relu(torch::nn::Conv2d& conv, BatchNorm2d& bn, const torch::Tensor& x, bool fused,
                           bool folded = false);

/// relu(bn(conv(x)) + residual): a ResNet block's last conv-BN, its shortcut and the ReLU,
/// through the fused dlrun::conv_bn_add_relu operator when `fused` (under conv_bn_relu's
/// conditions), else conv_bn (folded when `folded` allows), add and ReLU.
torch::Tensor conv_bn_add_relu(torch::nn::Conv2d& conv, BatchNorm2d& bn, const torch::Tensor& x,
                               const torch::Tensor& residual, bool fused, bool folded = false);

/// bn(conv(x)) (a ResNet block's last conv-BN and its projection shortcut); with `folded`, in an
/// evaluation pass, one convolution with the folded weight and bias.
torch::Tensor conv_bn(torch::nn::Conv2d& conv, BatchNorm2d& bn, const torch::Tensor& x, bool folded);

/// The weight and bias of one convolution equal to bn(conv(x)) in eval mode: with
/// s = gamma / sqrt(running_var + eps), weight' = weight * s (per output channel) and
/// bias' = beta + (conv_bias - running_mean) * s, computed in float32 (float64 for float64
/// weights) and returned in the weight's dtype and memory format. Empty tensors when the
/// BatchNorm has no running statistics (it normalises with the batch's, which cannot be folded).
std::pair<torch::Tensor, torch::Tensor> fold_batchnorm(const torch::nn::Conv2dImpl& conv, const BatchNorm2dImpl& bn);

/// `model`'s state dict (names and order of state_dict()) with every BatchNorm that an
/// evaluation pass with use_folded_batchnorm folds taken into its convolution: the
/// convolution's "weight" is the folded weight, followed by a "bias" entry (replacing its own,
/// if it had one), and the BatchNorm's entries are gone. Loads into the same network with those
/// BatchNorms replaced by identities and those convolutions given biases (what
/// torch.nn.utils.fusion.fuse_conv_bn_eval makes of each pair); gives its eval-mode outputs.
/// The pairs are found by one recorded evaluation pass on a zero (1, in_channels, 32, 32)
/// input; the model's mode, flags, parameters and buffers are left as they were. Tensors are
/// contiguous, on the model's device.
std::vector<std::pair<std::string, torch::Tensor>> folded_state_dict(Model& model, int64_t in_channels);

/// A conv-BN pair that folded_state_dict() folds: the modules' names and the BatchNorm's eps.
/// Found by the same recorded pass.
struct FoldedPair {
  std::string conv, bn;
  double eps = 1e-5;
};
std::vector<FoldedPair> folded_pairs(Model& model, int64_t in_channels);

}  // namespace dlrun::models
