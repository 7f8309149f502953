// Which conv-BN-ReLU path runs where (kernels/bn_path.h): the policy, the table `auto` follows,
// and what cuDNN's fused BatchNorm-activation takes. Pure functions: any GPU is fed in.
#include <catch2/catch.hpp>

#include "kernels/bn_path.h"

using namespace dlrun::kernels;

TEST_CASE("auto: dlrun's kernels on CUDA in NCHW, the modules in channels_last and on the CPU", "[kernels]") {
  for (const auto dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    CHECK(choose_bn_path(BnPolicy::kAuto, true, 9, dtype, false).path == BnPath::kDlrun);
    const auto cl = choose_bn_path(BnPolicy::kAuto, true, 9, dtype, true);
    CHECK(cl.path == BnPath::kModules);
    CHECK_THAT(cl.why, Catch::Contains("0.91x"));  // the evidence travels with the choice
    CHECK(choose_bn_path(BnPolicy::kAuto, false, 0, dtype, false).path == BnPath::kModules);
    CHECK(choose_bn_path(BnPolicy::kAuto, false, 0, dtype, true).path == BnPath::kModules);
  }
  // No measurement picks cuDNN's fused operators yet (they have not run on a GPU).
  for (const bool cl : {false, true})
    for (const int major : {7, 8, 9, 10, 12})
      CHECK(choose_bn_path(BnPolicy::kAuto, true, major, at::kHalf, cl).path != BnPath::kCudnn);
}

TEST_CASE("true, false and cudnn: what each asks for, and cudnn's fallbacks", "[kernels]") {
  CHECK(choose_bn_path(BnPolicy::kDlrun, false, 0, at::kFloat, true).path == BnPath::kDlrun);
  CHECK(choose_bn_path(BnPolicy::kDlrun, true, 9, at::kBFloat16, true).path == BnPath::kDlrun);
  CHECK(choose_bn_path(BnPolicy::kModules, true, 9, at::kBFloat16, false).path == BnPath::kModules);
  CHECK(choose_bn_path(BnPolicy::kCudnn, true, 9, at::kHalf, true).path == BnPath::kCudnn);
  CHECK(choose_bn_path(BnPolicy::kCudnn, true, 9, at::kBFloat16, true).path == BnPath::kCudnn);
  const auto fp32 = choose_bn_path(BnPolicy::kCudnn, true, 9, at::kFloat, true);
  CHECK(fp32.path == BnPath::kDlrun);
  CHECK_THAT(fp32.why, Catch::Contains("channels_last only"));
  CHECK(choose_bn_path(BnPolicy::kCudnn, true, 9, at::kHalf, false).path == BnPath::kDlrun);
  const auto cpu = choose_bn_path(BnPolicy::kCudnn, false, 0, at::kHalf, true);
  CHECK(cpu.path == BnPath::kModules);
  CHECK_THAT(cpu.why, Catch::Contains("CUDA"));
  CHECK(std::string(name_of(BnPath::kCudnn)) == "cudnn");
  CHECK(std::string(name_of(BnPath::kDlrun)) == "dlrun");
  CHECK(std::string(name_of(BnPath::kModules)) == "modules");
}

TEST_CASE("what cuDNN's fused BatchNorm-activation takes", "[kernels]") {
  CHECK(cudnn_bn_takes(at::kHalf, true, 64, 1e-5, true, at::kFloat));
  CHECK(cudnn_bn_takes(at::kBFloat16, true, 2048, 1e-3, true, at::kFloat));
  CHECK_FALSE(cudnn_bn_takes(at::kHalf, true, 64, 1e-5, /*training=*/false, at::kFloat));  // no inference form
  CHECK_FALSE(cudnn_bn_takes(at::kHalf, /*channels_last=*/false, 64, 1e-5, true, at::kFloat));
  CHECK_FALSE(cudnn_bn_takes(at::kHalf, true, 6, 1e-5, true, at::kFloat));     // channels not a multiple of 4
  CHECK(cudnn_bn_takes(at::kHalf, true, 64, 1e-6, true, at::kFloat));          // CUDNN_BN_MIN_EPSILON is 0
  CHECK_FALSE(cudnn_bn_takes(at::kHalf, true, 64, 0.0, true, at::kFloat));
  CHECK_FALSE(cudnn_bn_takes(at::kFloat, true, 64, 1e-5, true, at::kFloat));   // fp32 input
  CHECK_FALSE(cudnn_bn_takes(at::kHalf, true, 64, 1e-5, true, at::kHalf));     // half parameters
  CHECK_FALSE(cudnn_bn_takes(at::kHalf, true, 0, 1e-5, true, at::kFloat));
}

TEST_CASE("the CUDA operators' path is process-wide and dlrun's by default", "[kernels]") {
  const BnPath before = cuda_bn_path();
  set_cuda_bn_path(BnPath::kCudnn);
  CHECK(cuda_bn_path() == BnPath::kCudnn);
  set_cuda_bn_path(BnPath::kDlrun);
  CHECK(cuda_bn_path() == BnPath::kDlrun);
  set_cuda_bn_path(before);
}
