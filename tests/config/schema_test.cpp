// The schema table is the one source of every key's choices, docs and defaults: enum keys
// parse to their enum and print back by name, and the key reference is generated from it.
#include <catch2/catch.hpp>

#include "config/loader.h"
#include "config/schema.h"
#include "support/errors.h"

using namespace dlrun;
using dlrun::testing::kMinimal;

TEST_CASE("enum keys parse to their values and print back by name", "[config][schema]") {
  const Config c = config::load_text("data: {name: synthetic}\n"
                                     "optim: {name: adamw}\nsched: {name: onecycle}\nmodel: {name: mlp, stem: cifar}\n"
                                         "amp: {dtype: bf16}\ndist: {backend: gloo}\npreemption: {watch: file, endpoint: /x}\n"
                                         "log: {progress: lines}\ntrain: {nonfinite: skip}\n",
                                     "mem.yaml");
  CHECK(c.optim.name == OptimName::kAdamw);
  CHECK(c.sched.name == SchedName::kOnecycle);
  CHECK(c.model.stem == ResnetStem::kCifar);
  CHECK(c.amp.dtype == AmpDtype::kBf16);
  CHECK(c.dist.backend == DistBackend::kGloo);
  CHECK(c.preemption.watch == NoticeSource::kFile);
  CHECK(c.log.progress == ProgressMode::kLines);
  CHECK(c.train.nonfinite == NonfinitePolicy::kSkip);
  const std::string yaml = config::to_yaml(c, false);
  for (const char* line : {"  name: adamw\n", "  name: onecycle\n", "  stem: cifar\n", "  dtype: bf16\n", "  backend: gloo\n",
                           "  watch: file\n", "  progress: lines\n", "  nonfinite: skip\n"})
    CHECK_THAT(yaml, Catch::Contains(line));
  CHECK(config::to_yaml(config::load_text(yaml, "back.yaml"), false) == yaml);
}

TEST_CASE("an enum key lists its names from the enum itself", "[config][schema]") {
  Config c;
  const auto sections = config::describe(c);
  const config::Field* f = config::find_field(sections, "train.nonfinite");
  REQUIRE(f != nullptr);
  CHECK(f->kind == config::Kind::kEnum);
  CHECK(f->choices == std::vector<std::string>{"stop", "skip"});
  CHECK(config::find_field(sections, "optim.name")->choices == std::vector<std::string>{"sgd", "adamw", "rmsprop", "rmsprop_tf", "lamb", "lars"});
  CHECK(config::find_field(sections, "optim.nothing") == nullptr);
  CHECK(std::string(name_of(NoticeSource::kAzure)) == "azure");
  dlrun::testing::expect_load_error(std::string(kMinimal) + "train: {nonfinite: ignore}\n",
                                    {"train.nonfinite", "", 3, 20, "invalid value 'ignore' (valid: stop, skip)"});
}

TEST_CASE("the key reference lists every key with its default, once", "[config][schema]") {
  const std::string md = config::reference_markdown();
  for (const auto& key : config::all_keys()) {
    const std::string cell = "| `" + key + "` |";
    INFO(key);
    CHECK(md.find(cell) != std::string::npos);
    CHECK(md.find(cell) == md.rfind(cell));
  }
  CHECK_THAT(md, Catch::Contains("| `train.nonfinite` | choice | `stop` | `stop`, `skip` |"));
  CHECK_THAT(md, Catch::Contains("| `model.name` | string | (required) |"));
  CHECK_THAT(md, Catch::Contains("| `optim.lr` | float | `0.1` | (0, 1000] |"));
  // A '|' inside a cell would break the table: every row has exactly six separators.
  for (size_t start = 0, end; (end = md.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string row = md.substr(start, end - start);
    if (row.rfind("| `", 0) != 0) continue;
    size_t bars = 0;
    for (size_t i = 0; i < row.size(); ++i) bars += row[i] == '|' && (i == 0 || row[i - 1] != '\\');
    INFO(row);
    CHECK(bars == 6);
  }
}

TEST_CASE("an enum's config spelling parses back to it; another word is refused naming the choices",
          "[config][enum]") {
  CHECK(dlrun::parse_enum<dlrun::OptimName>("adamw") == dlrun::OptimName::kAdamw);
  CHECK(dlrun::name_of(*dlrun::parse_enum<dlrun::SaveErrorPolicy>("stop")) == std::string("stop"));
  CHECK_FALSE(dlrun::parse_enum<dlrun::OptimName>("adam").has_value());
  dlrun::testing::require_error([] { dlrun::parse_enum_or_fail<dlrun::SaveErrorPolicy>("retry", "--on-error"); },
                                {"--on-error retry: expected one of continue, stop"});
}
