// Two checkpoints compared part by part (see checkpoint_diff.h).
#include "train/state/checkpoint_diff.h"

#include <nlohmann/json.hpp>

#include "base/fsutil.h"
#include "checkpoint/tensor_file.h"
#include "train/state/parts.h"

namespace dlrun::train {
namespace {

bool tensors_equal(const std::string& x, const std::string& y) {
  if (fsutil::path_exists(x) != fsutil::path_exists(y)) return false;
  if (!fsutil::path_exists(x)) return true;
  const auto tx = ckpt::load_tensor_file(x), ty = ckpt::load_tensor_file(y);
  if (tx.size() != ty.size()) return false;
  for (size_t i = 0; i < tx.size(); ++i)
    if (tx[i].first != ty[i].first || !tx[i].second.sizes().equals(ty[i].second.sizes()) ||
        tx[i].second.scalar_type() != ty[i].second.scalar_type() || !torch::equal(tx[i].second, ty[i].second))
      return false;
  return true;
}

/// The tensor files of `dir` a stem names: "<stem>.pt", or for "rng-rank" every rank's.
std::vector<std::string> files_of(const std::string& dir, const std::string& stem) {
  if (stem != "rng-rank") return {stem + ".pt"};
  std::vector<std::string> out;
  for (const auto& name : fsutil::list_names(dir))
    if (name.rfind(stem, 0) == 0) out.push_back(name);
  return out;
}

nlohmann::json state_of(const std::string& dir) {
  const std::string path = dir + "/state.json";
  return fsutil::path_exists(path) ? nlohmann::json::parse(fsutil::read_file(path), nullptr, false) : nlohmann::json();
}

}  // namespace

PartsCompared compare_checkpoints(const std::string& a, const std::string& b) {
  PartsCompared out;
  const nlohmann::json sa = state_of(a), sb = state_of(b);
  auto value = [](const nlohmann::json& s, const std::string& key) {
    return s.is_object() ? s.value(key, nlohmann::json()) : nlohmann::json();
  };
  for (const PartLayout& part : part_layouts()) {
    bool present = false, equal = true;
    for (const std::string& stem : part.tensor_files) {
      auto names = files_of(a, stem);
      for (const auto& other : files_of(b, stem))
        if (std::find(names.begin(), names.end(), other) == names.end()) names.push_back(other);
      for (const auto& name : names) {
        present = present || fsutil::path_exists(a + "/" + name) || fsutil::path_exists(b + "/" + name);
        equal = equal && tensors_equal(a + "/" + name, b + "/" + name);
      }
    }
    for (const std::string& key : part.keys) {
      present = present || !value(sa, key).is_null() || !value(sb, key).is_null();
      equal = equal && value(sa, key) == value(sb, key);
    }
    if (part.optional && !present) continue;
    (equal ? out.same : out.differ).push_back(part.label);
  }
  return out;
}

}  // namespace dlrun::train
