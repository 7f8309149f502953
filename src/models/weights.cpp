// Loading outside weights with a report (see weights.h).
#include "models/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <set>
#include <unordered_map>

#include "base/error.h"
#include "models/batchnorm.h"

namespace dlrun::models {

namespace {

std::string owner_of(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? std::string() : key.substr(0, dot);
}
std::string leaf_of(const std::string& key) { return key.substr(key.rfind('.') + 1); }

std::string first_names(const std::vector<std::string>& names, size_t n = 5) {
  if (names.empty()) return "none";
  std::vector<std::string> head(names.begin(), names.begin() + std::min(n, names.size()));
  return fmt::format("{}{}", fmt::join(head, ", "), names.size() > n ? fmt::format(" and {} more", names.size() - n) : "");
}

std::string shape_str(const torch::Tensor& t) { return fmt::format("{}", fmt::join(t.sizes(), "x")); }

/// The file's tensors in the model's own layout, when they are a folded export of it: each
/// folded BatchNorm an identity (weight 1, running mean 0, running variance 1 - eps) that adds
/// the folded bias, its convolution's own bias (if any) zero. Empty when they are not.
NamedTensors unfold(Model& model, const std::unordered_map<std::string, torch::Tensor>& file, int64_t in_channels) {
  bool has_bn = false;
  for (const auto& m : model.modules()) has_bn |= dynamic_cast<BatchNorm2dImpl*>(m.get()) != nullptr;
  if (!has_bn) return {};  // (mlp: nothing folds, and its input side is fixed)
  const auto pairs = folded_pairs(model, in_channels);
  if (pairs.empty()) return {};
  std::map<std::string, const FoldedPair*> by_bn, by_conv;
  for (const auto& p : pairs) {
    by_bn[p.bn] = &p;
    by_conv[p.conv] = &p;
  }
  // A folded export has exactly: every entry outside the folded BatchNorms, plus a bias per
  // folded convolution.
  size_t expected = 0;
  NamedTensors out;
  for (const auto& [key, own] : state_dict(model)) {
    const std::string owner = owner_of(key), leaf = leaf_of(key);
    torch::NoGradGuard no_grad;
    if (const auto b = by_bn.find(owner); b != by_bn.end()) {
      const auto bias = file.find(b->second->conv + ".bias");
      if (bias == file.end()) return {};
      if (leaf == "weight") out.emplace_back(key, torch::ones_like(own));
      else if (leaf == "bias") out.emplace_back(key, bias->second);
      else if (leaf == "running_mean") out.emplace_back(key, torch::zeros_like(own));
      else if (leaf == "running_var") out.emplace_back(key, torch::full_like(own, 1.0 - b->second->eps));
      else out.emplace_back(key, own.clone());  // num_batches_tracked
      continue;
    }
    if (by_conv.count(owner) && leaf == "bias") {  // the folded bias lives in the BatchNorm now
      out.emplace_back(key, torch::zeros_like(own));
      continue;
    }
    const auto f = file.find(key);
    if (f == file.end()) return {};
    out.emplace_back(key, f->second);
    ++expected;
  }
  expected += pairs.size();  // the folded bias of each convolution
  return expected == file.size() ? out : NamedTensors{};
}

}  // namespace

std::string LoadReport::summary() const {
  std::string s = fmt::format("loaded {} of {} tensors; missing: {}; unexpected: {}", loaded.size(),
                              loaded.size() + missing.size() + reinitialised.size(), first_names(missing),
                              first_names(unexpected));
  if (!reinitialised.empty()) s += fmt::format("; re-initialised (another number of classes): {}", first_names(reinitialised));
  if (folded) s += "; a folded export (BatchNorms restored as identities)";
  return s;
}

LoadReport load_weights(Model& model, const NamedTensors& tensors, const std::string& source, const LoadOptions& o) {
  std::unordered_map<std::string, torch::Tensor> file(tensors.begin(), tensors.end());
  const NamedTensors own = state_dict(model);
  LoadReport r;
  std::set<std::string> own_names;
  for (const auto& [k, t] : own) own_names.insert(k);
  bool any_missing = false;
  for (const auto& [k, t] : own) any_missing |= !file.count(k);
  if (any_missing && o.allow_folded) {
    const NamedTensors plain = unfold(model, file, o.in_channels);
    if (!plain.empty()) {
      file = std::unordered_map<std::string, torch::Tensor>(plain.begin(), plain.end());
      r.folded = true;
    }
  }
  // The head: the module owning the last state-dict entry (every dlrun model ends in a Linear).
  const std::string head = own.empty() ? std::string() : owner_of(own.back().first);
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (into, from): nothing is written until all match
  std::vector<std::string> mismatched;
  for (const auto& [k, t] : own) {
    const auto f = file.find(k);
    if (f == file.end()) {
      r.missing.push_back(k);
      continue;
    }
    if (f->second.sizes() != t.sizes()) {
      if (o.reinit_head_on_mismatch && owner_of(k) == head) {
        r.reinitialised.push_back(k);
        continue;
      }
      mismatched.push_back(fmt::format("'{}' has shape {}, the model expects {}", k, shape_str(f->second), shape_str(t)));
      continue;
    }
    r.loaded.push_back(k);
    copies.emplace_back(t, f->second);
  }
  for (const auto& [k, t] : tensors)
    if (!own_names.count(k) && !r.folded) r.unexpected.push_back(k);
  DLRUN_CHECK_INPUT(mismatched.empty(), "{}: {}{}", source, mismatched.front(),
                    mismatched.size() > 1 ? fmt::format(" (and {} more shape mismatches)", mismatched.size() - 1) : "");
  DLRUN_CHECK_INPUT(!o.strict || (r.missing.empty() && r.unexpected.empty()),
                    "{}: the weights do not match the model: missing {}; unexpected {}", source,
                    first_names(r.missing), first_names(r.unexpected));
  DLRUN_CHECK_INPUT(!r.loaded.empty(), "{}: no tensor of the file matches the model (unexpected: {})", source,
                    first_names(r.unexpected));
  torch::NoGradGuard no_grad;
  for (auto& [into, from] : copies) into.copy_(from);
  return r;
}

}  // namespace dlrun::models
