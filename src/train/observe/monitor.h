// What the periodic evaluations decide: which one is the best so far by checkpoint.keep_best's
// metric (that step's checkpoint is kept as BEST, beside the rolling ones), and when
// train.early_stop ends a run that stopped improving. A pure function of the evaluation results
// it is shown, on every rank alike (the results are summed across ranks first); its state is
// part of every checkpoint (state.json "monitor"), so a resumed run decides as the run it
// continues would have. The trainer asks it; it never sees the trainer.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>

#include "config/options.h"

namespace dlrun::train {

class Monitor {
 public:
  Monitor(const CheckpointOptions& checkpoint, const TrainOptions& train);

  struct Verdict {
    bool best = false;  ///< keep this step's checkpoint as BEST (checkpoint.keep_best)
    bool stop = false;  ///< train.early_stop: no improvement in patience evaluations
  };
  /// An evaluation at `step`, {accuracy, top5, loss, ...}.
  Verdict observe(int64_t step, const nlohmann::json& result);
  /// The run was ended by early stopping (also after a resume of such a run).
  bool stopped() const { return stopped_at_ >= 0; }
  int64_t stopped_at() const { return stopped_at_; }

  /// state.json "monitor", and its inverse (a checkpoint without it: a fresh monitor).
  nlohmann::json state() const;
  void load_state(const nlohmann::json& j);
  /// summary.json "best" (null without keep_best) and "early_stop" (null without early_stop).
  nlohmann::json best_summary(const std::string& checkpoint) const;
  nlohmann::json early_stop_summary() const;

  /// Whether `value` improves on `best` by more than `min_delta` for `metric` (higher accuracy
  /// and top-5, lower loss); any value improves on none (best NaN).
  static bool improves(EvalMetric metric, double value, double best, double min_delta);

 private:
  struct Track {
    double value = std::numeric_limits<double>::quiet_NaN();  ///< the best so far
    int64_t step = -1;                                        ///< where it was reached
  };
  EvalMetric keep_best_, early_stop_;
  int64_t patience_;
  double min_delta_;
  Track best_, stop_best_;
  int64_t bad_evals_ = 0;  ///< evaluations since stop_best_ improved
  int64_t stopped_at_ = -1;
};

}  // namespace dlrun::train
