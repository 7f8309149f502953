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
#include "train/live.h"
#include "train/state/resume.h"

using namespace dlrun;
using dlrun::testing::ScratchDir;

namespace {

using Live = dlrun::testing::Live;

Config tiny(const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> all = {"data.synthetic_train_size=64", "data.synthetic_eval_size=16", "data.batch_size=16"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return config::load_text("model: {name: mlp, hidden: [8], num_classes: 10}\ndata: {name: synthetic}\n"
                           "optim: {name: sgd, lr: 0.05}\n",
                           "tiny.yaml", all);
}

void train_a_step(Live& l) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  l.optim().zero_grad();
  torch::nn::functional::cross_entropy(l.model().forward(torch::randn({4, 1, 28, 28}, gen)),
                                       torch::randint(0, 3, {4}, gen))
      .backward();
  l.optim().step();
}

bool same_state(models::Model& a, models::Model& b) {
  const auto x = models::state_dict(a), y = models::state_dict(b);
  for (size_t i = 0; i < x.size(); ++i)
    if (!torch::equal(x[i].second, y[i].second)) return false;
  return true;
}

}  // namespace

TEST_CASE("a snapshot restores model, optimizer and position exactly", "[train][resume]") {
  Live a(tiny());
  train_a_step(a);
  a.st.step = 12, a.st.skipped_steps = 2, a.st.steps_lost_total = 3;
  a.loader().seek({1, 32});
  const auto snap = a.snapshot();
  CHECK(snap.state["optimizer"] == "sgd");
  CHECK(snap.step == 12);
  CHECK(snap.epoch == 1);

  Live b(tiny({"run.seed=2"}));
  REQUIRE_FALSE(same_state(a.model(), b.model()));
  b.parts.restore(snap);
  CHECK(same_state(a.model(), b.model()));
  CHECK(b.st.step == 12);
  CHECK(b.loader().position().epoch == 1);
  CHECK(b.loader().position().cursor == 32);
  CHECK(b.st.skipped_steps == 2);
  CHECK(b.st.steps_lost_total == 3);
  CHECK(b.st.resumed_from_step == 12);
  // The optimizer continues identically: one more step on each gives the same weights.
  train_a_step(a);
  train_a_step(b);
  CHECK(same_state(a.model(), b.model()));
}

TEST_CASE("a different architecture or optimizer is refused, naming the difference", "[train][resume]") {
  Live a(tiny());
  const auto snap = a.snapshot();
  Live wider(tiny({"model.hidden=[16]"}));
  dlrun::testing::require_error([&] { wider.parts.restore(snap); },
                                {"different model architecture", "layers.0.weight:[8,784]", "layers.0.weight:[16,784]"});
  Live adam(tiny({"optim.name=adamw"}));
  dlrun::testing::require_error([&] { adam.parts.restore(snap); }, {"optim.name=sgd", "optim.name=adamw"});
}

TEST_CASE("a changed config is named key by key when resuming", "[train][resume]") {
  Live a(tiny());
  const auto snap = a.snapshot();
  {
    Live same(tiny());
    const std::string err = dlrun::testing::capture_stderr([&] { same.parts.restore(snap); });
    CHECK(err.find("differs from the checkpoint") == std::string::npos);
  }
  Live changed(tiny({"optim.lr=0.1", "run.seed=4", "log.every_steps=5"}));
  const std::string err = dlrun::testing::capture_stderr([&] { changed.parts.restore(snap); });
  CHECK_THAT(err, Catch::Contains("differs from the checkpoint's in 3 key(s)"));
  CHECK_THAT(err, Catch::Contains("run.seed: 0 -> 4"));
  CHECK_THAT(err, Catch::Contains("optim.lr: 0.05 -> 0.1"));
  CHECK_THAT(err, Catch::Contains("log.every_steps: 50 -> 5 (does not change results)"));
  CHECK_THAT(err, Catch::Contains("run.seed changed") && Catch::Contains("not an exact continuation"));
}

TEST_CASE("state.json numbers that are not integers are refused by key, never converted", "[train][resume]") {
  // A float where an integer belongs (4e74) converted to int64 is undefined behaviour; the
  // manifest's hashes do not help against a file written by hand or by another program.
  Live a(tiny());
  for (const char* key : {"step", "skipped_steps", "steps_lost_total", "epoch", "cursor", "world_size", "total_steps"}) {
    INFO(key);
    auto snap = a.snapshot();
    snap.state[key] = 4.0e74;
    Live b(tiny());
    dlrun::testing::require_error([&] { b.parts.restore(snap); }, {"checkpoint state.json", key, "must be an integer"});
  }
  auto snap = a.snapshot();
  snap.state["cursor"] = -16;
  Live c(tiny());
  dlrun::testing::require_error([&] { c.parts.restore(snap); }, {"negative data position"});
}

TEST_CASE("a cursor that is not a multiple of the new batch size is rounded down, with a warning", "[train][resume]") {
  Live a(tiny({"data.batch_size=8"}));
  a.loader().seek({0, 24});
  const auto snap = a.snapshot();
  Live b(tiny());  // batch 16
  const std::string err = dlrun::testing::capture_stderr([&] { b.parts.restore(snap); });
  CHECK_THAT(err, Catch::Contains("sample cursor 24 is not a multiple of the new batch size; continuing at 16"));
  CHECK(b.loader().position().cursor == 16);
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
  for (int64_t step : {5, 10}) {
    a.st.step = step;
    ckpt::commit(a.snapshot(), dir.checkpoints());
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

TEST_CASE("resume auto takes the checkpoint LATEST names; a rollback sets newer steps aside", "[train][resume]") {
  ScratchDir t;
  train::RunDir dir(t.str());
  Live a(tiny());
  for (int64_t step : {5, 10, 15}) {
    a.st.step = step;
    ckpt::commit(a.snapshot(), dir.checkpoints());
  }
  // A rollback to step 5 that wrote nothing yet: LATEST still names 15 ...
  auto plan = train::plan_resume(dir.checkpoints() + "/step-00000005", false, dir);
  CHECK(plan.abandon_after == 5);
  CHECK_FALSE(plan.upload_resumed);  // (no remote store)
  // ... until the run starts and sets the abandoned timeline aside: LATEST names step 5.
  const auto moved = ckpt::set_aside_after(dir.checkpoints(), 5, "20261125T000000Z");
  CHECK(moved == std::vector<std::string>{dir.checkpoints() + "/step-00000010.abandoned-20261125T000000Z",
                                          dir.checkpoints() + "/step-00000015.abandoned-20261125T000000Z"});
  CHECK(ckpt::read_latest(dir.checkpoints()) == "step-00000005");
  CHECK(train::plan_resume("auto", false, dir).from->snapshot.step == 5);
  const auto listed = ckpt::list(dir.checkpoints());
  REQUIRE(listed.size() == 3);
  CHECK_THAT(listed[1].verified.reason, Catch::Contains("abandoned timeline"));
  // The newer step is back (a crash between the rename of step-N and LATEST, say): LATEST wins.
  a.st.step = 20;
  ckpt::commit(a.snapshot(), dir.checkpoints());
  fsutil::write_file_atomic(dir.checkpoints() + "/LATEST", "step-00000005\n");
  CHECK(train::plan_resume("auto", false, dir).from->snapshot.step == 5);
  CHECK(ckpt::load_preferred(dir.checkpoints())->snapshot.step == 5);
  // LATEST naming a damaged checkpoint: the newest that loads.
  dlrun::testing::flip_byte(dir.checkpoints() + "/step-00000005/model.pt", 300);
  CHECK(ckpt::load_preferred(dir.checkpoints())->snapshot.step == 20);
  // Everything newer than step 0 set aside: no LATEST at all.
  ckpt::set_aside_after(dir.checkpoints(), 0, "x");
  CHECK_FALSE(ckpt::read_latest(dir.checkpoints()).has_value());
  CHECK_FALSE(train::plan_resume("auto", false, dir).from.has_value());
}
