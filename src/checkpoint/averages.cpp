// A checkpoint's averages of the weights (see averages.h).
#include "checkpoint/averages.h"

#include "base/json_limits.h"

namespace dlrun::ckpt {

std::vector<AverageInCheckpoint> averages_in(const nlohmann::json& state, const std::vector<std::string>& stems) {
  std::vector<AverageInCheckpoint> out;
  if (!state.is_object()) return out;
  for (const std::string& stem : stems) {
    const auto it = state.find(stem);
    if (it == state.end() || !it->is_object()) continue;  // model.pt's "model" is a name, optim.pt has none
    const nlohmann::json& j = *it;
    AverageInCheckpoint a;
    a.name = stem;
    const auto what = j.find("what");
    a.what = what != j.end() && what->is_string() ? what->get<std::string>() : "average";
    const auto ready = j.find("ready");
    if (ready != j.end() && ready->is_boolean()) {
      a.ready = ready->get<bool>();
    } else if (j.contains("bn_updates")) {  // written before "ready": a stochastic weight average
      const auto updates = json_int64(j.value("updates", nlohmann::json()));
      a.ready = updates && *updates > 0 && json_int64(j.value("bn_updates", nlohmann::json())) == updates;
    }
    if (!a.ready) {
      const auto pending = j.find("pending");
      a.pending = pending != j.end() && pending->is_string()
                      ? pending->get<std::string>()
                      : "its BatchNorm statistics are not those of the average yet (they are recomputed when the run "
                        "ends)";
    }
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace dlrun::ckpt
