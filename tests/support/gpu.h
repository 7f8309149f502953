// For the Catch2 cases tagged [gpu]: without a CUDA device they print the line that ctest's
// SKIP_REGULAR_EXPRESSION turns into "skipped" (tests/CMakeLists.txt) and return -- unless
// DLRUN_REQUIRE_GPU=1 (bench/gpu_suite.sh sets it): then a missing device fails the case, so a
// GPU host whose CUDA is broken cannot pass the suite by skipping it, under ctest or run
// directly (compute-sanitizer runs the binary itself).
#pragma once

#include <catch2/catch.hpp>
#include <torch/cuda.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace dlrun::testing {

/// True (after printing "SKIP: no CUDA device") when no CUDA device is visible; a failed case
/// instead when DLRUN_REQUIRE_GPU=1.
inline bool no_cuda() {
  if (torch::cuda::is_available()) return false;
  const char* required = std::getenv("DLRUN_REQUIRE_GPU");
  if (required != nullptr && std::string(required) == "1")
    FAIL("DLRUN_REQUIRE_GPU=1 but torch sees no CUDA device (driver, visible devices, `dlrun info`)");
  std::printf("SKIP: no CUDA device\n");
  return true;
}

}  // namespace dlrun::testing
