// For the Catch2 cases tagged [gpu]: without a CUDA device they print the line that ctest's
// SKIP_REGULAR_EXPRESSION turns into "skipped" (tests/CMakeLists.txt) and return.
#pragma once

#include <torch/cuda.h>

#include <cstdio>

namespace dlrun::testing {

/// True (after printing "SKIP: no CUDA device") when no CUDA device is visible.
inline bool no_cuda() {
  if (torch::cuda::is_available()) return false;
  std::printf("SKIP: no CUDA device\n");
  return true;
}

}  // namespace dlrun::testing
