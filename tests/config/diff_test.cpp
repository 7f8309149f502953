// What changed between two configs, as the resume warning lists it.
#include <catch2/catch.hpp>

#include "config/diff.h"
#include "config/loader.h"
#include "support/errors.h"

using namespace dlrun;
using dlrun::testing::kMinimal;

TEST_CASE("changes lists every changed key in schema order, as config text", "[config][diff]") {
  const Config a = config::load_text(kMinimal, "a.yaml");
  const Config b = config::load_text("model: {name: mlp}\ndata: {name: synthetic, augment: [flip]}\n"
                                     "run: {seed: 7}\noptim: {lr: 0.05, name: adamw}\nlog: {every_steps: 5}\n",
                                     "b.yaml");
  const auto ch = config::changes(a, b);
  REQUIRE(ch.size() == 5);
  CHECK(ch[0].key == "run.seed");
  CHECK(ch[0].before == "0");
  CHECK(ch[0].after == "7");
  CHECK(ch[1].key == "data.augment");
  CHECK(ch[1].after == "[flip]");
  CHECK(ch[2].key == "optim.name");
  CHECK(ch[2].before == "sgd");
  CHECK(ch[3].key == "optim.lr");
  CHECK(ch[4].key == "log.every_steps");
  CHECK(config::changes(a, a).empty());
  CHECK(config::changes(a, config::load_text(kMinimal, "elsewhere.yaml")).empty());  // where it came from is no change
}

TEST_CASE("which changes break exact resume and which are bookkeeping", "[config][diff]") {
  CHECK(config::breaks_exact_resume("run.seed"));
  CHECK_FALSE(config::breaks_exact_resume("optim.lr"));
  CHECK(config::is_bookkeeping("log.every_steps"));
  CHECK(config::is_bookkeeping("checkpoint.every_minutes"));
  CHECK(config::is_bookkeeping("data.workers"));
  CHECK_FALSE(config::is_bookkeeping("data.batch_size"));
  CHECK_FALSE(config::is_bookkeeping("run.seed"));
}
