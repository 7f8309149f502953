// The part of a weight average every average shares (see weight_average.h).
#include "train/averaging/weight_average.h"

#include <utility>

#include "models/fingerprint.h"

namespace dlrun::train {

WeightAverage::WeightAverage(std::string name, std::string what, std::shared_ptr<models::Model> average)
    : name_(std::move(name)), what_(std::move(what)), average_(std::move(average)) {
  average_->eval();
}

WeightAverage::~WeightAverage() = default;

nlohmann::json WeightAverage::summary() const {
  nlohmann::json j = state();
  j["params_sha256"] = models::params_sha256(*average_);
  return j;
}

nlohmann::json WeightAverage::described_state() {
  nlohmann::json j = state();
  j["what"] = what_;
  j["ready"] = ready() != nullptr;
  if (!j["ready"].get<bool>()) j["pending"] = not_ready_reason();
  return j;
}

}  // namespace dlrun::train
