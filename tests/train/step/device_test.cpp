// train/device: which fused path a config turns on where (model.fused_conv_bn_relu), read from
// YAML as users write it.
#include <catch2/catch.hpp>

#include "support/capture.h"
#include "support/errors.h"

#include "config/loader.h"
#include "train/step/device.h"

using namespace dlrun;

TEST_CASE("model.fused_conv_bn_relu: auto fuses on CUDA in NCHW only, true and false everywhere", "[train][kernels]") {
  const torch::Device cpu(torch::kCPU), cuda(torch::kCUDA, 0);
  auto cfg_with = [](const std::string& value) {
    return config::load_text("model: {name: convnet, fused_conv_bn_relu: " + value + "}\ndata: {name: synthetic}\n",
                             "fused.yaml");
  };
  // An H100 with the default build's code (the capability check, fed that GPU).
  const auto h100 = kernels::fused_kernels_run_on(9, 0, "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120 compute_120");
  const Config defaults = config::load_text(dlrun::testing::kMinimal, "defaults.yaml");
  CHECK(defaults.model.fused_conv_bn_relu == FusedKernels::kAuto);
  CHECK(train::use_fused_kernels(defaults, cuda, h100));
  CHECK_FALSE(train::use_fused_kernels(defaults, cpu));
  // In channels_last cuDNN's BatchNorm is faster than the fused kernels (measured on an H200):
  // auto leaves the modules there, and true still fuses.
  const Config nhwc = config::load_text(dlrun::testing::kMinimal, "nhwc.yaml", {"model.channels_last=true"});
  CHECK_FALSE(train::use_fused_kernels(nhwc, cuda, h100));
  CHECK(train::use_fused_kernels(config::load_text(dlrun::testing::kMinimal, "nhwc-on.yaml",
                                                   {"model.channels_last=true", "model.fused_conv_bn_relu=true"}),
                                 cuda, h100));
  // YAML's booleans are two of the key's values, so configs written for the boolean key still load.
  const Config on = cfg_with("true"), off = cfg_with("false");
  CHECK(train::use_fused_kernels(on, cpu));
  CHECK(train::use_fused_kernels(on, cuda, h100));
  CHECK_FALSE(train::use_fused_kernels(off, cpu));
  CHECK_FALSE(train::use_fused_kernels(off, cuda, h100));
  CHECK(train::fast_paths(on)["fused_conv_bn_relu"] == "true");
  CHECK_THAT(train::describe_fast_paths(defaults, cpu),
             Catch::Contains("conv-BN-ReLU path modules (on the CPU ATen's BatchNorm is faster"));
  CHECK_THAT(train::describe_fast_paths(on, cpu), Catch::Contains("conv-BN-ReLU path dlrun (model.fused_conv_bn_relu: true)"));
  CHECK_THROWS_WITH(cfg_with("sometimes"),
                    Catch::Contains("invalid value 'sometimes' (valid: auto, true, false, cudnn)"));
  CHECK(train::use_fused_kernels(config::load_text(dlrun::testing::kMinimal, "o.yaml", {"model.fused_conv_bn_relu=true"}),
                                 cpu));
}

TEST_CASE("model.fused_conv_bn_relu: cudnn takes cuDNN's fused ops for fp16/bf16 channels_last on CUDA",
          "[train][kernels]") {
  const torch::Device cpu(torch::kCPU), cuda(torch::kCUDA, 0);
  const auto h100 = kernels::fused_kernels_run_on(9, 0, "sm_90");
  auto cfg = [](std::vector<std::string> overrides) {
    overrides.push_back("model.fused_conv_bn_relu=cudnn");
    return config::load_text(dlrun::testing::kMinimal, "cudnn.yaml", overrides);
  };
  for (const char* dtype : {"fp16", "bf16"}) {
    const Config c = cfg({"model.channels_last=true", "amp.enabled=true", std::string("amp.dtype=") + dtype});
    CHECK(train::batchnorm_path(c, cuda).path == kernels::BnPath::kCudnn);
    CHECK(train::use_fused_kernels(c, cuda, h100));
    // On the CPU: the modules, saying why.
    CHECK(train::batchnorm_path(c, cpu).path == kernels::BnPath::kModules);
    CHECK_FALSE(train::use_fused_kernels(c, cpu));
    CHECK_THAT(train::describe_fast_paths(c, cpu),
               Catch::Contains("conv-BN-ReLU path modules (cuDNN's fused BatchNorm-activation needs a CUDA device)"));
  }
  // float32, or NCHW: cuDNN does not take them, dlrun's kernels run.
  CHECK(train::batchnorm_path(cfg({"model.channels_last=true"}), cuda).path == kernels::BnPath::kDlrun);
  CHECK(train::batchnorm_path(cfg({"amp.enabled=true", "amp.dtype=fp16"}), cuda).path == kernels::BnPath::kDlrun);
  // auto in channels_last with amp: the modules (cuDNN's fused ops are not measured yet).
  const Config autocl = config::load_text(dlrun::testing::kMinimal, "a.yaml",
                                          {"model.channels_last=true", "amp.enabled=true", "amp.dtype=fp16"});
  CHECK(train::batchnorm_path(autocl, cuda).path == kernels::BnPath::kModules);
}

TEST_CASE("a GPU the binary carries no code for: the modules run, with one warning", "[train][kernels][gpu_safety]") {
  const torch::Device cuda(torch::kCUDA, 0);
  const Config defaults = config::load_text(dlrun::testing::kMinimal, "defaults.yaml");
  const Config on = config::load_text(dlrun::testing::kMinimal, "on.yaml", {"model.fused_conv_bn_relu=true"});
  // A T4 (7.5) under a build narrowed to the H100 (TORCH_CUDA_ARCH_LIST=9.0, no PTX).
  const auto t4 = kernels::fused_kernels_run_on(7, 5, "sm_90");
  REQUIRE_FALSE(t4.runs);
  std::string first, second;
  first = dlrun::testing::capture_stderr([&] { CHECK_FALSE(train::use_fused_kernels(defaults, cuda, t4)); });
  second = dlrun::testing::capture_stderr([&] { CHECK_FALSE(train::use_fused_kernels(on, cuda, t4)); });
  CHECK_THAT(first, Catch::Contains("the fused kernels cannot run on cuda:0: compute capability 7.5 is not among") &&
                        Catch::Contains("the modules (conv, BatchNorm, ReLU) run instead"));
  CHECK(second.empty());  // said once
  // Where the machine has no CUDA device at all (as here, without a GPU), the same answer.
  if (!torch::cuda::is_available()) {
    CHECK_FALSE(train::fused_kernels_here(cuda).runs);
    CHECK_FALSE(train::use_fused_kernels(defaults, cuda));
  }
  CHECK(train::fused_kernels_here(torch::kCPU).runs);
}

TEST_CASE("train.tf32 reads back the same through torch's legacy and new TF32 APIs", "[train][gpu_safety]") {
  auto& ctx = at::globalContext();
  for (const bool tf32 : {true, false, true}) {
    INFO("tf32 " << tf32);
    train::CudaSettings s;
    s.tf32 = tf32;
    train::apply_cuda_settings(s);
    // The legacy readers (what cuBLAS, cuDNN and torch.backends.*.allow_tf32 ask) answer
    // instead of refusing a "mix of the legacy and new APIs"...
    bool cublas = !tf32, cudnn = !tf32, cudnn_conv = !tf32;
    at::Float32MatmulPrecision matmul = at::Float32MatmulPrecision::MEDIUM;
    REQUIRE_NOTHROW(cublas = ctx.allowTF32CuBLAS());
    REQUIRE_NOTHROW(cudnn = ctx.allowTF32CuDNN());
    REQUIRE_NOTHROW(cudnn_conv = ctx.allowTF32CuDNN(at::Float32Op::CONV));
    REQUIRE_NOTHROW(matmul = ctx.float32MatmulPrecision());
    CHECK(cublas == tf32);
    CHECK(cudnn == tf32);
    CHECK(cudnn_conv == tf32);
    CHECK(matmul == (tf32 ? at::Float32MatmulPrecision::HIGH : at::Float32MatmulPrecision::HIGHEST));
    // ...and the new one agrees with them.
    CHECK((ctx.float32Precision(at::Float32Backend::CUDA, at::Float32Op::MATMUL) == at::Float32Precision::TF32) ==
          tf32);
    CHECK((ctx.float32Precision(at::Float32Backend::CUDA, at::Float32Op::CONV) == at::Float32Precision::TF32) == tf32);
    CHECK((ctx.float32Precision(at::Float32Backend::CUDA, at::Float32Op::RNN) == at::Float32Precision::TF32) == tf32);
  }
}
