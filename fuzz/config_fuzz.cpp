// Fuzz target: the config loader -- YAML parsing, `${env:}` interpolation, Hydra-style
// overrides, typed binding and the cross-field validation, as `dlrun config validate` runs them.
//
// Input: YAML text, then optionally "\n#--\n" and one override per line ("optim.lr=0.1").
// Inputs that name a `base:` file are skipped: inheritance reads another file by path, which
// the fuzzer cannot control (and /dev/zero would make it read forever); the loader refuses
// non-regular files, tested in tests/config/.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.h"
#include "common.h"
#include "config/loader.h"
#include "config/tree.h"
#include "config/validate.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Fixed values for ${env:...}; everything else resolves to its default or is an error.
  ::setenv("DLRUN_FUZZ_ROOT", "/nonexistent", 1);
  ::setenv("DLRUN_FUZZ_LR", "0.1", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto [yaml, rest] = dlrun::fuzz::split(in, "\n#--\n");
  std::vector<std::string> overrides;
  for (std::string_view r = rest; !r.empty();) {
    const auto [line, next] = dlrun::fuzz::split(r, "\n");
    if (!line.empty()) overrides.emplace_back(line);
    r = next;
  }
  const std::string text(yaml);
  const std::string file = dlrun::fuzz::scratch() + "/fuzz.yaml";
  try {
    auto tree = dlrun::config::parse_yaml(text, file);
    if (tree->get("base")) return 0;
    auto cfg = dlrun::config::load_text(text, file, overrides);
    dlrun::config::validate(cfg);
    // What config show and every run directory's config.yaml do with it: it must read back.
    const std::string shown = dlrun::config::to_yaml(cfg, false);
    dlrun::config::load_text(shown, file);
  } catch (const dlrun::Error&) {
  }
  return 0;
}
