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
