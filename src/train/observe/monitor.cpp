// The best checkpoint and early stopping (see monitor.h).
#include "train/observe/monitor.h"

#include <cmath>
#include <limits>

#include "base/error.h"
#include "base/json_limits.h"
#include "base/log.h"

namespace dlrun::train {

namespace {

double metric_of(EvalMetric m, const nlohmann::json& result) {
  const char* key = name_of(m);
  return result.contains(key) && result[key].is_number() ? result[key].get<double>()
                                                         : std::numeric_limits<double>::quiet_NaN();
}

nlohmann::json number_or_null(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

}  // namespace

Monitor::Monitor(const CheckpointOptions& checkpoint, const TrainOptions& train)
    : keep_best_(checkpoint.keep_best),
      early_stop_(train.early_stop),
      patience_(train.early_stop_patience),
      min_delta_(train.early_stop_min_delta) {}

bool Monitor::improves(EvalMetric metric, double value, double best, double min_delta) {
  if (!std::isfinite(value)) return false;  // a NaN loss is never the best
  if (std::isnan(best)) return true;
  return metric == EvalMetric::kLoss ? value < best - min_delta : value > best + min_delta;
}

Monitor::Verdict Monitor::observe(int64_t step, const nlohmann::json& result) {
  Verdict v;
  if (keep_best_ != EvalMetric::kNone) {
    const double x = metric_of(keep_best_, result);
    if (improves(keep_best_, x, best_.value, 0.0)) {
      best_ = {x, step};
      v.best = true;
    }
  }
  if (early_stop_ != EvalMetric::kNone && !stopped()) {
    const double x = metric_of(early_stop_, result);
    if (improves(early_stop_, x, stop_best_.value, min_delta_)) {
      stop_best_ = {x, step};
      bad_evals_ = 0;
    } else if (++bad_evals_ >= patience_) {
      stopped_at_ = step;
      v.stop = true;
      log0::info("train.early_stop: {} has not improved on {:.6g} (step {}) for {} evaluations: the run ends at "
                 "step {}",
                 name_of(early_stop_), stop_best_.value, stop_best_.step, bad_evals_, step);
    }
  }
  return v;
}

nlohmann::json Monitor::state() const {
  return {{"best", {{"value", number_or_null(best_.value)}, {"step", best_.step}}},
          {"early_stop",
           {{"value", number_or_null(stop_best_.value)},
            {"step", stop_best_.step},
            {"bad_evals", bad_evals_},
            {"stopped_at", stopped_at_}}}};
}

void Monitor::load_state(const nlohmann::json& j) {
  if (j.is_null()) return;
  try {
    auto value = [](const nlohmann::json& v) {
      return v.is_number() ? v.get<double>() : std::numeric_limits<double>::quiet_NaN();
    };
    const auto& b = j.at("best");
    const std::string what = "checkpoint state.json \"monitor\"";
    const auto& e = j.at("early_stop");
    (void)b.at("step"), (void)e.at("step"), (void)e.at("bad_evals"), (void)e.at("stopped_at");  // required
    best_ = {value(b.at("value")), json_int_or(b, "step", 0, what)};
    stop_best_ = {value(e.at("value")), json_int_or(e, "step", 0, what)};
    bad_evals_ = json_int_or(e, "bad_evals", 0, what);
    stopped_at_ = json_int_or(e, "stopped_at", 0, what);
  } catch (const nlohmann::json::exception& e) {
    fail_input("cannot resume: state.json's \"monitor\" is malformed ({})", e.what());
  }
}

nlohmann::json Monitor::best_summary(const std::string& checkpoint) const {
  if (keep_best_ == EvalMetric::kNone) return nullptr;
  return {{"metric", name_of(keep_best_)},
          {"value", number_or_null(best_.value)},
          {"step", best_.step >= 0 ? nlohmann::json(best_.step) : nlohmann::json()},
          {"checkpoint", checkpoint.empty() ? nlohmann::json() : nlohmann::json(checkpoint)}};
}

nlohmann::json Monitor::early_stop_summary() const {
  if (early_stop_ == EvalMetric::kNone) return nullptr;
  return {{"metric", name_of(early_stop_)},
          {"patience", patience_},
          {"min_delta", min_delta_},
          {"best", number_or_null(stop_best_.value)},
          {"best_step", stop_best_.step >= 0 ? nlohmann::json(stop_best_.step) : nlohmann::json()},
          {"stopped_at", stopped() ? nlohmann::json(stopped_at_) : nlohmann::json()}};
}

}  // namespace dlrun::train
