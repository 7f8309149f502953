// Carrying a run across an interruption without a full training run: a snapshot restores
// model, optimizer and position exactly; incompatible checkpoints are refused; changed keys
// are named; --resume never/auto/PATH decide before anything is written.
#include <catch2/catch.hpp>

#include "base/fsutil.h"
#include "checkpoint/checkpoint.h"
#include "config/loader.h"
#include "support/capture.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/scratch_dir.h"
#include "train/optim.h"
#include "train/resume.h"

using namespace dlrun;
using dlrun::testing::ScratchDir;

namespace {

Config tiny(const std::vector<std::string>& overrides = {}) {
  return config::load_text("model: {name: mlp, hidden: [8], num_classes: 3}\ndata: {name: synthetic}\n"
                           "optim: {name: sgd, lr: 0.05}\n",
                           "tiny.yaml", overrides);
}

struct Live {
  Config cfg;
  std::shared_ptr<models::Model> model;
  std::unique_ptr<torch::optim::Optimizer> optim;
  train::GradScaler scaler{AmpOptions{}, false};
  explicit Live(Config c, uint64_t seed = 1) : cfg(std::move(c)) {
    model = models::build(cfg.model, seed, 28);
    optim = train::build_optimizer(cfg.optim, *model);
  }
  void train_a_step() {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
    optim->zero_grad();
    torch::nn::functional::cross_entropy(model->forward(torch::randn({4, 1, 28, 28}, gen)),
                                         torch::randint(0, 3, {4}, gen))
        .backward();
    optim->step();
  }
};

bool same_state(models::Model& a, models::Model& b) {
  const auto x = models::state_dict(a), y = models::state_dict(b);
  for (size_t i = 0; i < x.size(); ++i)
    if (!torch::equal(x[i].second, y[i].second)) return false;
  return true;
}

}  // namespace

TEST_CASE("a snapshot restores model, optimizer and position exactly", "[train][resume]") {
  Live a(tiny());
  a.train_a_step();
  train::TrainState st;
  st.step = 12, st.epoch = 1, st.cursor = 256, st.skipped_steps = 2, st.steps_lost_total = 3;
  const auto snap = train::make_snapshot(a.cfg, *a.model, *a.optim, a.scaler, st, 100, torch::kCPU);
  CHECK(snap.state["optimizer"] == "sgd");

  Live b(tiny(), /*seed=*/2);
  REQUIRE_FALSE(same_state(*a.model, *b.model));
  train::TrainState back;
  train::restore(snap, b.cfg, *b.model, *b.optim, b.scaler, back, 100, torch::kCPU);
  CHECK(same_state(*a.model, *b.model));
  CHECK(back.step == 12);
  CHECK(back.epoch == 1);
  CHECK(back.cursor == 256);
  CHECK(back.skipped_steps == 2);
  CHECK(back.steps_lost_total == 3);
  CHECK(back.resumed_from_step == 12);
  // The optimizer continues identically: one more step on each gives the same weights.
  a.train_a_step();
  b.train_a_step();
  CHECK(same_state(*a.model, *b.model));
}

TEST_CASE("a different architecture or optimizer is refused, naming the difference", "[train][resume]") {
  Live a(tiny());
  const auto snap = train::make_snapshot(a.cfg, *a.model, *a.optim, a.scaler, {}, 100, torch::kCPU);
  Live wider(tiny({"model.hidden=[16]"}));
  train::TrainState st;
  dlrun::testing::require_error(
      [&] { train::restore(snap, wider.cfg, *wider.model, *wider.optim, wider.scaler, st, 100, torch::kCPU); },
      {"different model architecture", "layers.0.weight:[8,784]", "layers.0.weight:[16,784]"});
  Live adam(tiny({"optim.name=adamw"}));
  dlrun::testing::require_error(
      [&] { train::restore(snap, adam.cfg, *adam.model, *adam.optim, adam.scaler, st, 100, torch::kCPU); },
      {"optim.name=sgd", "optim.name=adamw"});
}

TEST_CASE("a changed config is named key by key when resuming", "[train][resume]") {
  Live a(tiny());
  const auto snap = train::make_snapshot(a.cfg, *a.model, *a.optim, a.scaler, {}, 100, torch::kCPU);
  {
    Live same(tiny());
    train::TrainState st;
    const std::string err = dlrun::testing::capture_stderr(
        [&] { train::restore(snap, same.cfg, *same.model, *same.optim, same.scaler, st, 100, torch::kCPU); });
    CHECK(err.find("differs from the checkpoint") == std::string::npos);
  }
  Live changed(tiny({"optim.lr=0.1", "run.seed=4", "log.every_steps=5"}));
  train::TrainState st;
  const std::string err = dlrun::testing::capture_stderr(
      [&] { train::restore(snap, changed.cfg, *changed.model, *changed.optim, changed.scaler, st, 100, torch::kCPU); });
  CHECK_THAT(err, Catch::Contains("differs from the checkpoint's in 3 key(s)"));
  CHECK_THAT(err, Catch::Contains("run.seed: 0 -> 4"));
  CHECK_THAT(err, Catch::Contains("optim.lr: 0.05 -> 0.1"));
  CHECK_THAT(err, Catch::Contains("log.every_steps: 50 -> 5 (does not change results)"));
  CHECK_THAT(err, Catch::Contains("run.seed changed") && Catch::Contains("not an exact continuation"));
}

TEST_CASE("resume never refuses to mix runs unless forced", "[train][resume]") {
  ScratchDir t;
  train::RunDir dir(t.str());
  CHECK_FALSE(train::plan_resume("never", false, dir).set_aside);  // nothing there: a fresh start
  t.write("metrics.jsonl", "{\"step\": 4}\n");
  dlrun::testing::require_error([&] { train::plan_resume("never", false, dir); },
                                {"already holds a run", "metrics.jsonl", "--force"});
  CHECK(train::plan_resume("never", true, dir).set_aside);
  CHECK(dlrun::fsutil::is_regular_file(t / "metrics.jsonl"));  // planning writes nothing
}

TEST_CASE("resume auto takes the newest checkpoint that loads; a PATH must verify", "[train][resume]") {
  ScratchDir t;
  train::RunDir dir(t.str());
  CHECK_FALSE(train::plan_resume("auto", false, dir).from);
  Live a(tiny());
  train::TrainState st;
  for (int64_t step : {5, 10}) {
    st.step = step;
    ckpt::commit(train::make_snapshot(a.cfg, *a.model, *a.optim, a.scaler, st, 100, torch::kCPU), dir.checkpoints());
  }
  dlrun::testing::flip_byte(dir.checkpoints() + "/step-00000010/model.pt", 300);
  std::string err;
  std::optional<ckpt::Loaded> from;
  err = dlrun::testing::capture_stderr([&] { from = train::plan_resume("auto", false, dir).from; });
  REQUIRE(from);
  CHECK(from->snapshot.step == 5);
  CHECK_THAT(err, Catch::Contains("skipping checkpoint " + dir.checkpoints() + "/step-00000010"));
  CHECK(dlrun::fsutil::is_directory(dir.checkpoints() + "/step-00000010"));  // reported, not deleted
  CHECK(train::plan_resume(dir.checkpoints() + "/step-00000005", false, dir).from->snapshot.step == 5);
  dlrun::testing::require_error([&] { train::plan_resume(t / "nope", false, dir); }, {"nope", "does not verify"});
  dlrun::testing::require_error([&] { train::plan_resume(dir.checkpoints() + "/step-00000010", false, dir); },
                                {"model.pt: SHA-256 mismatch"});
}
