// Configs written to break the loader rather than to configure a run: self-referencing and
// multiplying YAML aliases, numbers and strings thousands of characters long, deep nesting,
// binary garbage, files that are not regular files. Each is a bad-input error (exit 2) naming
// the file -- never a stack overflow, an endless read or an allocation without bound. The
// first three were found while writing the config fuzz target (fuzz/config_fuzz.cpp).
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <string>

#include "base/error.h"
#include "config/loader.h"
#include "config/tree.h"
#include "config/validate.h"
#include "support/errors.h"
#include "support/files.h"
#include "support/scratch_dir.h"

using namespace dlrun;
using dlrun::testing::require_error;
using dlrun::testing::ScratchDir;

namespace {
void load_mem(const std::string& yaml) { config::load_text(yaml, "mem.yaml"); }
}  // namespace

TEST_CASE("a YAML alias that contains itself is an error, not endless recursion", "[config][hostile]") {
  for (const char* yaml : {"model: {name: mlp}\nx: &a [*a]\n", "model: {name: mlp}\nx: &a {b: *a}\n",
                           "model: &m {name: mlp, sub: *m}\n"}) {
    INFO(yaml);
    require_error([&] { load_mem(yaml); }, {"nested more than 64 levels deep", "alias"});
  }
}

TEST_CASE("aliases that multiply (billion laughs) stop at a bound", "[config][hostile]") {
  std::string yaml = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 9; ++i)
    yaml += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [" + std::string("*a") + std::to_string(i - 1) +
            std::string(", *a") + std::to_string(i - 1) + std::string(", *a") + std::to_string(i - 1) + "]\n";
  require_error([&] { load_mem(yaml); }, {"expands to more than 100000 values"});
}

TEST_CASE("deep nesting is an error with its location", "[config][hostile]") {
  std::string deep = "model: {name: mlp}\ndata: ";
  for (int i = 0; i < 200; ++i) deep += "[";
  for (int i = 0; i < 200; ++i) deep += "]";
  require_error([&] { load_mem(deep + "\n"); }, {"nested more than 64 levels deep"});
}

TEST_CASE("numbers and strings thousands of characters long are plain errors", "[config][hostile]") {
  const std::string digits(50000, '7');
  SECTION("an integer too large for 64 bits") {
    require_error([&] { load_mem(std::string(dlrun::testing::kMinimal) + "train: {epochs: " + digits + "}\n"); },
                  {"expected an integer", "(50000 characters)"});
  }
  SECTION("a float with 50000 digits") {
    require_error([&] { load_mem(std::string(dlrun::testing::kMinimal) + "optim: {lr: " + digits + "}\n"); },
                  {"expected a number", "'7777", "(50000 characters)"});
  }
  SECTION("a 50000-digit exponent") {
    require_error([&] { load_mem(std::string(dlrun::testing::kMinimal) + "optim: {lr: 1e" + digits + "}\n"); },
                  {"expected a number"});
  }
  SECTION("a device name of 50000 characters") {
    auto cfg = config::load_text(std::string(dlrun::testing::kMinimal) + "run: {device: cuda:" + digits + "}\n",
                                 "mem.yaml");
    require_error([&] { config::validate(cfg); }, {"invalid device"});
  }
  SECTION("a long string value is written back quoted or plain, and reads back") {
    auto cfg = config::load_text(std::string(dlrun::testing::kMinimal) + "run: {name: a" + digits + "}\n", "mem.yaml");
    auto again = config::load_text(config::to_yaml(cfg, false), "again.yaml");
    CHECK(again.run.name == cfg.run.name);
  }
}

TEST_CASE("number literals are still read exactly as before", "[config][hostile]") {
  auto lr = [](const std::string& v) {
    return config::load_text(std::string(dlrun::testing::kMinimal) + "optim: {lr: " + v + "}\n", "mem.yaml").optim.lr;
  };
  CHECK(lr("0.5") == 0.5);
  CHECK(lr(".5") == 0.5);
  CHECK(lr("5.") == 5.0);
  CHECK(lr("+1e-3") == 1e-3);
  CHECK(lr("2E+1") == 20.0);
  for (const char* bad : {".", "1e", "e3", "1.2.3", "0x10", ".inf", "1_000", "--1", "1e+"}) {
    INFO(bad);
    require_error([&] { lr(bad); }, {"expected a number"});
  }
  auto epochs = [](const std::string& v) {
    return config::load_text(std::string(dlrun::testing::kMinimal) + "train: {epochs: " + v + "}\n", "mem.yaml")
        .train.epochs;
  };
  CHECK(epochs("+3") == 3);
  for (const char* bad : {"3.0", "3e0", "+", "3 4"}) {
    INFO(bad);
    require_error([&] { epochs(bad); }, {"expected an integer"});
  }
}

TEST_CASE("binary garbage is a YAML or shape error, not a crash", "[config][hostile]") {
  std::string garbage;
  for (int i = 0; i < 4096; ++i) garbage += static_cast<char>((i * 131 + 7) % 256);
  require_error([&] { load_mem(garbage); }, {});
  require_error([&] { load_mem(std::string("\0\0\0model: x", 12)); }, {});
}

TEST_CASE("a config path that is not a regular file is refused by name", "[config][hostile]") {
  ScratchDir dir;
  SECTION("a FIFO would block the read forever") {
    const std::string fifo = dir / "exp.yaml";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    require_error([&] { config::load(fifo); }, {"not a regular file"});
  }
  SECTION("a device") { require_error([&] { config::load("/dev/zero"); }, {"not a regular file"}); }
  SECTION("a file of 17 MiB") {
    const std::string big = dir / "big.yaml";
    dlrun::testing::write_text(big, std::string(17u << 20, '#'));
    require_error([&] { config::load(big); }, {"a config file is at most"});
  }
}

TEST_CASE("a stray top-level ',' is a YAML error, not an endless loop", "[config][hostile]") {
  // yaml-cpp 0.7's LoadAll loops forever on these (found by fuzz/config_fuzz.cpp).
  for (const char* yaml : {",", "model: {name: mlp}\n,\n", ",1\ndata.x=[a]\nrun: &c"}) {
    INFO(yaml);
    require_error([&] { load_mem(yaml); }, {});
  }
  require_error([&] { load_mem(","); }, {"unexpected ','"});
}
