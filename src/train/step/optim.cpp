// Optimizer construction and state (see optim.h).
#include "train/step/optim.h"

#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>

#include <unordered_map>

#include "base/error.h"

namespace dlrun::train {
namespace {

bool no_decay(const std::string& name, const torch::Tensor& p) {
  return p.dim() <= 1 || (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0);
}

std::unordered_map<const void*, std::string> names_by_impl(torch::nn::Module& model) {
  std::unordered_map<const void*, std::string> m;
  for (const auto& kv : model.named_parameters()) m[kv.value().unsafeGetTensorImpl()] = kv.key();
  return m;
}

// SGD and AdamW whose step() is ATen's fused kernel, the one behind torch.optim's
// `fused=True` (CPU and CUDA): one kernel over every parameter of a group instead of a loop
// of small ops. Parameter groups, options and per-parameter state are torch::optim's, so the
// state (and its checkpoint keys) is unchanged. `skip` is handed to the kernels as their
// found_inf: where it is 1 they leave parameters and state as they were (decided on the
// device, as PyTorch's GradScaler.step does with fused optimizers).
// The learning rate may also live on the device (use_device_lr): the kernels' tensor-lr form,
// which a captured CUDA graph replays with whatever value set_lr() last wrote.
class DeviceSkip {
 public:
  virtual ~DeviceSkip() = default;
  std::optional<torch::Tensor> skip;  ///< float32 0-dim on the parameters' device, or none
  std::optional<torch::Tensor> lr;    ///< float32 0-dim on the parameters' device, or none (options' lr)
};

class FusedSGD : public torch::optim::SGD, public DeviceSkip {
 public:
  using torch::optim::SGD::SGD;

  torch::Tensor step(LossClosure closure = nullptr) override {
    TORCH_CHECK(!closure, "FusedSGD takes no closure");
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups()) {
      const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
      std::vector<torch::Tensor> params, grads, bufs;
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        params.push_back(p);
        grads.push_back(p.grad());
        if (o.momentum() == 0) continue;
        auto& st = state_[p.unsafeGetTensorImpl()];
        if (!st) {
          // Zeros, not PyTorch's first-step copy of the gradient: momentum * 0 + grad is that
          // copy exactly (dampening is 0), and a first step skipped for an fp16 overflow
          // leaves no uninitialised buffer behind.
          auto s = std::make_unique<torch::optim::SGDParamState>();
          s->momentum_buffer(torch::zeros_like(p, at::MemoryFormat::Preserve));
          st = std::move(s);
        }
        bufs.push_back(static_cast<torch::optim::SGDParamState&>(*st).momentum_buffer());
      }
      if (params.empty()) continue;
      if (lr)
        at::_fused_sgd_(params, grads, bufs, o.weight_decay(), o.momentum(), *lr, o.dampening(), o.nesterov(),
                        /*maximize=*/false, /*is_first_step=*/false, /*grad_scale=*/std::nullopt, skip);
      else
        at::_fused_sgd_(params, grads, bufs, o.weight_decay(), o.momentum(), o.lr(), o.dampening(), o.nesterov(),
                        /*maximize=*/false, /*is_first_step=*/false, /*grad_scale=*/std::nullopt, skip);
    }
    return {};
  }
};

class FusedAdamW : public torch::optim::AdamW, public DeviceSkip {
 public:
  using torch::optim::AdamW::AdamW;

  /// The step count of `p`'s state: the device counter once a step has run, else the state's.
  int64_t step_count(const torch::Tensor& p, const torch::optim::AdamWParamState& s) const {
    auto it = steps_.find(p.unsafeGetTensorImpl());
    return it != steps_.end() && it->second.owner == &s ? it->second.count.item<int64_t>() : s.step();
  }

  /// After the states were replaced (a checkpoint loaded): the device counters belong to states
  /// that are gone, and a new state may be allocated at a freed one's address, which the owner
  /// check alone would take for the old state (and its count).
  void forget_counts() { steps_.clear(); }
  size_t counts() const { return steps_.size(); }

  torch::Tensor step(LossClosure closure = nullptr) override {
    TORCH_CHECK(!closure, "FusedAdamW takes no closure");
    torch::NoGradGuard no_grad;
    for (auto& group : param_groups()) {
      const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
      std::vector<torch::Tensor> params, grads, avgs, sqs, steps;
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        auto& st = state_[p.unsafeGetTensorImpl()];
        if (!st) {
          auto s = std::make_unique<torch::optim::AdamWParamState>();
          s->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
          s->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
          st = std::move(s);
        }
        auto& s = static_cast<torch::optim::AdamWParamState&>(*st);
        // The count lives on the device (a skipped step takes it back there); a state loaded
        // from a checkpoint (a new state object) starts it from the loaded count.
        auto& c = steps_[p.unsafeGetTensorImpl()];
        if (c.owner != &s) c = {&s, torch::full({}, static_cast<double>(s.step()), p.options().dtype(torch::kFloat32))};
        params.push_back(p);
        grads.push_back(p.grad());
        avgs.push_back(s.exp_avg());
        sqs.push_back(s.exp_avg_sq());
        steps.push_back(c.count);
      }
      if (params.empty()) continue;
      const auto [beta1, beta2] = o.betas();
      at::_foreach_add_(steps, 1);  // the kernels take the count already incremented, as PyTorch passes it
      if (lr)
        at::_fused_adamw_(params, grads, avgs, sqs, /*max_exp_avg_sqs=*/{}, steps, *lr, beta1, beta2, o.weight_decay(),
                          o.eps(), /*amsgrad=*/false, /*maximize=*/false, /*grad_scale=*/std::nullopt, skip);
      else
        at::_fused_adamw_(params, grads, avgs, sqs, /*max_exp_avg_sqs=*/{}, steps, o.lr(), beta1, beta2,
                          o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false,
                          /*grad_scale=*/std::nullopt, skip);
      if (skip) at::_foreach_sub_(steps, std::vector<torch::Tensor>(steps.size(), *skip));
    }
    return {};
  }

 private:
  struct Count {
    const torch::optim::AdamWParamState* owner = nullptr;
    torch::Tensor count;  ///< float32 0-dim, as PyTorch's fused AdamW keeps state["step"]
  };
  std::unordered_map<const void*, Count> steps_;
};

}  // namespace

std::unique_ptr<torch::optim::Optimizer> build_optimizer(const OptimOptions& o, torch::nn::Module& model) {
  std::vector<torch::Tensor> decay, plain;
  for (const auto& kv : model.named_parameters()) {
    if (!kv.value().requires_grad()) continue;
    (o.no_decay_norm_bias && no_decay(kv.key(), kv.value()) ? plain : decay).push_back(kv.value());
  }
  if (o.name == OptimName::kSgd) {
    auto make = [&](double wd) {
      return std::make_unique<torch::optim::SGDOptions>(
          torch::optim::SGDOptions(o.lr).momentum(o.momentum).nesterov(o.nesterov).weight_decay(wd));
    };
    DLRUN_CHECK_INPUT(!o.nesterov || o.momentum > 0, "optim.nesterov needs optim.momentum > 0");
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, make(o.weight_decay));
    if (!plain.empty()) groups.emplace_back(plain, make(0.0));
    return std::make_unique<FusedSGD>(groups, *make(o.weight_decay));
  }
  if (o.name == OptimName::kAdamw) {
    auto make = [&](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(o.lr).betas({o.betas.at(0), o.betas.at(1)}).eps(o.eps).weight_decay(wd));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, make(o.weight_decay));
    if (!plain.empty()) groups.emplace_back(plain, make(0.0));
    return std::make_unique<FusedAdamW>(groups, *make(o.weight_decay));
  }
  fail_input("unknown optimizer {}", static_cast<int>(o.name));
}

size_t device_step_counts(const torch::optim::Optimizer& opt) {
  const auto* fused = dynamic_cast<const FusedAdamW*>(&opt);
  return fused != nullptr ? fused->counts() : 0;
}

void optimizer_step(torch::optim::Optimizer& opt, const torch::Tensor& skip) {
  auto* d = dynamic_cast<DeviceSkip*>(&opt);
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
  for (auto& g : opt.param_groups()) g.options().set_lr(lr);
  auto* d = dynamic_cast<DeviceSkip*>(&opt);
  if (d && d->lr) d->lr->fill_(lr);  // a kernel on the device's stream: no host wait
}

void use_device_lr(torch::optim::Optimizer& opt, const torch::Device& device) {
  auto* d = dynamic_cast<DeviceSkip*>(&opt);
  TORCH_CHECK(d != nullptr, "use_device_lr: not a fused optimizer");
  const double lr = opt.param_groups().empty() ? 0.0 : opt.param_groups()[0].options().get_lr();
  // CUDA kernels read a float32 lr through a device pointer (a double one is rounded to
  // float32 there too); the CPU kernels read a host double, so keep all of it there.
  const auto dtype = device.is_cuda() ? torch::kFloat32 : torch::kFloat64;
  d->lr = torch::full({}, lr, torch::TensorOptions().dtype(dtype).device(device));
}

TensorDict optimizer_state(const OptimOptions& o, torch::optim::Optimizer& opt, torch::nn::Module& model) {
  TensorDict out;
  auto names = names_by_impl(model);
  auto& state = opt.state();
  for (auto& g : opt.param_groups())
    for (auto& p : g.params()) {
      auto it = state.find(p.unsafeGetTensorImpl());
      if (it == state.end()) continue;
      const std::string& n = names.at(p.unsafeGetTensorImpl());
      if (o.name == OptimName::kSgd) {
        auto& s = static_cast<torch::optim::SGDParamState&>(*it->second);
        if (s.momentum_buffer().defined()) out.emplace_back(n + ".momentum_buffer", s.momentum_buffer());
      } else {
        auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
        out.emplace_back(n + ".exp_avg", s.exp_avg());
        out.emplace_back(n + ".exp_avg_sq", s.exp_avg_sq());
        const auto* fused = dynamic_cast<const FusedAdamW*>(&opt);
        out.emplace_back(n + ".step", torch::tensor(fused ? fused->step_count(p, s) : s.step(), torch::kInt64));
      }
    }
  return out;
}

void load_optimizer_state(const OptimOptions& o, torch::optim::Optimizer& opt, torch::nn::Module& model,
                          const TensorDict& saved) {
  std::unordered_map<std::string, torch::Tensor> by_name(saved.begin(), saved.end());
  size_t used = 0;
  auto& state = opt.state();
  state.clear();
  if (auto* fused = dynamic_cast<FusedAdamW*>(&opt)) fused->forget_counts();
  for (const auto& kv : model.named_parameters()) {
    const std::string& n = kv.key();
    const torch::Tensor& p = kv.value();
    auto get = [&](const std::string& suffix) -> torch::Tensor {
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
    };
    if (o.name == OptimName::kSgd) {
      auto buf = get(".momentum_buffer");
      if (!buf.defined()) continue;
      auto s = std::make_unique<torch::optim::SGDParamState>();
      s->momentum_buffer(buf);
      state[p.unsafeGetTensorImpl()] = std::move(s);
    } else {
      auto a = get(".exp_avg"), b = get(".exp_avg_sq"), st = get(".step");
      if (!a.defined()) continue;
      DLRUN_CHECK_INPUT(b.defined() && st.defined(), "optimizer state of {} is incomplete", n);
      auto s = std::make_unique<torch::optim::AdamWParamState>();
      s->exp_avg(a);
      s->exp_avg_sq(b);
      s->step(st.item<int64_t>());
      state[p.unsafeGetTensorImpl()] = std::move(s);
    }
  }
  DLRUN_CHECK_INPUT(used == saved.size(), "optimizer state has {} entries that match no parameter of the model",
                    saved.size() - used);
}

}  // namespace dlrun::train
