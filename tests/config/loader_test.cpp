// Config loading basics: the defaults of options.h survive loading, every value kind binds,
// and YAML spellings (flow/block style, comments, quotes, null) mean what users expect.
#include <catch2/catch.hpp>

#include <set>

#include "config/schema.h"
#include "support/env.h"
#include "support/errors.h"
#include "support/scratch_dir.h"

using dlrun::Config;
namespace config = dlrun::config;

TEST_CASE("a minimal config keeps every default of options.h", "[config]") {
  Config c = config::load_text("model: {name: mlp}\ndata: {name: synthetic}\n", "mem.yaml");
  Config d;
  d.model.name = "mlp";
  d.data.name = "synthetic";
  // Same printed form = same value in every field.
  CHECK(config::to_yaml(c, false) == config::to_yaml(d, false));
  CHECK(c.optim.lr == 0.1);
  CHECK(c.optim.eps == 1e-8);
  CHECK(c.amp.init_scale == 65536.0);
  CHECK(c.model.hidden == std::vector<int64_t>{512, 256});
  CHECK(c.data.augment.empty());
  CHECK(c.run.device == "auto");
  CHECK(c.source_file == "mem.yaml");
  CHECK(c.origin.size() == 2);  // only what the file set
  CHECK(c.where("model.name").line == 1);
  CHECK(c.where("model.name").column == 15);
}

TEST_CASE("values of every kind bind, in flow and block style", "[config]") {
  Config c = config::load_text(
      "# an experiment\n"
      "run:\n"
      "  name: \"my run\"   # quoted string\n"
      "  seed: 42\n"
      "  deterministic: True\n"
      "model:\n"
      "  name: resnet18\n"
      "  hidden:\n"
      "    - 100\n"
      "    - +7\n"
      "  dropout: .5\n"
      "data: {name: synthetic, augment: [flip, 'crop'], mean: [-1, 0.5e-1], std: [1, 2.]}\n"
      "optim: {lr: 1, weight_decay: 1E-4}\n"
      "checkpoint: {dir: ~, async: FALSE}\n",
      "mem.yaml");
  CHECK(c.run.name == "my run");
  CHECK(c.run.seed == 42);
  CHECK(c.run.deterministic);
  CHECK(c.model.name == "resnet18");
  CHECK(c.model.hidden == std::vector<int64_t>{100, 7});
  CHECK(c.model.dropout == 0.5);
  CHECK(c.data.augment == std::vector<std::string>{"flip", "crop"});
  CHECK(c.data.mean == std::vector<double>{-1, 0.05});
  CHECK(c.data.std == std::vector<double>{1, 2});
  CHECK(c.optim.lr == 1.0);  // an integer literal is fine for a float field
  CHECK(c.optim.weight_decay == 1e-4);
  CHECK(c.checkpoint.dir.empty());
  CHECK_FALSE(c.checkpoint.async);
  CHECK(c.where("model.hidden").line == 9);
}

TEST_CASE("plain scalars that look like other types are fine for string fields", "[config]") {
  Config c = config::load_text("model: {name: mlp}\ndata: {name: synthetic}\nrun: {name: 123, dir: yes, device: cpu}\n"
                               "preemption: {endpoint: 'http://127.0.0.1:8080/notice'}\n",
                               "mem.yaml");
  CHECK(c.run.name == "123");
  CHECK(c.run.dir == "yes");
  CHECK(c.preemption.endpoint == "http://127.0.0.1:8080/notice");
}

TEST_CASE("explicit YAML tags: !!str makes a string, !!int/!!float are typed by the field", "[config]") {
  dlrun::testing::expect_load_error("model: {name: mlp}\ndata: {name: synthetic}\ntrain: {epochs: !!str 3}\n",
                                    {"train.epochs", "", 3, 17, "(quoted, so a string)"});
  Config c = config::load_text("model: {name: mlp}\ndata: {name: synthetic}\ntrain: {epochs: !!int 3}\noptim: {lr: !!float 0.5}\n",
                               "mem.yaml");
  CHECK(c.train.epochs == 3);
  CHECK(c.optim.lr == 0.5);
}

TEST_CASE("a null section keeps the defaults", "[config]") {
  Config c = config::load_text("model: {name: mlp}\ndata: {name: synthetic}\noptim:\nsched: ~\n", "mem.yaml");
  CHECK(c.optim.lr == 0.1);
}

TEST_CASE("did_you_mean", "[config]") {
  const std::vector<std::string> names = {"sgd", "adamw", "lr", "momentum"};
  CHECK(config::did_you_mean("adam", names) == "adamw");
  CHECK(config::did_you_mean("momentom", names) == "momentum");
  CHECK(config::did_you_mean("SGD", names) == "sgd");
  CHECK(config::did_you_mean("lrr", names) == "lr");
  CHECK(config::did_you_mean("xx", names).empty());     // two edits from "lr": too far for a 2-letter word
  CHECK(config::did_you_mean("banana", names).empty());
  CHECK(config::did_you_mean("", names).empty());
}

TEST_CASE("the schema has a doc for every field and consistent ranges", "[config]") {
  Config c;
  for (const auto& s : config::describe(c)) {
    CHECK_FALSE(s.doc.empty());
    for (const auto& f : s.fields) {
      INFO(s.name << "." << f.name);
      CHECK_FALSE(f.doc.empty());
      CHECK(f.min <= f.max);
      CHECK(f.ptr != nullptr);
    }
  }
  auto keys = config::all_keys();
  CHECK(std::set<std::string>(keys.begin(), keys.end()).size() == keys.size());  // no duplicates
}
