// Config choices have one source: each registry's names (models, datasets, transforms) equal
// the choices the schema accepts, so `config validate` and the code can never disagree.
#include <catch2/catch.hpp>

#include <algorithm>

#include "config/schema.h"
#include "data/dataset.h"
#include "data/transforms.h"
#include "models/model.h"

using namespace dlrun;

namespace {
std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}
std::vector<std::string> choices(const std::string& key) {
  Config c;
  const auto sections = config::describe(c);
  const auto* f = config::find_field(sections, key);
  REQUIRE(f != nullptr);
  return f->choices;
}
}  // namespace

TEST_CASE("every registry's names are the schema's choices", "[train][registries]") {
  CHECK(sorted(models::names()) == sorted(choices("model.name")));
  CHECK(sorted(data::names()) == sorted(choices("data.name")));
  CHECK(sorted(data::augment_names()) == sorted(choices("data.augment")));
}
