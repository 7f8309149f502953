// The checkpointer against a fake writer and a fake clock (src/train/state/checkpointer.h): when a
// save is due (every_minutes: auto measures the first save, then follows Young and Daly), what
// checkpoint.on_error does with a failed periodic save, and that the final and the preemption
// save fail the run whatever the policy.
#include <catch2/catch.hpp>

#include <cmath>

#include "base/error.h"
#include "checkpoint/checkpoint.h"
#include "config/loader.h"
#include "distributed/replicas.h"
#include "support/errors.h"
#include "support/events.h"
#include "train/state/checkpointer.h"

using namespace dlrun;
using train::Boundary;
using train::SaveReason;

namespace {

/// Records what it is asked to write; fails a save or a wait on request.
class FakeWriter : public ckpt::SnapshotWriter {
 public:
  int saves = 0, waits = 0;
  bool fail_save = false, fail_wait = false;
  Stats committed;
  void save(ckpt::Snapshot snap) override {
    ++saves;
    if (fail_save) throw Error(ExitCode::kRuntime, "No space left on device (injected)");
    committed = {snap.step, "ckpt/step-" + std::to_string(snap.step), 0, 0};
  }
  void wait() override {
    ++waits;
    if (fail_wait) throw Error(ExitCode::kRuntime, "I/O error (injected)");
  }
  Stats last() const override { return committed; }
  void on_commit(std::function<void(const Stats&)>) override {}
  void in_use(std::function<std::vector<std::string>()>) override {}
};

struct Rig {
  Config cfg;
  std::vector<metrics::Event> events;
  metrics::Reporter report;
  dist::Replicas replicas;
  double now = 1000;  // the fake monotonic clock, seconds
  FakeWriter* writer = nullptr;
  std::unique_ptr<train::Checkpointer> ckpt;
  explicit Rig(const std::vector<std::string>& overrides)
      : cfg(config::load_text("model: {name: mlp}\ndata: {name: synthetic}\n", "rig.yaml", overrides)),
        replicas(nullptr, cfg, torch::kCPU) {
    report.add(std::make_unique<dlrun::testing::EventLog>(&events));
    ckpt = std::make_unique<train::Checkpointer>(cfg, "ckpt", report, replicas, [this] { return now; });
    auto w = std::make_unique<FakeWriter>();
    writer = w.get();
    ckpt->open(std::nullopt, false, std::move(w));
    ckpt->start();
  }
  /// A save whose snapshot copy takes `copy_s` of the fake clock.
  void save(SaveReason why, int64_t step, double copy_s = 0.5, bool sync = false) {
    ckpt->save(why, sync, step, [&]() -> std::optional<ckpt::Snapshot> {
      now += copy_s;
      ckpt::Snapshot s;
      s.step = step;
      return s;
    });
  }
  const metrics::Event& last(const std::string& kind) const {
    for (auto it = events.rbegin(); it != events.rend(); ++it)
      if (it->kind == kind) return *it;
    FAIL("no " << kind << " event");
    return events.back();
  }
  int count(const std::string& kind) const { return static_cast<int>(dlrun::testing::of_kind(events, kind).size()); }
};

Boundary boundary(int64_t step) { return {step, 0, 1000, false}; }

}  // namespace

TEST_CASE("every_minutes: auto saves at once to measure, then every sqrt(2 x cost x MTBF)", "[train][checkpointer]") {
  Rig r({"checkpoint.every_minutes=auto", "preemption.mtbf_hours=2"});
  r.now += 1;  // one step later
  CHECK(r.ckpt->due(boundary(1)) == SaveReason::kEveryMinutes);  // the save cost is not known yet: measure it
  r.save(SaveReason::kEveryMinutes, 1, /*copy_s=*/2.0);
  REQUIRE(r.writer->saves == 1);
  CHECK(r.ckpt->saved(1));
  REQUIRE(r.count("checkpoint") == 1);
  CHECK(r.events.back().scalars[1].first == "stall_s");
  CHECK(r.events.back().scalars[1].second == Approx(2.0));
  // sqrt(2 x 2 s x 7200 s) = 169.7 s = 2.83 minutes
  const double minutes = std::sqrt(2.0 * 2.0 * 7200.0) / 60.0;
  r.now += minutes * 60 - 1;
  CHECK(r.ckpt->due(boundary(2)) == SaveReason::kNone);
  REQUIRE(r.count("checkpoint_interval") == 1);
  CHECK(r.events.back().scalars[0].second == Approx(minutes));
  r.now += 2;
  CHECK(r.ckpt->due(boundary(3)) == SaveReason::kEveryMinutes);
}

TEST_CASE("a failed periodic save with on_error: continue is reported and training goes on", "[train][checkpointer]") {
  Rig r({"checkpoint.on_error=continue", "checkpoint.async=false"});
  r.save(SaveReason::kEverySteps, 5);
  r.writer->fail_save = true;
  r.save(SaveReason::kEverySteps, 10);  // does not throw
  CHECK_FALSE(r.ckpt->saved(10));
  REQUIRE(r.count("checkpoint_error") == 1);
  const auto& err = r.events.back();
  CHECK(err.kind == "checkpoint_error");
  CHECK(err.fields["reason"] == "periodic");
  CHECK(err.fields["last_committed"] == "ckpt/step-5");
  CHECK(r.count("checkpoint") == 1);  // only the save that worked
  const auto s = r.ckpt->summary();
  CHECK(s["checkpoint_errors"] == 1);
  CHECK(s["checkpoint"] == "ckpt/step-5");
  CHECK(s["remote"].is_null());
  // The end saves again (the failed step is not taken as saved), and that one must work.
  CHECK(r.ckpt->final_due(10));
}

TEST_CASE("a failed periodic save with on_error: stop ends the run (exit 1)", "[train][checkpointer]") {
  Rig r({"checkpoint.on_error=stop", "checkpoint.async=false"});
  r.writer->fail_save = true;
  dlrun::testing::require_error([&] { r.save(SaveReason::kEverySteps, 10); },
                                {"the periodic checkpoint could not be written", "No space left", "last committed "
                                                                                                    "checkpoint, none"},
                                ExitCode::kRuntime);
  CHECK(r.count("checkpoint_error") == 1);
}

TEST_CASE("the final and the preemption save fail the run whatever on_error says", "[train][checkpointer]") {
  for (const auto why : {SaveReason::kEnd, SaveReason::kPreemption}) {
    Rig r({"checkpoint.on_error=continue"});
    r.writer->fail_wait = true;  // the background write fails: a synchronous save waits for it
    dlrun::testing::require_error([&] { r.save(why, 20, 0.5, /*sync=*/true); },
                                  {std::string("the ") + train::name_of(why) + " checkpoint could not be written",
                                   "I/O error"},
                                  ExitCode::kRuntime);
    CHECK(r.count("checkpoint_error") == 1);
    CHECK(r.events.back().fields["reason"] == train::name_of(why));
  }
}

TEST_CASE("an async periodic write that failed surfaces at the next save as periodic", "[train][checkpointer]") {
  Rig r({"checkpoint.on_error=continue", "checkpoint.async=true"});
  r.writer->fail_save = true;  // the writer rethrows the previous background write's failure here
  r.save(SaveReason::kEpochEnd, 16);
  REQUIRE(r.count("checkpoint_error") == 1);
  CHECK(r.last("checkpoint_error").fields["reason"] == "periodic");
  // The save that was queued stands: async writes report an earlier write's failure.
  CHECK(r.ckpt->saved(16));
  // Waiting for it at a stop fails the run.
  r.writer->fail_wait = true;
  dlrun::testing::require_error([&] { r.ckpt->wait_written(SaveReason::kPreemption, 16); }, {"preemption checkpoint"},
                                ExitCode::kRuntime);
}

TEST_CASE("periodic saves failing max_failed_saves times in a row stop the run, saying what is at risk",
          "[train][checkpointer]") {
  Rig r({"checkpoint.on_error=continue", "checkpoint.async=false", "checkpoint.max_failed_saves=3"});
  r.save(SaveReason::kEverySteps, 5);
  r.writer->fail_save = true;
  r.save(SaveReason::kEverySteps, 10);
  r.save(SaveReason::kEverySteps, 15);
  r.writer->fail_save = false;  // a commit in between starts the count again
  r.save(SaveReason::kEverySteps, 20);
  r.writer->fail_save = true;
  r.save(SaveReason::kEverySteps, 25);
  r.now += 120;
  r.save(SaveReason::kEverySteps, 30);
  r.now += 60;
  dlrun::testing::require_error([&] { r.save(SaveReason::kEverySteps, 35); },
                                {"3 periodic checkpoints in a row could not be written", "checkpoint.max_failed_saves",
                                 "At risk: 15 steps of training since the last committed checkpoint (ckpt/step-20)",
                                 "failing for 3.0 minutes", "No space left"},
                                ExitCode::kRuntime);
  CHECK(r.count("checkpoint_error") == 5);
  Rig unlimited({"checkpoint.on_error=continue", "checkpoint.async=false", "checkpoint.max_failed_saves=0"});
  unlimited.writer->fail_save = true;
  for (int64_t step = 5; step <= 100; step += 5) unlimited.save(SaveReason::kEverySteps, step);
  CHECK(unlimited.count("checkpoint_error") == 20);
}

TEST_CASE("an earlier save's failure learnt during a preemption save does not end the run by the limit",
          "[train][checkpointer]") {
  // Async writes: a failure surfaces at the next save. When that next save is the preemption's,
  // its own outcome decides (75 when it commits), not the count of failed periodic saves.
  Rig r({"checkpoint.on_error=continue", "checkpoint.max_failed_saves=2"});
  r.save(SaveReason::kEverySteps, 5);
  r.writer->fail_save = true;
  r.save(SaveReason::kEverySteps, 10);  // the failure of an earlier write: one
  r.save(SaveReason::kPreemption, 12, 0.5, /*sync=*/true);  // two, learnt by the stop's save: no throw
  CHECK(r.ckpt->saved(12));
  CHECK(r.count("checkpoint_error") == 2);
}
