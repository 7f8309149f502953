// The run's weight averages and their registry (see averages.h).
#include "train/averaging/averages.h"

#include <utility>

namespace dlrun::train {

// The factories, each defined in its average's own file.
std::unique_ptr<WeightAverage> make_ema(const Config& cfg, models::Model& model, std::shared_ptr<models::Model> copy);
std::unique_ptr<WeightAverage> make_swa(const Config& cfg, models::Model& model, std::shared_ptr<models::Model> copy);

const std::vector<AverageKind>& average_kinds() {
  static const std::vector<AverageKind> kinds = {
      {"ema", "train.ema_decay", "moving average", [](const Config& c) { return c.train.ema_decay > 0; }, make_ema},
      {"swa", "optim.swa_start_epoch", "stochastic weight average",
       [](const Config& c) { return c.optim.swa_start_epoch > 0; }, make_swa},
  };
  return kinds;
}

Averages build_averages(const Config& cfg, models::Model& model, const ModelCopy& copy) {
  std::vector<std::unique_ptr<WeightAverage>> all;
  for (const AverageKind& k : average_kinds())
    if (k.wanted(cfg)) all.push_back(k.make(cfg, model, copy()));
  return Averages(std::move(all));
}

Averages::Averages(std::vector<std::unique_ptr<WeightAverage>> all) : all_(std::move(all)) {}
Averages::Averages(Averages&&) noexcept = default;
Averages& Averages::operator=(Averages&&) noexcept = default;
Averages::~Averages() = default;

std::vector<WeightAverage*> Averages::all() const {
  std::vector<WeightAverage*> out;
  for (const auto& a : all_) out.push_back(a.get());
  return out;
}

std::vector<StepHook*> Averages::hooks() const {
  std::vector<StepHook*> out;
  for (const auto& a : all_) out.push_back(a.get());
  return out;
}

void Averages::at_epoch_end(int64_t epoch, int64_t step) {
  for (auto& a : all_) a->at_epoch_end(epoch, step);
}

void Averages::restart() {
  for (auto& a : all_) a->restart();
}

std::optional<bool> Averages::finish(const LoaderMaker& train_as_eval, const std::function<bool()>& stop) {
  bool changed = false;
  for (auto& a : all_) {
    const std::optional<bool> c = a->finish(train_as_eval, stop);
    if (!c) return std::nullopt;
    changed = changed || *c;
  }
  return changed;
}

nlohmann::json Averages::summary() const {
  nlohmann::json j = nlohmann::json::object();
  for (const AverageKind& k : average_kinds()) j[k.name] = nullptr;
  for (const auto& a : all_) j[a->name()] = a->summary();
  return j;
}

}  // namespace dlrun::train
