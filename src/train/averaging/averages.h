// The run's weight averages as one collaborator, and the registry that makes them from the
// config. The loop asks the collection (epoch ends, a fresh start, the end of training), the
// step runner gets its riders (hooks()), the evaluations and the checkpoint parts go through
// all(); none of them names an average. The registry (averages.cpp) is the one list of the
// averages dlrun knows: a name, the config key that turns it on, and its factory.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/options.h"
#include "train/averaging/weight_average.h"

namespace dlrun::train {

class Averages {
 public:
  Averages() = default;
  explicit Averages(std::vector<std::unique_ptr<WeightAverage>> all);
  Averages(Averages&&) noexcept;
  Averages& operator=(Averages&&) noexcept;
  ~Averages();

  /// Every average, in registry order.
  std::vector<WeightAverage*> all() const;
  /// What rides along each optimizer step (StepRunner's hooks).
  std::vector<StepHook*> hooks() const;
  /// The end of epoch `epoch` (0-based), after step `step`.
  void at_epoch_end(int64_t epoch, int64_t step);
  /// A fresh start: every average begins from the weights every rank now holds.
  void restart();
  /// Training ends: each average's finish() (WeightAverage). Whether any changed its average;
  /// nullopt when `stop` cut one short.
  std::optional<bool> finish(const LoaderMaker& train_as_eval, const std::function<bool()>& stop);
  /// summary.json's entries: "<name>": the average's summary, or null for each average of the
  /// registry the run does not keep.
  nlohmann::json summary() const;

 private:
  std::vector<std::unique_ptr<WeightAverage>> all_;
};

/// Builds a model like the run's: the same options, device and flags, in eval mode.
using ModelCopy = std::function<std::shared_ptr<models::Model>()>;

/// One kind of average dlrun can keep.
struct AverageKind {
  const char* name;     ///< WeightAverage::name()
  const char* setting;  ///< the config key that turns it on ("train.ema_decay")
  const char* what;     ///< what a person calls it
  std::function<bool(const Config&)> wanted;
  std::function<std::unique_ptr<WeightAverage>(const Config&, models::Model&, std::shared_ptr<models::Model>)> make;
};

/// The registry: every kind, in the order the averages are updated, saved and evaluated.
const std::vector<AverageKind>& average_kinds();

/// The averages `cfg` asks for, over `model` (the run's weights), each in a copy from `copy`.
Averages build_averages(const Config& cfg, models::Model& model, const ModelCopy& copy);

}  // namespace dlrun::train
