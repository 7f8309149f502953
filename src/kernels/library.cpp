// The `dlrun` operator namespace of the PyTorch dispatcher. Custom operators (the fused
// kernels) are declared here with TORCH_LIBRARY and implemented per device with
// TORCH_LIBRARY_IMPL: a reference composed of ATen ops for the CPU, CUDA kernels in .cu files
// beside it. This file belongs to the dlrun_kernels object library (cmake/Targets.cmake), so
// the registration reaches every executable even though no code calls it by name.
#include <torch/library.h>

TORCH_LIBRARY(dlrun, m) {
  // No operators yet: the namespace is registered so that a second TORCH_LIBRARY(dlrun)
  // anywhere fails loudly, and tests/kernels/library_test.cpp checks the registration is
  // linked in.
}
