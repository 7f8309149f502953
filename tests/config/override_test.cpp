// Command-line overrides (`dotted.key=value`) and `${env:NAME[,default]}` interpolation:
// what they set, and the errors they report (located on the command line).
#include <catch2/catch.hpp>

#include "support/env.h"
#include "support/errors.h"
#include "support/scratch_dir.h"

using dlrun::Config;
using dlrun::testing::Expect;
using dlrun::testing::expect_load_error;
using dlrun::testing::ScopedEnv;
namespace config = dlrun::config;

namespace {
const std::string kMin = "model: {name: mlp}\ndata: {name: synthetic}\n";

Config load(const std::string& yaml, const std::vector<std::string>& overrides) {
  return config::load_text(yaml, "mem.yaml", overrides);
}
}  // namespace

TEST_CASE("overrides set scalars of every kind", "[config][override]") {
  Config c = load(kMin, {"optim.lr=0.05", "train.epochs=7", "run.deterministic=true", "run.name=exp one",
                         "optim.name=adamw", "amp.init_scale=1024", "run.device=cuda:1"});
  CHECK(c.optim.lr == 0.05);
  CHECK(c.train.epochs == 7);
  CHECK(c.run.deterministic);
  CHECK(c.run.name == "exp one");
  CHECK(c.optim.name == dlrun::OptimName::kAdamw);
  CHECK(c.amp.init_scale == 1024.0);
  CHECK(c.run.device == "cuda:1");
  CHECK(c.where("optim.lr").file == "command line 'optim.lr=0.05'");
}

TEST_CASE("overrides replace lists and accept null and []", "[config][override]") {
  const std::string yaml = kMin + "run: {dir: /tmp/somewhere}\n";
  SECTION("a list") {
    Config c = load("model: {name: mlp}\ndata: {name: synthetic, augment: [erase]}\n", {"data.augment=[flip,crop]"});
    CHECK(c.data.augment == std::vector<std::string>{"flip", "crop"});
  }
  SECTION("an empty list") {
    Config c = load("model: {name: mlp}\ndata: {name: synthetic, augment: [erase]}\n", {"data.augment=[]"});
    CHECK(c.data.augment.empty());
  }
  SECTION("null clears a nullable string") {
    Config c = load(kMin + "run: {dir: /tmp/somewhere}\n", {"run.dir=null"});
    CHECK(c.run.dir.empty());
    CHECK(c.where("run.dir").file == "command line 'run.dir=null'");
  }
  SECTION("null clears a nullable list") {
    Config c = load(kMin, {"model.hidden=null"});
    CHECK(c.model.hidden.empty());
  }
  SECTION("numeric lists") {
    Config c = load(kMin, {"model.hidden=[32, 16, 8]", "sched.milestones=[30,60.5]", "data.mean=[0.5]"});
    CHECK(c.model.hidden == std::vector<int64_t>{32, 16, 8});
    CHECK(c.sched.milestones == std::vector<double>{30, 60.5});
    CHECK(c.data.mean == std::vector<double>{0.5});
  }
  SECTION("a quoted value stays a string") {
    Config c = load(kMin, {"run.name=\"123\"", "run.dir='null'"});
    CHECK(c.run.name == "123");
    CHECK(c.run.dir == "null");
  }
  SECTION("a whole section as a flow map merges into the file's") {
    Config c = load(kMin + "optim: {lr: 0.3, momentum: 0.5}\n", {"optim={lr: 0.01}"});
    CHECK(c.optim.lr == 0.01);
    CHECK(c.optim.momentum == 0.5);
  }
  SECTION("later overrides win; the value may contain '='") {
    Config c = load(kMin, {"run.name=a", "run.name=b=c"});
    CHECK(c.run.name == "b=c");
  }
  SECTION("an override may create a section the file lacks") {
    Config c = load(yaml, {"checkpoint.every_steps=100"});
    CHECK(c.checkpoint.every_steps == 100);
    CHECK(c.run.dir == "/tmp/somewhere");
  }
  SECTION("required values may come from overrides only") {
    Config c = load("", {"model.name=convnet", "data.name=synthetic"});
    CHECK(c.model.name == "convnet");
  }
}

TEST_CASE("override syntax errors", "[config][override][errors]") {
  auto cl = [](const std::string& arg) { return "command line '" + arg + "'"; };
  SECTION("no '='") {
    expect_load_error(kMin, {"", cl("lr"), 0, 0, "an override must be key=value"}, {"lr"});
  }
  SECTION("empty key") {
    expect_load_error(kMin, {"", cl("=0.1"), 0, 0, "must be key=value"}, {"=0.1"});
  }
  SECTION("empty key part") {
    expect_load_error(kMin, {"optim..lr", cl("optim..lr=1"), 0, 0, "malformed key"}, {"optim..lr=1"});
    expect_load_error(kMin, {"optim.", cl("optim.=1"), 0, 0, "malformed key"}, {"optim.=1"});
  }
  SECTION("unknown key via override") {
    expect_load_error(kMin, {"optim.lrr", cl("optim.lrr=0.1"), 0, 0, "did you mean 'optim.lr'?"}, {"optim.lrr=0.1"});
  }
  SECTION("unknown section via override") {
    expect_load_error(kMin, {"optimm", cl("optimm.lr=0.1"), 0, 0, "did you mean 'optim'?"}, {"optimm.lr=0.1"});
  }
  SECTION("bad value via override") {
    expect_load_error(kMin, {"optim.lr", cl("optim.lr=-1"), 0, 0, "value -1 is out of range"}, {"optim.lr=-1"});
    expect_load_error(kMin, {"train.epochs", cl("train.epochs=abc"), 0, 0, "expected an integer"}, {"train.epochs=abc"});
    expect_load_error(kMin, {"optim.name", cl("optim.name=adam"), 0, 0, "did you mean 'adamw'?"}, {"optim.name=adam"});
    expect_load_error(kMin, {"data.augment[1]", cl("data.augment=[flip,crap]"), 0, 0, "did you mean 'crop'?"},
                      {"data.augment=[flip,crap]"});
    expect_load_error(kMin, {"optim.lr", cl("optim.lr=null"), 0, 0, "cannot be null"}, {"optim.lr=null"});
    expect_load_error(kMin, {"run.name", cl("run.name="), 0, 0, "cannot be null"}, {"run.name="});
  }
  SECTION("a value that is not YAML") {
    expect_load_error(kMin, {"data.augment", cl("data.augment=[flip"), 0, 0, "cannot parse value '[flip'"},
                      {"data.augment=[flip"});
  }
  SECTION("base cannot be overridden") {
    expect_load_error(kMin, {"base", cl("base=other.yaml"), 0, 0, "base cannot be overridden"}, {"base=other.yaml"});
  }
  SECTION("the file is still checked: errors there come first") {
    expect_load_error(kMin + "optim: {lr: 0}\n", {"optim.lr", "mem.yaml", 3, 13, "out of range"}, {"train.epochs=2"});
  }
}

TEST_CASE("${env:NAME} and ${env:NAME,default} are replaced by the environment", "[config][env]") {
  ScopedEnv unset("DLRUN_TEST_UNSET", nullptr);
  ScopedEnv epochs("DLRUN_TEST_EPOCHS", "12");
  ScopedEnv who("DLRUN_TEST_WHO", "alice");
  SECTION("set variable") {
    Config c = load(kMin + "train: {epochs: \"${env:DLRUN_TEST_EPOCHS}\"}\n", {});
    CHECK(c.train.epochs == 12);  // quoted in YAML, but the interpolated text feeds an int field
  }
  SECTION("plain (unquoted) in block style") {
    Config c = load(kMin + "train:\n  epochs: ${env:DLRUN_TEST_EPOCHS,3}\n", {});
    CHECK(c.train.epochs == 12);  // the variable wins over the default
  }
  SECTION("default when unset, into an int field") {
    Config c = load(kMin + "train:\n  epochs: ${env:DLRUN_TEST_UNSET,3}\n", {});
    CHECK(c.train.epochs == 3);
  }
  SECTION("empty default") {
    Config c = load(kMin + "run:\n  dir: \"${env:DLRUN_TEST_UNSET,}\"\n", {});
    CHECK(c.run.dir.empty());
  }
  SECTION("inside a larger string, several times") {
    Config c = load(kMin + "run:\n  name: \"exp-${env:DLRUN_TEST_WHO}-${env:DLRUN_TEST_UNSET,x}-e${env:DLRUN_TEST_EPOCHS}\"\n", {});
    CHECK(c.run.name == "exp-alice-x-e12");
  }
  SECTION("in list items") {
    ScopedEnv aug("DLRUN_TEST_AUG", "crop");
    Config c = load("model: {name: mlp}\ndata: {name: synthetic, augment: [flip, \"${env:DLRUN_TEST_AUG}\"]}\n", {});
    CHECK(c.data.augment == std::vector<std::string>{"flip", "crop"});
  }
  SECTION("in an override value") {
    Config c = load(kMin, {"train.epochs=${env:DLRUN_TEST_EPOCHS}"});
    CHECK(c.train.epochs == 12);
  }
  SECTION("the default may contain commas") {
    Config c = load(kMin + "run:\n  name: \"${env:DLRUN_TEST_UNSET,a,b}\"\n", {});
    CHECK(c.run.name == "a,b");
  }
}

TEST_CASE("${...} errors", "[config][env][errors]") {
  ScopedEnv unset("DLRUN_TEST_UNSET", nullptr);
  ScopedEnv bad("DLRUN_TEST_NOT_INT", "many");
  expect_load_error(kMin + "run:\n  name: ${env:DLRUN_TEST_UNSET}\n",
                    {"run.name", "", 4, 9, "environment variable DLRUN_TEST_UNSET is not set\ngive a default: ${env:DLRUN_TEST_UNSET,value}"});
  expect_load_error(kMin + "run:\n  name: ${foo}\n", {"run.name", "", 4, 9, "unsupported interpolation '${foo}'"});
  expect_load_error(kMin + "run:\n  name: ${oc.env:X}\n", {"run.name", "", 4, 9, "only ${env:NAME} and ${env:NAME,default}"});
  expect_load_error(kMin + "run:\n  name: abc${env:X\n", {"run.name", "", 4, 9, "unterminated '${'"});
  expect_load_error(kMin + "run:\n  name: ${env:}\n", {"run.name", "", 4, 9, "empty variable name"});
  expect_load_error("model: {name: mlp}\ndata:\n  name: synthetic\n  augment:\n    - flip\n    - ${env:DLRUN_TEST_UNSET}\n",
                    {"data.augment[1]", "", 6, 7, "is not set"});
  expect_load_error(kMin + "train:\n  epochs: ${env:DLRUN_TEST_NOT_INT}\n", {"train.epochs", "", 4, 11, "expected an integer, got 'many'"});
  expect_load_error(kMin, {"run.name", "command line 'run.name=${env:DLRUN_TEST_UNSET}'", 0, 0, "is not set"},
                    {"run.name=${env:DLRUN_TEST_UNSET}"});
}

TEST_CASE("a group mapping is its flat keys: train.ema: {decay} is train.ema_decay, overridable either way",
          "[config][override]") {
  Config c = load(kMin + "train:\n  ema: {decay: 0.999, warmup: true}\nlog: {metrics: {port: 9400}}\n", {});
  CHECK(c.train.ema_decay == 0.999);
  CHECK(c.train.ema_warmup);
  CHECK(c.log.metrics_port == 9400);
  CHECK(c.where("train.ema_decay").line == 4);  // where the member was written
  c = load(kMin + "train: {ema: {decay: 0.999}}\n", {"train.ema_decay=0.99"});
  CHECK(c.train.ema_decay == 0.99);  // the command line wins over the file, whichever form each uses
  c = load(kMin + "train: {ema_decay: 0.999}\n", {"train.ema.decay=0.98", "train.ema={every_steps: 4}"});
  CHECK(c.train.ema_decay == 0.98);
  CHECK(c.train.ema_every_steps == 4);
  expect_load_error(kMin + "train: {ema: {decay: 0.9, decy: 1}}\n", Expect{"train.ema_decy", "", 3, -1, "ema_decay"});
  expect_load_error(kMin + "train: {ema_decay: 0.9, ema: {decay: 0.8}}\n",
                    Expect{"train.ema_decay", "", 3, -1, "set twice"});
  expect_load_error(kMin + "optim: {lr: {value: 1}}\n", Expect{"optim.lr", "", 3, -1, ""});  // lr is a key, not a group
}
