// `dlrun models [PATTERN] [--json]`: the zoo, as timm.list_models lists its models: each name
// with its family, whether it reproduces torchvision's model weight for weight, its parameters,
// the image side it is usually trained at, and the dlrun features that apply (docs/models.md).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fnmatch.h>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "base/error.h"
#include "cli/app.h"
#include "models/model.h"

namespace dlrun::cli {
namespace {

struct ModelsArgs {
  std::string pattern;
  bool json = false;
};

int run_models(const ModelsArgs& a) {
  std::vector<models::ZooEntry> listed;
  for (auto& z : models::zoo())
    if (a.pattern.empty() || ::fnmatch(a.pattern.c_str(), z.name.c_str(), 0) == 0) listed.push_back(std::move(z));
  if (listed.empty())
    fail_input("no model name matches '{}' (dlrun models lists them all)", a.pattern);
  if (a.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& z : listed)
      j.push_back({{"name", z.name}, {"family", z.family}, {"torchvision", z.torchvision},
                   {"parameters", z.parameters}, {"image_size", z.image_size},
                    {"min_image_size", z.min_image_size}, {"fixed_image_size", z.fixed_image_size},
                    {"features", z.features}, {"fuses", z.fuses}});
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%-20s %-12s %-12s %10s %6s  %s\n", "name", "family", "weights", "params", "image", "features");
  for (const auto& z : listed)
    std::printf("%-20s %-12s %-12s %9.1fM %6lld  %s\n", z.name.c_str(), z.family.c_str(),
                z.torchvision ? "torchvision" : "dlrun", static_cast<double>(z.parameters) / 1e6,
                static_cast<long long>(z.image_size), fmt::format("{}", fmt::join(z.features, " ")).c_str());
  std::printf("(torchvision: a file torch.save(torchvision.models.NAME().state_dict()) wrote loads with model.init "
              "and gives torchvision's logits; params for 1000 classes, dlrun's models for 10; docs/models.md)\n");
  return 0;
}

}  // namespace

void setup_models(CLI::App& app) {
  auto a = std::make_shared<ModelsArgs>();
  auto* cmd = app.add_subcommand("models", "List the models of model.name: family, parameters, image size, features");
  cmd->add_option("pattern", a->pattern, "Only the names that match this shell pattern, e.g. 'resnext*'");
  cmd->add_flag("--json", a->json, "One JSON array of the models");
  cmd->callback([a] {
    if (const int rc = run_models(*a); rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace dlrun::cli
