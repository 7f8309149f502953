// set_batchnorm_sync, fold_batchnorm and the conv-BN(-add)-ReLU helpers (see batchnorm.h).
#include "models/batchnorm.h"

#include <map>
#include <set>

#include "kernels/ops.h"
#include "kernels/self_check.h"
#include "models/model.h"

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

namespace {

/// While folded_state_dict() runs its recording pass: every conv-BN pair that pass folds.
thread_local std::vector<std::pair<torch::nn::Conv2d, BatchNorm2d>>* fold_record = nullptr;

/// The convolution's explicit padding, or null (a string padding such as "same", or a padding
/// mode other than zeros, which the dlrun operators do not take).
const torch::ExpandingArray<2>* plain_padding(const torch::nn::Conv2d& conv) {
  const auto& co = conv->options;
  const auto* padding = std::get_if<torch::ExpandingArray<2>>(&co.padding());
  return co.padding_mode().index() != 0 /* zeros */ ? nullptr : padding;
}

/// Whether this call is an evaluation pass whose BatchNorm can be folded.
bool foldable(const torch::nn::Conv2d& conv, const BatchNorm2d& bn, bool folded) {
  return folded && !bn->is_training() && !torch::GradMode::is_enabled() && bn->options.track_running_stats() &&
         plain_padding(conv) != nullptr;
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> fold_batchnorm(const torch::nn::Conv2dImpl& conv, const BatchNorm2dImpl& bn) {
  if (!bn.options.track_running_stats()) return {};
  torch::NoGradGuard no_grad;
  const auto w = conv.weight;
  const auto acc = w.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  const auto mean = bn.running_mean.to(acc), var = bn.running_var.to(acc);
  auto scale = (var + bn.options.eps()).rsqrt();
  if (bn.options.affine()) scale = scale * bn.weight.to(acc);
  auto bias = conv.bias.defined() ? conv.bias.to(acc) - mean : -mean;
  bias = bias * scale;
  if (bn.options.affine()) bias = bias + bn.bias.to(acc);
  // Broadcasting keeps the weight's memory format (channels_last stays channels_last).
  auto folded_w = (w.to(acc) * scale.view({-1, 1, 1, 1})).to(w.scalar_type());
  return {folded_w, bias.to(w.scalar_type())};
}

namespace {

/// fold_batchnorm for an evaluation pass, which folded_state_dict() may be recording.
std::pair<torch::Tensor, torch::Tensor> fold_in_pass(const torch::nn::Conv2d& conv, const BatchNorm2d& bn) {
  if (fold_record != nullptr) fold_record->emplace_back(conv, bn);
  return fold_batchnorm(*conv, *bn);
}

}  // namespace

torch::Tensor conv_bn(torch::nn::Conv2d& conv, BatchNorm2d& bn, const torch::Tensor& x, bool folded) {
  if (!foldable(conv, bn, folded)) return bn->forward(conv->forward(x));
  const auto [w, b] = fold_in_pass(conv, bn);
  const auto& co = conv->options;
  return torch::conv2d(x, w, b, *co.stride(), **plain_padding(conv), *co.dilation(), co.groups());
}

namespace {

/// Whether this conv-BN pair can run as one dlrun operator: a plain BatchNorm (not synchronised
/// across ranks) with affine parameters and running statistics, after a bias-free convolution
/// with explicit zero padding.
bool fusable(const torch::nn::Conv2d& conv, const BatchNorm2d& bn) {
  return !bn->sync && bn->options.track_running_stats() && bn->options.affine() && !conv->bias.defined() &&
         plain_padding(conv) != nullptr;
}

/// As BatchNorm2d::forward before it normalises: count the batch in training, and return the
/// momentum (or, without one, the cumulative average's 1/count).
double count_batch(BatchNorm2d& bn) {
  double momentum = bn->options.momentum().value_or(0.0);
  if (bn->is_training()) {
    torch::NoGradGuard no_grad;
    bn->num_batches_tracked.add_(1);
    if (!bn->options.momentum()) momentum = 1.0 / bn->num_batches_tracked.item<double>();
  }
  return momentum;
}

}  // namespace

torch::Tensor conv_bn_relu(torch::nn::Conv2d& conv, BatchNorm2d& bn, const torch::Tensor& x, bool fused,
                           bool folded) {
  const auto& co = conv->options;
  if (foldable(conv, bn, folded)) {
    const auto [w, b] = fold_in_pass(conv, bn);
    return kernels::conv_bias_relu(x, w, b, *co.stride(), **plain_padding(conv), *co.dilation(), co.groups());
  }
  if (!fused || !fusable(conv, bn) || !kernels::fused_checked(x)) return bn->forward(conv->forward(x)).relu_();
  const double momentum = count_batch(bn);
  return kernels::conv_bn_relu(x, conv->weight, bn->weight, bn->bias, bn->running_mean, bn->running_var,
                               bn->is_training(), momentum, bn->options.eps(), *co.stride(), **plain_padding(conv),
                               *co.dilation(), co.groups());
}

torch::Tensor conv_bn_add_relu(torch::nn::Conv2d& conv, BatchNorm2d& bn, const torch::Tensor& x,
                               const torch::Tensor& residual, bool fused, bool folded) {
  if (!fused || foldable(conv, bn, folded) || !fusable(conv, bn) || !kernels::fused_checked(x))
    return conv_bn(conv, bn, x, folded).add_(residual).relu_();
  const auto& co = conv->options;
  const double momentum = count_batch(bn);
  return kernels::conv_bn_add_relu(x, conv->weight, residual, bn->weight, bn->bias, bn->running_mean,
                                   bn->running_var, bn->is_training(), momentum, bn->options.eps(), *co.stride(),
                                   **plain_padding(conv), *co.dilation(), co.groups());
}

namespace {

/// The conv-BN pairs one recorded evaluation pass folds (see folded_state_dict).
std::vector<std::pair<torch::nn::Conv2d, BatchNorm2d>> record_folded_pairs(Model& model, int64_t in_channels) {
  // Which pairs fold is decided where the forward pass folds them (foldable() in conv_bn and
  // conv_bn_relu), so one evaluation pass on a small input, recorded, names them exactly: no
  // list per architecture to keep in step with the forward code.
  std::vector<std::pair<torch::nn::Conv2d, BatchNorm2d>> pairs;
  {
    // Puts the model's mode and flag back, and stops recording, however the pass ends.
    struct Recording {
      Model& model;
      const bool training = model.is_training(), folded = model.folded_batchnorm();
      ~Recording() {
        fold_record = nullptr;
        model.use_folded_batchnorm(folded);
        model.train(training);
      }
    } recording{model};
    model.eval();
    model.use_folded_batchnorm(true);
    torch::NoGradGuard no_grad;
    const auto some = model.parameters();
    const auto options =
        some.empty() ? torch::TensorOptions() : torch::TensorOptions().dtype(some[0].dtype()).device(some[0].device());
    fold_record = &pairs;
    model.forward(torch::zeros({1, in_channels, 32, 32}, options));
  }
  return pairs;
}

}  // namespace

std::vector<FoldedPair> folded_pairs(Model& model, int64_t in_channels) {
  std::map<const torch::nn::Module*, std::string> names;
  for (const auto& item : model.named_modules()) names[item.value().get()] = item.key();
  std::vector<FoldedPair> out;
  std::set<std::string> seen;
  for (const auto& [conv, bn] : record_folded_pairs(model, in_channels))
    if (seen.insert(names.at(conv.get())).second)
      out.push_back({names.at(conv.get()), names.at(bn.get()), bn->options.eps()});
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> folded_state_dict(Model& model, int64_t in_channels) {
  const auto pairs = record_folded_pairs(model, in_channels);
  std::map<const torch::nn::Module*, std::string> names;
  for (const auto& item : model.named_modules()) names[item.value().get()] = item.key();
  std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> folded_convs;  // conv name -> weight, bias
  std::set<std::string> folded_bns;
  for (const auto& [conv, bn] : pairs) {
    const std::string conv_name = names.at(conv.get());
    if (folded_convs.count(conv_name)) continue;  // a module used twice in one pass
    auto [w, b] = fold_batchnorm(*conv, *bn);
    folded_convs[conv_name] = {w.contiguous(), b.contiguous()};
    folded_bns.insert(names.at(bn.get()));
  }
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& [key, tensor] : state_dict(model)) {
    const auto dot = key.rfind('.');
    const std::string owner = key.substr(0, dot), leaf = key.substr(dot + 1);
    if (folded_bns.count(owner)) continue;  // the BatchNorm's parameters and buffers are in the convolution now
    const auto f = folded_convs.find(owner);
    if (f == folded_convs.end()) {
      out.emplace_back(key, tensor.detach().contiguous());
    } else if (leaf == "weight") {
      out.emplace_back(key, f->second.first);
      out.emplace_back(owner + ".bias", f->second.second);  // the folded bias replaces any own bias
    }
  }
  return out;
}

}  // namespace dlrun::models
