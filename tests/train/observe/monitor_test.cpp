// The evaluations' verdicts (src/train/observe/monitor.h): the best by checkpoint.keep_best's metric,
// train.early_stop with patience and min_delta, and the state a checkpoint carries, so that a
// resumed monitor decides as the one it continues.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "base/error.h"
#include "train/observe/monitor.h"

using namespace dlrun;

namespace {

nlohmann::json result(double acc, double loss) { return {{"accuracy", acc}, {"top5", 1.0}, {"loss", loss}}; }

train::Monitor make(EvalMetric keep_best, EvalMetric early_stop, int64_t patience = 2, double min_delta = 0) {
  CheckpointOptions c;
  c.keep_best = keep_best;
  TrainOptions t;
  t.early_stop = early_stop;
  t.early_stop_patience = patience;
  t.early_stop_min_delta = min_delta;
  return train::Monitor(c, t);
}

}  // namespace

TEST_CASE("monitor: the best by accuracy (higher) or loss (lower); a tie is not an improvement", "[train][monitor]") {
  auto m = make(EvalMetric::kAccuracy, EvalMetric::kNone);
  std::vector<bool> best;
  const std::vector<double> accs = {0.5, 0.7, 0.7, 0.6, 0.8};
  for (size_t i = 0; i < accs.size(); ++i) best.push_back(m.observe(10 * (i + 1), result(accs[i], 1.0)).best);
  CHECK(best == std::vector<bool>{true, true, false, false, true});
  CHECK(m.best_summary("/r/checkpoints/step-00000050") ==
        nlohmann::json({{"metric", "accuracy"}, {"value", 0.8}, {"step", 50}, {"checkpoint", "/r/checkpoints/step-00000050"}}));
  auto l = make(EvalMetric::kLoss, EvalMetric::kNone);
  CHECK(l.observe(1, result(0, 2.0)).best);
  CHECK(l.observe(2, result(0, 1.5)).best);
  CHECK_FALSE(l.observe(3, result(0, 1.7)).best);
  CHECK_FALSE(l.observe(4, result(0, std::numeric_limits<double>::quiet_NaN())).best);  // a NaN loss is never best
  CHECK_FALSE(make(EvalMetric::kNone, EvalMetric::kNone).observe(1, result(1, 0)).best);
  CHECK(make(EvalMetric::kNone, EvalMetric::kNone).best_summary("").is_null());
}

TEST_CASE("monitor: early stopping after `patience` evaluations without an improvement over min_delta",
          "[train][monitor]") {
  auto m = make(EvalMetric::kNone, EvalMetric::kLoss, /*patience=*/2, /*min_delta=*/0.1);
  CHECK_FALSE(m.observe(10, result(0, 1.0)).stop);
  CHECK_FALSE(m.observe(20, result(0, 0.95)).stop);  // better by 0.05 < min_delta: one bad evaluation
  CHECK_FALSE(m.observe(30, result(0, 0.85)).stop);  // better by 0.15: the count starts again
  CHECK_FALSE(m.observe(40, result(0, 0.9)).stop);
  CHECK_FALSE(m.stopped());
  CHECK(m.observe(50, result(0, 0.8)).stop);  // 0.05 better than 0.85: the second bad evaluation
  CHECK(m.stopped());
  CHECK(m.stopped_at() == 50);
  CHECK_FALSE(m.observe(60, result(0, 0.1)).stop);  // stopped once
  const auto s = m.early_stop_summary();
  CHECK(s["best"] == 0.85);
  CHECK(s["best_step"] == 30);
  CHECK(s["stopped_at"] == 50);
}

TEST_CASE("monitor: its state round-trips, and a resumed monitor decides as the one it continues", "[train][monitor]") {
  auto a = make(EvalMetric::kAccuracy, EvalMetric::kAccuracy, 3);
  a.observe(10, result(0.6, 1));
  a.observe(20, result(0.5, 1));
  auto b = make(EvalMetric::kAccuracy, EvalMetric::kAccuracy, 3);
  b.load_state(nlohmann::json::parse(a.state().dump()));
  CHECK(b.state() == a.state());
  for (int64_t step : {30, 40}) {
    const auto va = a.observe(step, result(0.55, 1)), vb = b.observe(step, result(0.55, 1));
    CHECK(va.best == vb.best);
    CHECK(va.stop == vb.stop);
  }
  CHECK(a.stopped());
  CHECK(b.stopped());
  CHECK(b.stopped_at() == 40);
  // An older checkpoint has no monitor: a fresh one. A malformed one is exit 2.
  auto c = make(EvalMetric::kAccuracy, EvalMetric::kNone);
  c.load_state(nullptr);
  CHECK(c.observe(1, result(0.1, 1)).best);
  CHECK_THROWS_AS(c.load_state({{"best", 3}}), Error);
}
