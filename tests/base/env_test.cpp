// The environment getter (src/base/env.h) and this machine's name (src/base/host.h).
#include <catch2/catch.hpp>

#include <unistd.h>

#include "base/env.h"
#include "base/host.h"
#include "support/env.h"

using namespace dlrun;
using dlrun::testing::ScopedEnv;

TEST_CASE("env gives \"\" for unset and empty alike; env_if_set tells them apart", "[base][env]") {
  {
    ScopedEnv v("DLRUN_TEST_ENV_VALUE", "x y");
    CHECK(env("DLRUN_TEST_ENV_VALUE") == "x y");
    CHECK(env_if_set("DLRUN_TEST_ENV_VALUE") == std::optional<std::string>("x y"));
  }
  {
    ScopedEnv v("DLRUN_TEST_ENV_VALUE", "");
    CHECK(env("DLRUN_TEST_ENV_VALUE") == "");
    CHECK(env_if_set("DLRUN_TEST_ENV_VALUE") == std::optional<std::string>(""));
  }
  ScopedEnv v("DLRUN_TEST_ENV_VALUE", nullptr);
  CHECK(env("DLRUN_TEST_ENV_VALUE") == "");
  CHECK_FALSE(env_if_set("DLRUN_TEST_ENV_VALUE").has_value());
}

TEST_CASE("hostname is the kernel's name for this machine", "[base][env]") {
  char buf[256] = {0};
  REQUIRE(::gethostname(buf, sizeof(buf) - 1) == 0);
  CHECK(hostname("?") == (buf[0] ? std::string(buf) : "?"));
}
