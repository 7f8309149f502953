// Optimizer construction and state (see optim.h).
#include "train/step/optim.h"

#include <map>
#include <unordered_map>

#include "base/error.h"
#include "train/step/fused_optimizer.h"

namespace dlrun::train {
namespace {

std::unordered_map<const void*, std::string> names_by_impl(torch::nn::Module& model) {
  std::unordered_map<const void*, std::string> m;
  for (const auto& kv : model.named_parameters()) m[kv.value().unsafeGetTensorImpl()] = kv.key();
  return m;
}

}  // namespace

// The factories, each defined in its optimizer's own file.
using Groups = std::vector<ParamGroup>;
std::unique_ptr<torch::optim::Optimizer> make_sgd(const OptimOptions& opts, const Groups& groups);
std::unique_ptr<torch::optim::Optimizer> make_adamw(const OptimOptions& opts, const Groups& groups);
std::unique_ptr<torch::optim::Optimizer> make_rmsprop(const OptimOptions& opts, const Groups& groups);
std::unique_ptr<torch::optim::Optimizer> make_rmsprop_tf(const OptimOptions& opts, const Groups& groups);
std::unique_ptr<torch::optim::Optimizer> make_lamb(const OptimOptions& opts, const Groups& groups);
std::unique_ptr<torch::optim::Optimizer> make_lars(const OptimOptions& opts, const Groups& groups);

namespace {

// The registry: every optimizer dlrun has, by optim.name, each a file of its own
// (fused_optimizer.h). A new one is its file, its factory's declaration and a line here, and
// its name and keys in options.h and schema.cpp.
const std::map<OptimName, OptimizerFactory>& registry() {
  static const std::map<OptimName, OptimizerFactory> r = {
      {OptimName::kSgd, make_sgd},
      {OptimName::kAdamw, make_adamw},
      {OptimName::kRmsprop, make_rmsprop},
      {OptimName::kRmspropTf, make_rmsprop_tf},
      {OptimName::kLamb, make_lamb},
      {OptimName::kLars, make_lars},
  };
  return r;
}

FusedOptimizer& fused(torch::optim::Optimizer& opt) {
  auto* f = dynamic_cast<FusedOptimizer*>(&opt);
  TORCH_CHECK(f != nullptr, "not an optimizer build_optimizer made");
  return *f;
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> build_optimizer(const OptimOptions& o, torch::nn::Module& model) {
  const auto it = registry().find(o.name);
  DLRUN_CHECK_INPUT(it != registry().end(), "optim.name {}: no such optimizer in this dlrun", name_of(o.name));
  return it->second(o, param_groups(o, model));
}

void foreach_update(const std::optional<torch::Tensor>& skip, TensorLists& lists,
                    const std::function<void(TensorLists&)>& update) {
  if (!skip) {
    update(lists);
    return;
  }
  TensorLists work;
  for (const auto& l : lists) {
    work.emplace_back();
    for (const auto& t : l) work.back().push_back(t.clone(at::MemoryFormat::Preserve));
  }
  update(work);
  const torch::Tensor keep_old = *skip > 0;
  for (size_t k = 0; k < lists.size(); ++k)
    for (size_t i = 0; i < lists[k].size(); ++i) lists[k][i].copy_(torch::where(keep_old, lists[k][i], work[k][i]));
}

size_t device_step_counts(const torch::optim::Optimizer& opt) {
  const auto* f = dynamic_cast<const FusedOptimizer*>(&opt);
  return f != nullptr ? f->device_counts() : 0;
}

void optimizer_step(torch::optim::Optimizer& opt, const torch::Tensor& skip) {
  auto* d = dynamic_cast<FusedOptimizer*>(&opt);
  if (d == nullptr) {
    TORCH_CHECK(!skip.defined(), "optimizer_step: this optimizer cannot skip on the device");
    opt.step();
    return;
  }
  d->skip = skip.defined() ? std::optional<torch::Tensor>(skip) : std::nullopt;
  opt.step();
  d->skip.reset();
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  auto* d = dynamic_cast<FusedOptimizer*>(&opt);
  for (size_t i = 0; i < opt.param_groups().size(); ++i)
    opt.param_groups()[i].options().set_lr(d != nullptr && i < d->lr_scale.size() ? lr * d->lr_scale[i] : lr);
  if (d && d->lr) d->lr->fill_(lr);  // a kernel on the device's stream: no host wait
}

void use_device_lr(torch::optim::Optimizer& opt, const torch::Device& device) {
  auto* d = dynamic_cast<FusedOptimizer*>(&opt);
  TORCH_CHECK(d != nullptr, "use_device_lr: not a fused optimizer");
  const double lr = opt.param_groups().empty() || d->lr_scale.empty()
                        ? (opt.param_groups().empty() ? 0.0 : opt.param_groups()[0].options().get_lr())
                        : opt.param_groups()[0].options().get_lr() / d->lr_scale[0];
  // CUDA kernels read a float32 lr through a device pointer (a double one is rounded to
  // float32 there too); the CPU kernels read a host double, so keep all of it there.
  const auto dtype = device.is_cuda() ? torch::kFloat32 : torch::kFloat64;
  d->lr = torch::full({}, lr, torch::TensorOptions().dtype(dtype).device(device));
}

TensorDict optimizer_state(const OptimOptions&, torch::optim::Optimizer& opt, torch::nn::Module& model) {
  TensorDict out;
  FusedOptimizer& f = fused(opt);
  const auto names = names_by_impl(model);
  for (auto& g : opt.param_groups())
    for (auto& p : g.params()) f.save_state(p, names.at(p.unsafeGetTensorImpl()), out);
  return out;
}

void load_optimizer_state(const OptimOptions&, torch::optim::Optimizer& opt, torch::nn::Module& model,
                          const TensorDict& saved) {
  FusedOptimizer& f = fused(opt);
  std::unordered_map<std::string, torch::Tensor> by_name(saved.begin(), saved.end());
  size_t used = 0;
  opt.state().clear();
  f.state_cleared();
  for (const auto& kv : model.named_parameters()) {
    const std::string& n = kv.key();
    const torch::Tensor& p = kv.value();
    f.load_state(p, n, [&](const std::string& suffix) -> torch::Tensor {
      auto it = by_name.find(n + suffix);
      if (it == by_name.end()) return {};
      ++used;
      DLRUN_CHECK_INPUT(suffix == ".step" || it->second.sizes() == p.sizes(),
                        "optimizer state {}{} has shape {}, parameter has {}", n, suffix,
                        c10::str(it->second.sizes()), c10::str(p.sizes()));
      if (suffix == ".step") return it->second.clone();
      // In the parameter's layout: a checkpoint stores the state contiguous, and with
      // model.channels_last the CUDA fused optimizers refuse state whose strides differ from the
      // parameter's and gradient's.
      return torch::empty_like(p, torch::MemoryFormat::Preserve).copy_(it->second);
    });
  }
  DLRUN_CHECK_INPUT(used == saved.size(), "optimizer state has {} entries that match no parameter of the model",
                    saved.size() - used);
}

}  // namespace dlrun::train
