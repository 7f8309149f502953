// Parameter groups (see param_groups.h).
#include "train/step/param_groups.h"

#include <cmath>
#include <map>
#include <regex>
#include <utility>

#include "base/error.h"
#include "models/model.h"

namespace dlrun::train {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::regex compile(const std::string& pattern, const char* what) {
  try {
    return std::regex(pattern, std::regex::ECMAScript);
  } catch (const std::regex_error& e) {
    throw std::logic_error(std::string("the model's ") + what + " pattern does not compile: " + e.what());
  }
}

// Each parameter's layer (see param_groups.h), for the names in order.
std::vector<int64_t> layers_of(const std::vector<std::string>& names, const models::Model& model, int64_t& last) {
  const std::regex re = compile(model.block_pattern(), "block");
  const std::string tail = model.last_block_pattern();
  const std::regex joins_last = compile(tail.empty() ? "$^" : tail, "last block");
  std::map<std::string, int64_t> block_ids;
  std::vector<int64_t> block(names.size(), 0);  // 1-based block number, 0: in none
  for (size_t i = 0; i < names.size(); ++i) {
    std::smatch m;
    if (!std::regex_search(names[i], m, re, std::regex_constants::match_continuous)) continue;
    auto it = block_ids.emplace(m.str(0), static_cast<int64_t>(block_ids.size()) + 1).first;
    block[i] = it->second;
  }
  const auto n_blocks = static_cast<int64_t>(block_ids.size());
  last = n_blocks + 1;
  std::vector<int64_t> layer(names.size());
  int64_t next = last;  // the next block's number, walking back from the end
  for (size_t k = names.size(); k-- > 0;) {
    if (block[k] > 0) next = block[k];
    layer[k] = block[k] > 0 ? block[k] : next;
  }
  for (size_t i = 0; i < names.size() && block[i] == 0; ++i) layer[i] = 0;  // the stem
  for (size_t k = names.size(); k-- > 0 && block[k] == 0;)  // after the last block
    if (std::regex_search(names[k], joins_last, std::regex_constants::match_continuous)) layer[k] = n_blocks;
  return layer;
}

}  // namespace

std::vector<ParamGroup> param_groups(const OptimOptions& o, torch::nn::Module& module) {
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  for (const auto& kv : module.named_parameters()) {
    if (!kv.value().requires_grad()) continue;
    names.push_back(kv.key());
    params.push_back(kv.value());
  }
  const auto* model = dynamic_cast<const models::Model*>(&module);
  const bool layered = o.layer_decay > 0 && o.layer_decay < 1;
  std::vector<int64_t> layer(names.size(), -1);
  int64_t last = 0;
  if (layered) {
    DLRUN_CHECK_INPUT(model != nullptr, "optim.layer_decay: the module is not one of dlrun's models");
    layer = layers_of(names, *model, last);
    DLRUN_CHECK_INPUT(last > 1, "optim.layer_decay: no parameter of the model lies in one of its blocks ({})",
                      model->block_pattern());
  }
  const std::string nod = model != nullptr ? model->no_decay_pattern() : "";
  const std::regex embedding = compile(nod.empty() ? "$^" : nod, "no-decay");

  std::map<std::pair<int64_t, bool>, ParamGroup> by_key;  // (layer, no decay) in that order
  for (size_t i = 0; i < names.size(); ++i) {
    const auto& p = params[i];
    const bool plain = o.no_decay_norm_bias &&
                       (p.dim() <= 1 || ends_with(names[i], ".bias") || std::regex_search(names[i], embedding));
    auto& g = by_key[{layer[i], plain}];
    if (g.names.empty()) {
      g.layer = layer[i];
      g.name = (layered ? "layer_" + std::to_string(layer[i]) + "." : std::string()) + (plain ? "no_decay" : "decay");
      g.weight_decay = plain ? 0.0 : o.weight_decay;
      g.lr_scale = layered ? std::pow(o.layer_decay, static_cast<double>(last - layer[i])) : 1.0;
    }
    g.names.push_back(names[i]);
    g.params.push_back(p);
  }
  std::vector<ParamGroup> out;
  for (auto& kv : by_key) out.push_back(std::move(kv.second));
  if (out.empty()) out.push_back(ParamGroup{"decay", -1, o.weight_decay, 1.0, {}, {}});
  return out;
}

}  // namespace dlrun::train
