// train/device: which fused path a config turns on where (model.fused_conv_bn_relu), read from
// YAML as users write it.
#include <catch2/catch.hpp>

#include "support/errors.h"

#include "config/loader.h"
#include "train/device.h"

using namespace dlrun;

TEST_CASE("model.fused_conv_bn_relu: auto fuses on CUDA only, true and false everywhere", "[train][kernels]") {
  const torch::Device cpu(torch::kCPU), cuda(torch::kCUDA, 0);
  auto cfg_with = [](const std::string& value) {
    return config::load_text("model: {name: convnet, fused_conv_bn_relu: " + value + "}\ndata: {name: synthetic}\n",
                             "fused.yaml");
  };
  const Config defaults = config::load_text(dlrun::testing::kMinimal, "defaults.yaml");
  CHECK(defaults.model.fused_conv_bn_relu == FusedKernels::kAuto);
  CHECK(train::use_fused_kernels(defaults, cuda));
  CHECK_FALSE(train::use_fused_kernels(defaults, cpu));
  // YAML's booleans are two of the key's values, so configs written for the boolean key still load.
  const Config on = cfg_with("true"), off = cfg_with("false");
  CHECK(train::use_fused_kernels(on, cpu));
  CHECK(train::use_fused_kernels(on, cuda));
  CHECK_FALSE(train::use_fused_kernels(off, cpu));
  CHECK_FALSE(train::use_fused_kernels(off, cuda));
  CHECK(train::fast_paths(on)["fused_conv_bn_relu"] == "true");
  CHECK(train::describe_fast_paths(defaults, cpu).find("fused_conv_bn_relu off") != std::string::npos);
  CHECK(train::describe_fast_paths(on, cpu).find("fused_conv_bn_relu on") != std::string::npos);
  CHECK_THROWS_WITH(cfg_with("sometimes"), Catch::Contains("invalid value 'sometimes' (valid: auto, true, false)"));
  CHECK(train::use_fused_kernels(config::load_text(dlrun::testing::kMinimal, "o.yaml", {"model.fused_conv_bn_relu=true"}),
                                 cpu));
}
