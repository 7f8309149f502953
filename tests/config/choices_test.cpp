// Names registered by the registries above the config (config/choices.h): the schema takes a
// key's choices from them. This binary links no registry, so it registers the registries' names
// (support/names.h, kept equal to the real ones by tests/train/registries_test.cpp) for the
// config tests that check a wrong name is refused with the list and a "did you mean".
#include <catch2/catch.hpp>

#include "config/choices.h"
#include "config/loader.h"
#include "config/schema.h"
#include "support/names.h"

using namespace dlrun;

namespace {
[[maybe_unused]] const bool kRegistered = [] {
  for (const auto& [key, names] : testing::registry_names())
    config::register_choices(key, [names = names] { return names; });
  return true;
}();
}  // namespace

TEST_CASE("a key's choices are the names its registry registered", "[config][choices]") {
  Config c;
  const auto sections = config::describe(c);
  for (const auto& [key, names] : testing::registry_names()) {
    INFO(key);
    const config::Field* f = config::find_field(sections, key);
    REQUIRE(f != nullptr);
    CHECK(f->choices == names);
  }
  CHECK(config::registered_choices("nothing.registered").empty());
  // A registration made later replaces the earlier one, and the schema reads it when described.
  config::register_choices("test.only", [] { return std::vector<std::string>{"b", "a"}; });
  CHECK(config::registered_choices("test.only") == std::vector<std::string>{"b", "a"});
  config::register_choices("test.only", [] { return std::vector<std::string>{"c"}; });
  CHECK(config::registered_choices("test.only") == std::vector<std::string>{"c"});
}
