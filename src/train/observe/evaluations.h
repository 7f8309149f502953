// The evaluations of a training run: the periodic one (on the validation split when there is
// one, else on the evaluation split), what it decides (the Monitor: the best checkpoint, early
// stopping), and the test split's at the end when a validation split took its place. Every rank
// evaluates its share of the batches and the sums are added up, so every rank holds the same
// results and verdicts. The weights' averages (train/averaging/) are evaluated under their
// names: with every evaluation of the weights, or once at the end when ready, as each says.
// The trainer asks it; it never sees the trainer (docs/design.md, "The loop and its
// collaborators").
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>

#include "config/options.h"
#include "data/loader.h"
#include "distributed/replicas.h"
#include "metrics/sink.h"
#include "models/model.h"
#include "train/averaging/weight_average.h"
#include "train/observe/evaluate.h"
#include "train/observe/monitor.h"

namespace dlrun::train {

class Evaluations {
 public:
  /// `val`: the validation split's loader, or null. `averages`: the weights' averages, each
  /// evaluated under its name (the monitor watches the weights'). They outlive this.
  Evaluations(const Config& cfg, models::Model& model, data::Loader* eval, data::Loader* val,
              dist::Replicas& replicas, metrics::Reporter& report, std::vector<WeightAverage*> averages = {});

  /// The periodic evaluation at `step` (of `epoch`): its event ("val", or "eval" without a
  /// validation split) and the monitor's verdict. false: a stop request (on any rank) cut it
  /// short, and nothing is recorded.
  bool periodic(int64_t step, int64_t epoch);
  /// With a validation split and train.eval_at_end, the test split's evaluation ("test" event,
  /// summary.json "test"); a no-op otherwise. false: a stop request cut it short.
  bool test(int64_t step, int64_t epoch);
  /// With train.eval_at_end, the evaluation of each average evaluated at the end (the
  /// stochastic weight average, once its BatchNorm statistics are its own) that is ready, on the
  /// periodic split: an event of the average's name and the result under last()[name]. false:
  /// a stop request cut it short.
  bool at_end(int64_t step, int64_t epoch);
  /// What the last periodic evaluation decided, once (the next call returns nothing new).
  Monitor::Verdict take_verdict();

  int64_t last_step() const { return last_step_; }
  const nlohmann::json& last() const { return last_; }         ///< summary.json "eval", or null
  const nlohmann::json& test_result() const { return test_; }  ///< summary.json "test", or null
  Monitor& monitor() { return monitor_; }

 private:
  /// One pass of `model` over `loader`, summed across ranks; nullopt when a stop request cut it short.
  std::optional<EvalResult> pass(models::Model& model, data::Loader& loader);
  /// The weights' evaluation on `loader` as eval_json(), with each average evaluated with them
  /// under its name; null when a stop request cut one short.
  nlohmann::json both(data::Loader& loader, int64_t step, const std::string& split);

  const Config& cfg_;
  models::Model& model_;
  data::Loader* eval_;  ///< null when the run reads no evaluation split (config::reads_eval_split)
  data::Loader& eval_split();
  data::Loader* val_;
  dist::Replicas& replicas_;
  metrics::Reporter& report_;
  std::vector<WeightAverage*> averages_;
  Monitor monitor_;
  Monitor::Verdict verdict_;
  int64_t last_step_ = -1;
  nlohmann::json last_, test_;
};

}  // namespace dlrun::train
