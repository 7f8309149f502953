// The dlrun_kernels object library reaches the executables: its TORCH_LIBRARY(dlrun)
// registration is present, so a second definition of the namespace is refused (a static
// library would have dropped the registration and this would succeed).
#include <catch2/catch.hpp>

#include <torch/library.h>

TEST_CASE("the dlrun operator namespace is registered with the dispatcher", "[kernels]") {
  try {
    torch::Library again(torch::Library::DEF, "dlrun", std::nullopt, __FILE__, __LINE__);
    FAIL("TORCH_LIBRARY(dlrun) is not linked in: a second definition was accepted");
  } catch (const c10::Error& e) {
    CHECK_THAT(e.what_without_backtrace(), Catch::Contains("Only a single TORCH_LIBRARY"));
  }
}

// Each backend's kernels are registered for its own dispatch key. Without them the operators
// would still run, through the CompositeExplicitAutograd reference, and every comparison with
// the reference would pass: only the registration tells the kernels apart from it. CUDA's are
// checked wherever they are compiled in (DLRUN_WITH_CUDA: the toolkit and a CUDA LibTorch),
// with or without a GPU.
TEST_CASE("dlrun's CPU and CUDA kernels are registered for their dispatch keys", "[kernels]") {
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const char* name : {"dlrun::bn_relu", "dlrun::bn_relu_backward", "dlrun::bn_add_relu",
                           "dlrun::bn_add_relu_backward"}) {
    INFO(name);
    const auto op = dispatcher.findSchema({name, ""});
    REQUIRE(op.has_value());
    CHECK(op->hasKernelForDispatchKey(c10::DispatchKey::CPU));
#ifdef DLRUN_WITH_CUDA
    CHECK(op->hasKernelForDispatchKey(c10::DispatchKey::CUDA));
#endif
  }
  const auto conv = dispatcher.findSchema({"dlrun::conv_bias_relu", ""});
  REQUIRE(conv.has_value());
#ifdef DLRUN_WITH_CUDA
  CHECK(conv->hasKernelForDispatchKey(c10::DispatchKey::CUDA));  // cuDNN's fused conv-bias-ReLU
#endif
}
