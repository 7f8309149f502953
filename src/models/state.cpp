// State-dict views of a model: parameter count, architecture fingerprint, named tensors.
//
// PyTorch's `Module.state_dict()` visits modules in registration order and, for each, writes
// its own parameters and then its own buffers. LibTorch's named_parameters() and
// named_buffers() each recurse on their own, which gives a different order; checkpoints,
// exports and params_sha256 need PyTorch's, so it is rebuilt here.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unordered_map>

#include "base/error.h"
#include "models/model.h"

namespace dlrun::models {
namespace {

// Appends `m`'s own parameters then own buffers, named "<prefix>.<name>".
void append_own(const torch::nn::Module& m, const std::string& prefix,
                std::vector<std::pair<std::string, torch::Tensor>>& out) {
  const std::string dot = prefix.empty() ? "" : prefix + ".";
  for (const auto& p : m.named_parameters(/*recurse=*/false)) out.emplace_back(dot + p.key(), p.value());
  for (const auto& b : m.named_buffers(/*recurse=*/false)) out.emplace_back(dot + b.key(), b.value());
}

}  // namespace

int64_t num_parameters(const torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters())
    if (p.requires_grad()) n += p.numel();
  return n;
}

std::vector<std::pair<std::string, torch::Tensor>> state_dict(const torch::nn::Module& m) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  append_own(m, "", out);
  // named_modules(include_self=false) is a pre-order walk with dotted names, like Python's.
  for (const auto& child : m.named_modules(/*name_prefix=*/"", /*include_self=*/false))
    append_own(*child.value(), child.key(), out);
  return out;
}

std::string architecture_signature(const torch::nn::Module& m) {
  std::string sig;
  for (const auto& [name, t] : state_dict(m)) {
    if (!sig.empty()) sig += ';';
    sig += fmt::format("{}:[{}]", name, fmt::join(t.sizes(), ","));
    if (t.scalar_type() == torch::kFloat64) sig += ":float64";  // float32 (and integer) tensors: no suffix
  }
  return sig;
}

void load_state_dict(torch::nn::Module& m, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                     const std::string& source) {
  std::unordered_map<std::string, torch::Tensor> by_name(tensors.begin(), tensors.end());
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : state_dict(m)) {
    auto it = by_name.find(name);
    DLRUN_CHECK_INPUT(it != by_name.end(), "{}: no tensor '{}'", source, name);
    DLRUN_CHECK_INPUT(it->second.sizes() == t.sizes(), "{}: '{}' has shape {}, the model expects {}", source, name,
                      fmt::format("{}", fmt::join(it->second.sizes(), "x")), fmt::format("{}", fmt::join(t.sizes(), "x")));
    t.copy_(it->second);
  }
}

}  // namespace dlrun::models
