// Config choices have one source: each registry registers its names (models, datasets,
// transforms) and the schema takes them from there (config/choices.h), so `config validate` and
// the code can never disagree, and a new dataset needs no line in schema.cpp. The torch-free
// tests' copies of the names (support/names.h) are checked against the registries here.
#include <catch2/catch.hpp>

#include "base/error.h"
#include "config/loader.h"
#include "config/schema.h"
#include "data/dataset.h"
#include "data/transforms.h"
#include "models/model.h"
#include "support/names.h"

using namespace dlrun;

namespace {
std::vector<std::string> choices(const std::string& key) {
  Config c;
  const auto sections = config::describe(c);
  const auto* f = config::find_field(sections, key);
  REQUIRE(f != nullptr);
  return f->choices;
}
}  // namespace

TEST_CASE("every registry's names are the schema's choices", "[train][registries]") {
  CHECK(models::names() == choices("model.name"));
  CHECK(data::names() == choices("data.name"));
  CHECK(data::augment_names() == choices("data.augment"));
  // The torch-free tests' copies (support/names.h) are the registries' lists, in their order.
  CHECK(testing::registry_names().at("model.name") == models::names());
  CHECK(testing::registry_names().at("data.name") == data::names());
  CHECK(testing::registry_names().at("data.augment") == data::augment_names());
}

TEST_CASE("a name no registry knows is refused while the config loads, at its line", "[train][registries]") {
  try {
    config::load_text("model: {name: mlp}\ndata:\n  name: fashion-mnist\n", "exp.yaml");
    FAIL("an unknown dataset was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kBadInput);
    CHECK_THAT(e.render(), Catch::Contains("exp.yaml:3:9") && Catch::Contains("data.name") &&
                               Catch::Contains("did you mean 'fashion_mnist'"));
  }
}
