// The step meter (src/train/observe/step_meter.h): skipped updates decided on the device are counted
// when the host reads anyway, once each, with one `skip` event per read; the metrics line's
// loss_avg leaves them out; a non-finite step under train.nonfinite: stop fails the run.
#include <catch2/catch.hpp>

#include "config/loader.h"
#include "distributed/replicas.h"
#include "models/model.h"
#include "run/state.h"
#include "support/errors.h"
#include "support/events.h"
#include "train/observe/step_meter.h"
#include "train/step/optim.h"
#include "train/step/step.h"

using namespace dlrun;

namespace {

struct Rig {
  Config cfg;
  std::shared_ptr<models::Model> model;
  std::unique_ptr<torch::optim::Optimizer> optim;
  std::unique_ptr<train::StepRunner> runner;
  train::TrainState st;
  std::vector<metrics::Event> events;
  metrics::Reporter report;
  dist::Replicas replicas;
  std::unique_ptr<train::StepMeter> meter;
  explicit Rig(const std::vector<std::string>& overrides)
      : cfg(config::load_text("model: {name: mlp, hidden: [4], num_classes: 3}\ndata: {name: synthetic}\n"
                              "log: {progress: none}\n",
                              "rig.yaml", overrides)),
        replicas(nullptr, cfg, torch::kCPU) {
    model = models::build(cfg.model, 1, 28);
    optim = train::build_optimizer(cfg.optim, *model);
    runner = std::make_unique<train::StepRunner>(cfg.train, cfg.amp, *model, *optim, torch::kCPU);
    report.add(std::make_unique<dlrun::testing::EventLog>(&events));
    meter = std::make_unique<train::StepMeter>(cfg, torch::kCPU, *runner, st, report, true);
    meter->begin(0);
  }
  /// One step's result as the device would give it.
  void step(double loss, bool skipped, bool nonfinite = false) {
    train::StepResult r;
    r.loss = torch::tensor(loss, torch::kFloat64);
    r.nonfinite = torch::tensor(nonfinite);
    r.skipped = torch::tensor(skipped);
    st.step += 1;
    meter->record(r, st.step, 0.1);
  }
  std::vector<metrics::Event> of(const std::string& kind) const { return dlrun::testing::of_kind(events, kind); }
};

double scalar(const metrics::Event& e, const std::string& name) {
  for (const auto& [n, v] : e.scalars)
    if (n == name) return v;
  FAIL("no scalar " << name);
  return 0;
}

}  // namespace

TEST_CASE("skipped steps are counted at the next read, once, with one skip event", "[train][meter]") {
  Rig r({"train.nonfinite=skip"});
  r.step(1.0, false);
  r.step(5.0, true);  // skipped: its loss is left out of loss_avg
  r.step(3.0, true);
  CHECK(r.st.skipped_steps == 0);  // nothing read yet
  CHECK(r.of("skip").empty());
  r.meter->log(0, r.replicas);
  CHECK(r.st.skipped_steps == 2);
  const auto skips = r.of("skip");
  REQUIRE(skips.size() == 1);
  CHECK(skips[0].fields["steps"] == 2);
  CHECK(skips[0].fields["skipped_steps"] == 2);
  CHECK(skips[0].step == 3);
  const auto train = r.of("train");
  REQUIRE(train.size() == 1);
  CHECK(scalar(train[0], "loss") == 3.0);      // the latest step's loss, skipped or not
  CHECK(scalar(train[0], "loss_avg") == 1.0);  // over the applied steps alone
  // Settled: a second read counts nothing again.
  r.meter->settle_skips();
  r.meter->check_finite();
  CHECK(r.st.skipped_steps == 2);
  CHECK(r.of("skip").size() == 1);
  // The next window starts from zero; a later skip is counted on its own.
  r.step(2.0, false);
  r.step(4.0, true);
  r.meter->check_finite();  // a save or the end reads too
  CHECK(r.st.skipped_steps == 3);
  REQUIRE(r.of("skip").size() == 2);
  CHECK(r.of("skip")[1].fields["steps"] == 1);
  CHECK(r.meter->totals().samples == 5 * r.cfg.data.batch_size);
}

TEST_CASE("a window of skipped steps alone has no loss_avg", "[train][meter]") {
  Rig r({"train.nonfinite=skip"});
  r.step(7.0, true);
  r.meter->log(0, r.replicas);
  CHECK(std::isnan(scalar(r.of("train").at(0), "loss_avg")));
}

TEST_CASE("a non-finite step under train.nonfinite: stop fails the run at the next read", "[train][meter]") {
  Rig r({"train.nonfinite=stop"});
  r.step(1.0, false);
  r.step(NAN, false, /*nonfinite=*/true);
  r.step(2.0, false);
  dlrun::testing::require_error([&] { r.meter->check_finite(); }, {"step 2:", "not finite"}, ExitCode::kRuntime);
  dlrun::testing::require_error([&] { r.meter->log(0, r.replicas); }, {"step 2:"}, ExitCode::kRuntime);
}
