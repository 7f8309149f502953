// Optimizer construction and state (see optim.h).
#include "train/optim.h"

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
    return std::make_unique<torch::optim::SGD>(groups, *make(o.weight_decay));
  }
  if (o.name == OptimName::kAdamw) {
    auto make = [&](double wd) {
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(o.lr).betas({o.betas.at(0), o.betas.at(1)}).eps(o.eps).weight_decay(wd));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(decay, make(o.weight_decay));
    if (!plain.empty()) groups.emplace_back(plain, make(0.0));
    return std::make_unique<torch::optim::AdamW>(groups, *make(o.weight_decay));
  }
  fail_input("unknown optimizer {}", static_cast<int>(o.name));
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& g : opt.param_groups()) g.options().set_lr(lr);
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
        out.emplace_back(n + ".step", torch::tensor(s.step(), torch::kInt64));
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
      return it->second.to(p.device()).clone();
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
