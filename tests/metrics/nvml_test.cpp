// GPU telemetry through NVML loaded at run time, against tests/metrics/fake_nvml.cpp built as
// a shared library (DLRUN_FAKE_NVML is its path): the entry points are bound, the device is
// found by PCI bus id or index, readings are converted, and every way NVML can be missing
// turns telemetry off with a reason instead of failing.
#include <catch2/catch.hpp>
#include <stdlib.h>

#include <cmath>

#include "metrics/nvml.h"

using dlrun::metrics::Nvml;

TEST_CASE("NVML: readings of the GPU at a PCI bus id, or at an index", "[metrics][nvml]") {
  std::string why;
  for (const std::string id : {"0000:3B:00.0", ""}) {
    auto nvml = Nvml::open(id, 0, &why, DLRUN_FAKE_NVML);
    REQUIRE(nvml);
    CHECK(nvml->name() == "Fake GPU 80GB");
    const auto s = nvml->sample();
    REQUIRE(s);
    CHECK(s->util_pct == 87);
    CHECK(s->mem_util_pct == 41);
    CHECK(s->mem_used_mb == 1536);
    CHECK(s->mem_total_mb == 80 * 1024);
    CHECK(s->power_w == Approx(312.5));
    CHECK(s->temp_c == 64);
  }
}

TEST_CASE("NVML: a bus id NVML does not know, with one GPU in sight, reads that GPU", "[metrics][nvml]") {
  std::string why;
  auto nvml = Nvml::open("00000000:AF:00.0", 0, &why, DLRUN_FAKE_NVML);  // a container's numbering
  REQUIRE(nvml);
  CHECK(nvml->name() == "Fake GPU 80GB");
  CHECK(nvml->sample());
}

TEST_CASE("NVML: a sensor the board lacks reads NaN; the rest still report", "[metrics][nvml]") {
  ::setenv("FAKE_NVML_NO_POWER", "1", 1);
  std::string why;
  auto nvml = Nvml::open("", 0, &why, DLRUN_FAKE_NVML);
  const auto s = nvml ? nvml->sample() : std::nullopt;
  ::unsetenv("FAKE_NVML_NO_POWER");
  REQUIRE(s);
  CHECK(std::isnan(s->power_w));
  CHECK(s->temp_c == 64);
}

TEST_CASE("NVML: absent library, failed init or unknown GPU turn telemetry off with a reason", "[metrics][nvml]") {
  std::string why;
  CHECK_FALSE(Nvml::open("", 0, &why, "/nonexistent/libnvidia-ml.so.1"));
  CHECK_THAT(why, Catch::Contains("could not be loaded"));

  // An unknown bus id is an error where NVML sees several GPUs: which one CUDA uses is unknown.
  ::setenv("FAKE_NVML_COUNT", "2", 1);
  CHECK_FALSE(Nvml::open("0000:AF:00.0", 0, &why, DLRUN_FAKE_NVML));
  ::unsetenv("FAKE_NVML_COUNT");
  CHECK_THAT(why, Catch::Contains("PCI bus id 0000:AF:00.0") && Catch::Contains("Not Found"));

  CHECK_FALSE(Nvml::open("", 5, &why, DLRUN_FAKE_NVML));
  CHECK_THAT(why, Catch::Contains("index 5"));

  ::setenv("FAKE_NVML_INIT_FAILS", "1", 1);
  CHECK_FALSE(Nvml::open("", 0, &why, DLRUN_FAKE_NVML));
  ::unsetenv("FAKE_NVML_INIT_FAILS");
  CHECK_THAT(why, Catch::Contains("nvmlInit failed: Driver Not Loaded"));

  // A library that is not NVML at all (libz has none of its entry points).
  CHECK_FALSE(Nvml::open("", 0, &why, "libz.so.1"));
  CHECK_THAT(why, Catch::Contains("lacks an NVML entry point"));
}
