# DLRUN_CUDA=AUTO|ON|OFF. AUTO compiles the .cu sources whenever a CUDA toolkit (nvcc) is
# present, even on machines without a GPU (CI does this); ON fails without one.
set(DLRUN_CUDA AUTO CACHE STRING "Compile CUDA sources: AUTO|ON|OFF")
set_property(CACHE DLRUN_CUDA PROPERTY STRINGS AUTO ON OFF)

set(DLRUN_WITH_CUDA OFF)
if(NOT DLRUN_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # The architectures come from TORCH_CUDA_ARCH_LIST alone (cmake/Dependencies.cmake): torch's
    # cmake ignores CMAKE_CUDA_ARCHITECTURES. No static runtime either: the wheel's shared one
    # is linked (Targets.cmake).
    set(CMAKE_CUDA_RUNTIME_LIBRARY None)
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(DLRUN_WITH_CUDA ON)
  elseif(DLRUN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "DLRUN_CUDA=ON but no CUDA compiler was found (set CMAKE_CUDA_COMPILER)")
  endif()
endif()

# What LibTorch itself was built with (a CPU-only wheel has no libtorch_cuda).
set(DLRUN_TORCH_HAS_CUDA OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES OR EXISTS "${DLRUN_TORCH_LIBDIR}/libtorch_cuda.so")
  set(DLRUN_TORCH_HAS_CUDA ON)
endif()
# cuDNN: the header (the summary) and, for the fused BatchNorm-activation calls of
# src/kernels/bn_cudnn.cu, the library LibTorch itself loads -- the wheel's
# site-packages/nvidia/cudnn (only libcudnn.so.9 there, no unversioned name), first: a toolkit
# path would land in the binary's RUNPATH (the GPU suite's safety part refuses that).
find_path(DLRUN_CUDNN_INCLUDE cudnn.h
          HINTS "${DLRUN_TORCH_LIBDIR}/../../nvidia/cudnn/include" /usr/local/cuda/include ${CUDAToolkit_INCLUDE_DIRS})
find_library(DLRUN_CUDNN_LIBRARY NAMES libcudnn.so.9 cudnn NAMES_PER_DIR
             HINTS "${DLRUN_TORCH_LIBDIR}/../../nvidia/cudnn/lib" /usr/local/cuda/lib64 ${CUDAToolkit_LIBRARY_DIR})
if(DLRUN_WITH_CUDA AND DLRUN_TORCH_HAS_CUDA AND (NOT DLRUN_CUDNN_INCLUDE OR NOT DLRUN_CUDNN_LIBRARY))
  message(FATAL_ERROR "dlrun's CUDA build needs cuDNN's header and library (the torch wheel's nvidia/cudnn, next to "
                      "${DLRUN_TORCH_LIBDIR}); found: '${DLRUN_CUDNN_INCLUDE}', '${DLRUN_CUDNN_LIBRARY}'")
endif()
# NCCL's header: the wheel's own first (site-packages/nvidia/nccl, next to torch/lib), since
# ProcessGroupNCCL's layout depends on the NCCL version its header announces and dlrun must see
# the one LibTorch was built with; then the toolkit's and the system's.
find_path(DLRUN_NCCL_INCLUDE nccl.h
          HINTS "${DLRUN_TORCH_LIBDIR}/../../nvidia/nccl/include" /usr/local/cuda/include ${CUDAToolkit_INCLUDE_DIRS})
if(DLRUN_CUDA STREQUAL "ON" AND DLRUN_TORCH_HAS_CUDA AND NOT DLRUN_NCCL_INCLUDE)
  message(FATAL_ERROR "DLRUN_CUDA=ON with a CUDA LibTorch, but nccl.h was not found (looked next to "
                      "${DLRUN_TORCH_LIBDIR} and in the CUDA toolkit): without it dlrun cannot use NCCL")
endif()
