// Malformed experiment files: every error class the loader reports, each checked for exit
// code 2, the dotted key, file:line:column and the words that tell the user what to fix.
// Base-file errors are in inherit_test.cpp, override/env errors in override_test.cpp,
// cross-field rules in validate_test.cpp.
#include <catch2/catch.hpp>

#include "support/env.h"
#include "support/errors.h"
#include "support/names.h"
#include "support/scratch_dir.h"

using dlrun::testing::Expect;
using dlrun::testing::expect_load_error;

namespace {

struct Case {
  const char* name;
  std::string yaml;
  Expect expect;
};

void run_cases(const std::vector<Case>& cases) {
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.name) { expect_load_error(c.yaml, c.expect); }
  }
}

// Lines 1-2 of most cases; the case's own text starts on line 3.
const std::string kMin = "model: {name: mlp}\ndata: {name: synthetic}\n";

}  // namespace

TEST_CASE("unknown keys are errors with a did-you-mean hint", "[config][errors]") {
  run_cases({
      {"misspelt key", kMin + "optim:\n  momentom: 0.9\n",
       {"optim.momentom", "", 4, 3, "did you mean 'optim.momentum'?"}},
      {"misspelt key in a flow map", kMin + "optim: {lrr: 0.1}\n", {"optim.lrr", "", 3, 9, "did you mean 'optim.lr'?"}},
      {"wrong case", kMin + "optim:\n  LR: 0.1\n", {"optim.LR", "", 4, 3, "did you mean 'optim.lr'?"}},
      {"key of another section", kMin + "optim:\n  warmup_epochs: 2\n",
       {"optim.warmup_epochs", "", 4, 3, "did you mean 'sched.warmup_epochs'?"}},
      {"nothing close", kMin + "train:\n  banana: 1\n", {"train.banana", "", 4, 3, "see `dlrun config show`"}},
  });
}

TEST_CASE("unknown sections are errors", "[config][errors]") {
  run_cases({
      {"far from any section", kMin + "optimizer:\n  lr: 0.1\n",
       {"optimizer", "", 3, 1, "sections are: run, model, data, optim, sched"}},
      {"one letter off", kMin + "optm: {lr: 0.1}\n", {"optm", "", 3, 1, "did you mean 'optim'?"}},
      {"section that is a scalar", kMin + "optim: 3\n", {"optim", "", 3, 8, "a section must be a mapping"}},
      {"section that is a list", kMin + "train: [1, 2]\n", {"train", "", 3, 8, "got a list"}},
  });
}

TEST_CASE("values of the wrong type are errors", "[config][errors]") {
  run_cases({
      {"string for int", kMin + "train: {epochs: three}\n", {"train.epochs", "", 3, 17, "expected an integer, got 'three'"}},
      {"float for int", kMin + "train:\n  epochs: 2.5\n", {"train.epochs", "", 4, 11, "expected an integer, got '2.5'"}},
      {"integral float for int", kMin + "train:\n  epochs: 3.0\n", {"train.epochs", "", 4, 11, "without a decimal point"}},
      {"exponent for int", "model: {name: mlp}\ndata:\n  name: synthetic\n  limit_train: 1e3\n", {"data.limit_train", "", 4, 16, "expected an integer"}},
      {"list for scalar", kMin + "optim: {lr: [0.1]}\n", {"optim.lr", "", 3, 13, "expected a number, got a list"}},
      {"map for scalar", kMin + "run:\n  seed:\n    a: 1\n", {"run.seed", "", 5, 5, "expected an integer, got a mapping"}},
      {"map for string", kMin + "run:\n  name: {a: 1}\n", {"run.name", "", 4, 9, "expected a string, got a mapping"}},
      {"quoted number for int", kMin + "train: {epochs: \"3\"}\n", {"train.epochs", "", 3, 17, "(quoted, so a string)"}},
      {"quoted number for float", kMin + "optim:\n  lr: '0.1'\n", {"optim.lr", "", 4, 7, "expected a number, got '0.1' (quoted"}},
      {"hex for int", kMin + "run: {seed: 0x10}\n", {"run.seed", "", 3, 13, "expected an integer, got '0x10'"}},
      {"inf for float", kMin + "train: {clip_grad_norm: .inf}\n", {"train.clip_grad_norm", "", 3, 25, "expected a number"}},
      {"yes for bool", kMin + "run: {deterministic: yes}\n", {"run.deterministic", "", 3, 22, "write true or false"}},
      {"1 for bool", kMin + "run:\n  deterministic: 1\n", {"run.deterministic", "", 4, 18, "expected a boolean"}},
      {"quoted bool", kMin + "checkpoint: {async: \"true\"}\n", {"checkpoint.async", "", 3, 21, "(quoted, so a string)"}},
      {"null for a number", kMin + "optim: {lr: null}\n", {"optim.lr", "", 3, 13, "cannot be null"}},
      {"empty value reported at its key", kMin + "optim:\n  lr:\nsched: {}\n", {"optim.lr", "", 4, 3, "cannot be null"}},
      {"scalar for list", "model: {name: mlp}\ndata:\n  name: synthetic\n  augment: flip\n",
       {"data.augment", "", 4, 12, "write a list: [flip]"}},
      {"map for list", kMin + "optim:\n  betas: {a: 1}\n", {"optim.betas", "", 4, 10, "expected a list of numbers"}},
  });
}

TEST_CASE("list items are checked one by one, with the index in the key", "[config][errors]") {
  run_cases({
      {"bad enum item", "model: {name: mlp}\ndata:\n  name: synthetic\n  augment: [flip, flipp]\n",
       {"data.augment[1]", "", 4, 19, "did you mean 'flip'?"}},
      {"bad enum item, block list", "model: {name: mlp}\ndata:\n  name: synthetic\n  augment:\n    - crop\n    - 3\n",
       {"data.augment[1]", "", 6, 7, "invalid value '3'"}},
      {"null item", "model: {name: mlp}\ndata: {name: synthetic, augment: [flip, null]}\n",
       {"data.augment[1]", "", 2, 41, "expected a string, got null"}},
      {"string in an int list", "model: {name: mlp, hidden: [512, x]}\ndata: {name: synthetic}\n",
       {"model.hidden[1]", "", 1, 34, "expected an integer, got 'x'"}},
      {"float in an int list", "model: {name: mlp, hidden: [512, 1.5]}\ndata: {name: synthetic}\n",
       {"model.hidden[1]", "", 1, 34, "expected an integer"}},
      {"quoted number in a float list", kMin + "optim: {betas: [0.9, \"0.99\"]}\n",
       {"optim.betas[1]", "", 3, 22, "(quoted, so a string)"}},
      {"item out of range", "model: {name: mlp}\ndata: {name: synthetic, resized_crop_scale: [0.5, 2]}\n",
       {"data.resized_crop_scale[1]", "", 2, 51, "must be in [0, 1]"}},
      {"item below min", kMin + "sched: {milestones: [-1]}\n", {"sched.milestones[0]", "", 3, 22, "must be in [0, "}},
  });
}

TEST_CASE("values out of range are errors naming the range", "[config][errors]") {
  run_cases({
      {"below min", kMin + "train: {epochs: 0}\n", {"train.epochs", "", 3, 17, "value 0 is out of range (must be in [1, 1000000])"}},
      {"negative seed", kMin + "run: {seed: -1}\n", {"run.seed", "", 3, 13, "must be in [0, 4294967295]"}},
      {"above max", kMin + "optim:\n  momentum: 1.5\n", {"optim.momentum", "", 4, 13, "value 1.5 is out of range (must be in [0, 1])"}},
      {"int above max", "model: {name: mlp}\ndata: {name: synthetic, workers: 1000}\n", {"data.workers", "", 2, 34, "must be in [0, 256]"}},
      {"exclusive min", kMin + "optim: {lr: 0}\n", {"optim.lr", "", 3, 13, "must be in (0, 1000]"}},
      {"exclusive min, negative", kMin + "optim: {lr: -0.1}\n", {"optim.lr", "", 3, 13, "value -0.1 is out of range"}},
      {"open upper bound", "model: {name: mlp}\ndata: {name: synthetic, std: [-1]}\n", {"data.std[0]", "", 2, 31, "must be >= 0"}},
      {"int too large for int64", "model: {name: mlp}\ndata: {name: synthetic, limit_train: 99999999999999999999}\n",
       {"data.limit_train", "", 2, 38, "expected an integer"}},
  });
}

TEST_CASE("bad enum values list the valid ones", "[config][errors]") {
  run_cases({
      {"optimizer", kMin + "optim: {name: adam}\n", {"optim.name", "", 3, 15, "invalid value 'adam' (valid: sgd, adamw, rmsprop, rmsprop_tf, lamb, lars)\ndid you mean 'adamw'?"}},
      {"model", "model: {name: resnet}\ndata: {name: synthetic}\n",
       {"model.name", "", 1, 15, "(valid: " + dlrun::testing::joined_names("model.name", ", ") + ")\ndid you mean 'resnet18'?"}},
      {"dataset", "model: {name: mlp}\ndata:\n  name: fashion-mnist\n", {"data.name", "", 3, 9, "did you mean 'fashion_mnist'?"}},
      {"upper case", kMin + "optim: {name: SGD}\n", {"optim.name", "", 3, 15, "did you mean 'sgd'?"}},
      {"nothing close", kMin + "sched: {name: sgdr}\n", {"sched.name", "", 3, 15, "(valid: constant, step, multistep, cosine, onecycle)"}},
      {"quoted empty", kMin + "amp: {dtype: \"\"}\n", {"amp.dtype", "", 3, 14, "invalid value '' (valid: fp16, bf16)"}},
  });
  SECTION("no hint when nothing is close") {
    auto e = expect_load_error(kMin + "sched: {name: sgdr}\n", {"sched.name", "", 3, 15, "invalid value 'sgdr'"});
    REQUIRE(e);
    CHECK(e->hint().empty());
  }
}

TEST_CASE("missing required values are errors naming the choices", "[config][errors]") {
  run_cases({
      {"no model", "data: {name: synthetic}\n", {"model.name", "", 0, 0, "missing required value\nset it in the file"}},
      {"no data", "model: {name: mlp}\n", {"data.name", "", 0, 0, "one of: cifar10, cifar100, fashion_mnist"}},
      {"empty file", "", {"model.name", "", 0, 0, "missing required value"}},
      {"only comments", "# nothing here\n", {"model.name", "", 0, 0, "or as model.name=...; one of"}},
      {"empty section", "model:\ndata: {name: synthetic}\n", {"model.name", "", 0, 0, "missing required value"}},
      {"null", "model: {name: null}\ndata: {name: synthetic}\n", {"model.name", "", 1, 15, "cannot be null"}},
  });
}

TEST_CASE("malformed YAML is an error with line and column", "[config][errors]") {
  run_cases({
      {"bad indentation", "model:\n  name: mlp\n   width: 3\n", {"", "", 3, 9, "malformed YAML: illegal map value"}},
      {"unclosed brace", "model: {name: mlp\ndata: {name: synthetic}\n", {"", "", 2, 5, "malformed YAML: end of map flow not found"}},
      {"unclosed bracket", "model: {name: mlp}\ndata:\n  name: synthetic\n  augment: [flip, crop\n",
       {"", "", 5, 1, "end of sequence flow not found"}},
      {"tab indentation", "model:\n\tname: mlp\n", {"", "", 2, 6, "line 2 is indented with a tab"}},
      {"two documents", "model: {name: mlp}\n---\ndata: {name: synthetic}\n", {"", "", 2, 1, "expected one YAML document, found 2"}},
      {"top level is a list", "- model\n- data\n", {"", "", 1, 1, "the top level of a config must be a mapping"}},
      {"top level is a scalar", "hello\n", {"", "", 1, 1, "must be a mapping of sections"}},
      {"non-scalar key", "model:\n  [a, b]: 1\n", {"model", "", 2, 3, "mapping keys must be plain names"}},
      {"unknown tag", kMin + "optim: {lr: !weird 3}\n", {"optim.lr", "", 3, 13, "unsupported YAML tag '!weird'"}},
  });
}

TEST_CASE("duplicate keys are errors pointing at the second one", "[config][errors]") {
  run_cases({
      {"in a section", "model:\n  name: mlp\n  name: convnet\ndata: {name: synthetic}\n",
       {"model.name", "", 3, 3, "duplicate key (first at line 2)"}},
      {"in a flow map", "model: {name: mlp, name: convnet}\n", {"model.name", "", 1, 20, "duplicate key (first at line 1)"}},
      {"section twice", kMin + "optim: {lr: 0.1}\noptim: {momentum: 0.5}\n", {"optim", "", 4, 1, "duplicate key (first at line 3)"}},
  });
}

TEST_CASE("the rendered error is file:line:col: key: message plus a hint line", "[config][errors]") {
  auto e = expect_load_error(kMin + "optim:\n  momentom: 0.9\n", {"optim.momentom", "", 4, 3, "unknown key"});
  REQUIRE(e);
  CHECK(e->render() == "mem.yaml:4:3: optim.momentom: unknown key\n  hint: did you mean 'optim.momentum'?");
}

TEST_CASE("every mistake of a file is reported at once, the first as the error", "[config][errors]") {
  // (before: a file with two mistakes took two runs to fix)
  auto e = expect_load_error(kMin + "optim:\n  momentom: 0.9\n  lr: fast\ntrain: {epochs: -3}\nbogus: {x: 1}\n",
                             {"optim.momentom", "", 4, 3, "unknown key"});
  REQUIRE(e);
  const std::string r = e->render();
  CHECK_THAT(r, Catch::Contains("(4 mistakes in all; the others below)"));
  CHECK_THAT(r, Catch::Contains("also: mem.yaml:5:7: optim.lr: expected a number"));
  CHECK_THAT(r, Catch::Contains("also: mem.yaml:6:17: train.epochs: value -3 is out of range"));
  CHECK_THAT(r, Catch::Contains("also: mem.yaml:7:1: bogus: unknown section"));
  CHECK(e->code() == dlrun::ExitCode::kBadInput);
}
