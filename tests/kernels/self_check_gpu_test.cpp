// The gates of src/kernels/self_check.h on a real GPU: the binary carries code the device runs
// and the runtime finds it; the self-check passes the CUDA kernels in every dtype and memory
// format the models use (its time printed for docs/benchmarks.md: target well under a second); and
// against tolerances a million times tighter than the tests' it fails -- the check bites.
#include <catch2/catch.hpp>

#include <cstdio>

#include "kernels/device_query.h"
#include "kernels/self_check.h"
#include "support/gpu.h"
#include "train/step/device.h"

using namespace dlrun;
using dlrun::testing::no_cuda;

TEST_CASE("the fused kernels' capability check and self-check on this GPU", "[gpu][kernels][sanitize]") {
  if (no_cuda()) return;
  const torch::Device cuda(torch::kCUDA, 0);
  const auto image = cuda::kernel_image(0);
  INFO("compiled: " << cuda::compiled_archs() << "; runtime: " << image.arch << image.error);
  CHECK(image.ok);
  const auto here = train::fused_kernels_here(cuda);
  CHECK(here.runs);
  std::printf("fused kernels on cuda:0: %s (built for %s)\n", here.image.c_str(), cuda::compiled_archs().c_str());
  for (const auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (const bool channels_last : {false, true}) {
      INFO(c10::toString(dtype) << (channels_last ? " channels_last" : " contiguous"));
      (void)kernels::self_check(cuda, dtype, channels_last);  // the first call pays for CUDA's start
      const auto r = kernels::self_check(cuda, dtype, channels_last);
      std::printf("self-check cuda:0 %s %s: %s, worst %.3g of the tolerance (in %s), %.4f s\n",
                  c10::toString(dtype), channels_last ? "channels_last" : "contiguous", r.passed ? "passed" : "FAILED",
                  r.worst, r.worst_in.c_str(), r.seconds);
      CHECK(r.passed);  // (its time is printed for docs/benchmarks.md: a timed assertion would fail under the sanitizers)
      const auto strict = kernels::self_check(cuda, dtype, channels_last, 1e-6);
      CHECK_FALSE(strict.passed);  // deliberately wrong tolerances: the check bites
    }
  }
}
