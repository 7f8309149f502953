// `base:` inheritance: merge order, lists of bases, chains with relative paths, where each
// value came from, and the errors (missing file, missing base, cycles, bad base values).
#include <catch2/catch.hpp>

#include <filesystem>

#include "support/env.h"
#include "support/errors.h"
#include "support/scratch_dir.h"

using dlrun::Config;
using dlrun::testing::Expect;
using dlrun::testing::expect_error;
using dlrun::testing::ScratchDir;
namespace config = dlrun::config;

TEST_CASE("a child overrides its base key by key; sections merge", "[config][base]") {
  ScratchDir d;
  d.write("base.yaml",
          "model: {name: resnet18, num_classes: 100}\n"
          "data: {name: synthetic, batch_size: 64}\n"
          "optim:\n  name: sgd\n  lr: 0.2\n  momentum: 0.8\n");
  auto child = d.write("child.yaml", "base: base.yaml\noptim:\n  lr: 0.05\n");
  Config c = config::load(child);
  CHECK(c.model.name == "resnet18");
  CHECK(c.model.num_classes == 100);
  CHECK(c.data.batch_size == 64);
  CHECK(c.optim.lr == 0.05);        // child
  CHECK(c.optim.momentum == 0.8);   // base, same section
  CHECK(c.optim.name == dlrun::OptimName::kSgd);
  CHECK(c.source_file == child);
  // Each value remembers the file and line it came from.
  CHECK(c.where("optim.lr").file == child);
  CHECK(c.where("optim.lr").line == 3);
  CHECK(c.where("optim.momentum").file == d.path("base.yaml"));
  CHECK(c.where("optim.momentum").line == 6);
  CHECK(c.where("train.epochs").file == child);  // a default: the top-level file, no line
  CHECK(c.where("train.epochs").line == 0);
}

TEST_CASE("precedence: override > file > base > default", "[config][base]") {
  ScratchDir d;
  d.write("base.yaml", "model: {name: mlp}\ndata: {name: synthetic}\ntrain: {epochs: 5, max_steps: 7, grad_accum: 2}\n");
  auto child = d.write("child.yaml", "base: base.yaml\ntrain: {epochs: 6, max_steps: 8}\n");
  Config c = config::load(child, {"train.epochs=9"});
  CHECK(c.train.epochs == 9);       // command line
  CHECK(c.train.max_steps == 8);    // file
  CHECK(c.train.grad_accum == 2);   // base
  CHECK(c.train.eval_every_epochs == 1);  // default
  CHECK(c.where("train.epochs").file == "command line 'train.epochs=9'");
}

TEST_CASE("base may be a list; later bases override earlier ones", "[config][base]") {
  ScratchDir d;
  d.write("model.yaml", "model: {name: convnet, width: 16}\noptim: {lr: 0.3}\n");
  d.write("data.yaml", "data: {name: synthetic, batch_size: 32}\noptim: {lr: 0.4, momentum: 0.5}\n");
  auto child = d.write("exp.yaml", "base: [model.yaml, data.yaml]\nmodel: {width: 24}\n");
  Config c = config::load(child);
  CHECK(c.model.name == "convnet");
  CHECK(c.model.width == 24);
  CHECK(c.data.batch_size == 32);
  CHECK(c.optim.lr == 0.4);  // data.yaml comes after model.yaml
  CHECK(c.optim.momentum == 0.5);
}

TEST_CASE("a chain of bases resolves each path relative to the file naming it", "[config][base]") {
  ScratchDir d;
  d.write("common/root.yaml", "data: {name: synthetic, augment: [flip]}\ntrain: {epochs: 2}\n");
  d.write("models/mid.yaml", "base: ../common/root.yaml\nmodel: {name: mlp, hidden: [64]}\ntrain: {epochs: 3}\n");
  auto leaf = d.write("exps/deep/leaf.yaml", "base: ../../models/mid.yaml\ntrain: {max_steps: 10}\n");
  Config c = config::load(leaf);
  CHECK(c.data.augment == std::vector<std::string>{"flip"});
  CHECK(c.model.hidden == std::vector<int64_t>{64});
  CHECK(c.train.epochs == 3);
  CHECK(c.train.max_steps == 10);
  CHECK(c.where("data.augment").file == d.path("common/root.yaml"));
}

TEST_CASE("a diamond of bases is not a cycle", "[config][base]") {
  ScratchDir d;
  d.write("root.yaml", "model: {name: mlp}\ndata: {name: synthetic}\n");
  d.write("a.yaml", "base: root.yaml\noptim: {lr: 0.2}\n");
  d.write("b.yaml", "base: root.yaml\noptim: {momentum: 0.7}\n");
  Config c = config::load(d.write("top.yaml", "base: [a.yaml, b.yaml]\n"));
  CHECK(c.optim.lr == 0.2);
  CHECK(c.optim.momentum == 0.7);
}

TEST_CASE("lists and scalars in a child replace the base's, they do not append", "[config][base]") {
  ScratchDir d;
  d.write("base.yaml", "model: {name: mlp, hidden: [512, 256]}\ndata: {name: synthetic, augment: [flip, crop]}\n");
  Config c = config::load(d.write("child.yaml", "base: base.yaml\nmodel: {hidden: [8]}\ndata: {augment: []}\n"));
  CHECK(c.model.hidden == std::vector<int64_t>{8});
  CHECK(c.data.augment.empty());
}

TEST_CASE("null in a child resets a value; an empty section changes nothing", "[config][base]") {
  ScratchDir d;
  d.write("base.yaml", "model: {name: mlp}\ndata: {name: synthetic}\nrun: {dir: /tmp/base-dir}\noptim: {lr: 0.3}\n");
  Config c = config::load(d.write("child.yaml", "base: base.yaml\nrun:\n  dir: null\noptim:\n  # lr: 0.5\n"));
  CHECK(c.run.dir.empty());
  CHECK(c.optim.lr == 0.3);
  CHECK(config::load(d.path("child.yaml"), {"optim=null"}).optim.lr == 0.3);
}

TEST_CASE("load_text resolves base relative to the name it is given", "[config][base]") {
  ScratchDir d;
  d.write("base.yaml", "model: {name: convnet}\ndata: {name: synthetic}\n");
  Config c = config::load_text("base: base.yaml\n", d.path("virtual.yaml"));
  CHECK(c.model.name == "convnet");
  // An empty or null base means no base.
  CHECK(config::load_text("base:\nmodel: {name: mlp}\ndata: {name: synthetic}\n", "mem.yaml").model.name == "mlp");
  CHECK(config::load_text("base: []\nmodel: {name: mlp}\ndata: {name: synthetic}\n", "mem.yaml").model.name == "mlp");
}

TEST_CASE("the base path may use ${env:...}", "[config][base]") {
  ScratchDir d;
  d.write("sub/base.yaml", "model: {name: resnet34}\ndata: {name: synthetic}\n");
  dlrun::testing::ScopedEnv env("DLRUN_TEST_BASE_DIR", "sub");
  Config c = config::load(d.write("exp.yaml", "base: ${env:DLRUN_TEST_BASE_DIR}/base.yaml\n"));
  CHECK(c.model.name == "resnet34");
}

TEST_CASE("file errors: missing config, missing base, directories", "[config][base][errors]") {
  ScratchDir d;
  SECTION("missing config file") {
    auto p = d.path("nope.yaml");
    expect_error([&] { config::load(p); }, {"", p, 0, 0, "config file not found"});
  }
  SECTION("a directory as the config") {
    auto p = d.path("adir");
    std::filesystem::create_directories(p);
    expect_error([&] { config::load(p); }, {"", p, 0, 0, "is a directory"});
  }
  SECTION("missing base file, reported at the base: line") {
    auto child = d.write("child.yaml", "# comment\nbase: missing.yaml\n");
    expect_error([&] { config::load(child); }, {"base", child, 2, 7, "base file not found: " + d.path("missing.yaml")});
  }
  SECTION("missing base in a list") {
    d.write("ok.yaml", "model: {name: mlp}\n");
    auto child = d.write("child.yaml", "base:\n  - ok.yaml\n  - gone.yaml\n");
    expect_error([&] { config::load(child); }, {"base", child, 3, 5, "base file not found"});
  }
  SECTION("missing base of a base, reported in the file naming it") {
    auto mid = d.write("mid.yaml", "base: gone.yaml\n");
    auto top = d.write("top.yaml", "base: mid.yaml\n");
    expect_error([&] { config::load(top); }, {"base", mid, 1, 7, "gone.yaml"});
  }
  SECTION("empty base path") {
    auto child = d.write("child.yaml", "base: \"\"\n");
    expect_error([&] { config::load(child); }, {"base", child, 1, 7, "empty base file path"});
  }
  SECTION("errors inside a base file point into that file") {
    auto base = d.write("base.yaml", "model:\n  name: mlp\n  widht: 3\n");
    auto child = d.write("child.yaml", "base: base.yaml\n");
    expect_error([&] { config::load(child); }, {"model.widht", base, 3, 3, "did you mean 'model.width'?"});
  }
  SECTION("malformed YAML in a base file") {
    auto base = d.write("base.yaml", "model: [mlp\n");
    auto child = d.write("child.yaml", "base: base.yaml\n");
    expect_error([&] { config::load(child); }, {"", base, 2, 1, "malformed YAML"});
  }
}

TEST_CASE("inheritance cycles are errors showing the chain", "[config][base][errors]") {
  ScratchDir d;
  SECTION("a -> b -> a") {
    auto a = d.write("a.yaml", "base: b.yaml\nmodel: {name: mlp}\n");
    auto b = d.write("b.yaml", "data: {name: synthetic}\nbase: a.yaml\n");
    auto e = expect_error([&] { config::load(a); }, {"base", b, 2, 7, "inheritance cycle: "});
    REQUIRE(e);
    CHECK_THAT(e->message(), Catch::Matchers::EndsWith("a.yaml -> " + std::filesystem::weakly_canonical(b).string() +
                                                       " -> " + std::filesystem::weakly_canonical(a).string()));
  }
  SECTION("a file that names itself") {
    auto a = d.write("self.yaml", "base: ./self.yaml\n");
    expect_error([&] { config::load(a); }, {"base", a, 1, 7, "inheritance cycle"});
  }
  SECTION("load_text whose base names the text's own file") {
    auto a = d.path("t.yaml");
    expect_error([&] { config::load_text("base: t.yaml\n", a); }, {"base", a, 1, 7, "inheritance cycle"});
  }
}

TEST_CASE("bad base values are errors", "[config][base][errors]") {
  using dlrun::testing::expect_load_error;
  expect_load_error("base: {file: a.yaml}\n", {"base", "", 1, 7, "expected a file path or a list of file paths, got a mapping"});
  expect_load_error("base: [[a.yaml]]\n", {"base", "", 1, 8, "expected a file path, got a list"});
  expect_load_error("base: [null]\n", {"base", "", 1, 8, "expected a file path, got null"});
  expect_load_error("base: ${env:DLRUN_TEST_SURELY_UNSET}\n", {"base", "", 1, 7, "DLRUN_TEST_SURELY_UNSET is not set"});
}
