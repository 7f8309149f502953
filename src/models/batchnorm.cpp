// set_batchnorm_sync and conv_bn_relu (see batchnorm.h).
#include "models/batchnorm.h"

#include "kernels/ops.h"

namespace dlrun::models {

int set_batchnorm_sync(torch::nn::Module& model, const std::shared_ptr<BatchNormSync>& sync) {
  int n = 0;
  for (const auto& m : model.modules(/*include_self=*/true))
    if (auto* bn = dynamic_cast<BatchNorm2dImpl*>(m.get())) {
      bn->sync = sync;
      ++n;
    }
  return n;
}

torch::Tensor conv_bn_relu(torch::nn::Conv2d& conv, BatchNorm2d& bn, const torch::Tensor& x, bool fused) {
  const auto& co = conv->options;
  const auto* padding = std::get_if<torch::ExpandingArray<2>>(&co.padding());
  if (!fused || bn->sync || !bn->options.track_running_stats() || !bn->options.affine() || conv->bias.defined() ||
      padding == nullptr || co.padding_mode().index() != 0 /* zeros */)
    return bn->forward(conv->forward(x)).relu_();
  // As BatchNorm2d::forward: count the batch, then the momentum (or, without one, the
  // cumulative average's 1/count).
  double momentum = bn->options.momentum().value_or(0.0);
  if (bn->is_training()) {
    torch::NoGradGuard no_grad;
    bn->num_batches_tracked.add_(1);
    if (!bn->options.momentum()) momentum = 1.0 / bn->num_batches_tracked.item<double>();
  }
  return kernels::conv_bn_relu(x, conv->weight, bn->weight, bn->bias, bn->running_mean, bn->running_var,
                               bn->is_training(), momentum, bn->options.eps(), *co.stride(), **padding,
                               *co.dilation(), co.groups());
}

}  // namespace dlrun::models
