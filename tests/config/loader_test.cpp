// Config system: smoke test (the full suite is in tests/config/*_test.cpp).
#include <catch2/catch.hpp>

#include "config/loader.h"

using namespace dlrun;

TEST_CASE("a minimal config loads with defaults", "[config]") {
  Config c = config::load_text("model: {name: mlp}\ndata: {name: synthetic}\n", "mem.yaml");
  CHECK(c.model.name == "mlp");
  CHECK(c.optim.lr == Approx(0.1));
}
