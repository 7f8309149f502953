// The averages of the weights a checkpoint holds (an exponential moving average, a stochastic
// weight average, ...), read from the checkpoint itself: each average's part writes its tensors
// as <name>.pt and its state.json entry "<name>" with "what" it is and whether it is "ready"
// (train/averaging/weight_average.h). So `dlrun eval`, `dlrun export --weights NAME` and
// model.init need no list of the averages dlrun knows, and an average added later is read by
// them as it is.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace dlrun::ckpt {

struct AverageInCheckpoint {
  std::string name;     ///< <name>.pt, state.json "<name>"
  std::string what;     ///< what a person calls it ("moving average"), or "average"
  bool ready = true;    ///< it may be evaluated or exported as it is
  std::string pending;  ///< when not ready: why, for a person
};

/// The averages among a checkpoint's tensor files (`stems`: "model", "optim", "ema", ...): each
/// stem whose state.json (`state`) has an object of the same name. Checkpoints written before
/// the entries said "what" and "ready": an entry with "bn_updates" is ready once it equals its
/// "updates" (the stochastic weight average's BatchNorm pass), any other is ready.
std::vector<AverageInCheckpoint> averages_in(const nlohmann::json& state, const std::vector<std::string>& stems);

}  // namespace dlrun::ckpt
