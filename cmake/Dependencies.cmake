# Third-party libraries. Where each comes from: third_party/README.md. Nothing is vendored.
find_package(CLI11 CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(ZLIB REQUIRED)
find_package(PNG REQUIRED)
find_package(Threads REQUIRED)
# SHA-256 of every checkpoint byte (OpenSSL's libcrypto; Debian: libssl-dev).
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_package(PkgConfig)
# The XML answers of S3 and STS, read as untrusted input (Debian: libexpat1-dev).
find_package(EXPAT REQUIRED)

# libjpeg-turbo's TurboJPEG API (Debian: libturbojpeg0-dev).
find_path(TURBOJPEG_INCLUDE_DIR turbojpeg.h)
find_library(TURBOJPEG_LIBRARY turbojpeg)
if(NOT TURBOJPEG_INCLUDE_DIR OR NOT TURBOJPEG_LIBRARY)
  message(FATAL_ERROR "libturbojpeg not found (Debian: libturbojpeg0-dev); run scripts/setup.sh")
endif()
add_library(dlrun::turbojpeg UNKNOWN IMPORTED)
set_target_properties(dlrun::turbojpeg PROPERTIES
  IMPORTED_LOCATION ${TURBOJPEG_LIBRARY} INTERFACE_INCLUDE_DIRECTORIES ${TURBOJPEG_INCLUDE_DIR})
# ... and its libjpeg API (the same package's libjpeg.so): the scaled, cropped decode of
# data/image_decode.cpp needs jpeg_crop_scanline and jpeg_skip_scanlines, which TurboJPEG 2.1
# does not offer.
find_package(JPEG REQUIRED)
set_property(TARGET dlrun::turbojpeg APPEND PROPERTY INTERFACE_LINK_LIBRARIES JPEG::JPEG)

# libcurl is optional: it is used to poll cloud preemption notices and to talk to S3 for remote
# checkpoints; without it both are refused with a clear error.
find_package(CURL QUIET)
if(CURL_FOUND)
  set(DLRUN_HAVE_CURL ON)
else()
  set(DLRUN_HAVE_CURL OFF)
endif()

# gloo's headers, for c10d's ProcessGroupGloo (Debian: libgloo-dev). Headers only: the gloo
# that runs is the one compiled into libtorch_cpu.
find_path(DLRUN_GLOO_INCLUDE gloo/algorithm.h PATHS /usr/include /opt/devdeps/usr/include)
if(NOT DLRUN_GLOO_INCLUDE)
  message(FATAL_ERROR "gloo headers not found (Debian: libgloo-dev); run scripts/setup.sh")
endif()

# Catch2 v2 for the unit tests.
find_package(Catch2 2 CONFIG QUIET)

# LibTorch from the PyPI wheel (CMAKE_PREFIX_PATH=$(python -c 'import torch;print(torch.utils.cmake_prefix_path)')).
# Torch's config looks for CUDA itself when the wheel was built with it; we let it, and
# decide on our own .cu sources in Cuda.cmake.
# The GPU architectures dlrun's .cu files are compiled for: torch's cmake turns
# TORCH_CUDA_ARCH_LIST into nvcc's -gencode flags (NVCC_FLAGS_EXTRA below). The default is what
# the cu13 torch wheel itself ships (torch.cuda.get_arch_list(): T4 7.5, A100 8.0, A10G 8.6 and,
# through 8.6's machine code, L4/L40S 8.9; H100/H200 9.0; B200 10.0; RTX 50xx/RTX PRO 12.0),
# plus PTX of the newest, which the driver compiles for a later GPU. The one knob to narrow it
# (a faster build for one machine): -DTORCH_CUDA_ARCH_LIST="9.0" (docs/development.md).
set(DLRUN_DEFAULT_CUDA_ARCHS "7.5;8.0;8.6;9.0;10.0;12.0+PTX")
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "${DLRUN_DEFAULT_CUDA_ARCHS}" CACHE STRING
      "CUDA architectures of dlrun's kernels (default: the torch wheel's own, PTX for the newest)")
endif()
find_package(Torch REQUIRED)
get_filename_component(DLRUN_TORCH_LIBDIR "${TORCH_LIBRARY}" DIRECTORY)
# What was asked of nvcc, as "sm_75;...;compute_120" (machine code; PTX): baked into dlrun for
# its capability check and `dlrun info`, and what the build:cuda_archs test finds in the binary.
set(DLRUN_CUDA_ARCHS)
foreach(_flag ${NVCC_FLAGS_EXTRA})
  if(_flag MATCHES "code=(sm|compute)_([0-9]+[af]?)")
    list(APPEND DLRUN_CUDA_ARCHS "${CMAKE_MATCH_1}_${CMAKE_MATCH_2}")
  endif()
endforeach()
list(REMOVE_DUPLICATES DLRUN_CUDA_ARCHS)
# The CUDA runtime (and NVRTC) of the torch wheel (site-packages/nvidia/cu13/lib, beside
# torch/lib), not the toolkit's: the binary then runs where only the NVIDIA driver and the wheel
# are, and one process never holds two runtimes. torch's own imported targets name the toolkit's
# libraries (torch::cudart -> CUDA::cudart, caffe2::nvrtc -> CUDA::nvrtc, the NVRTC in
# TORCH_LIBRARIES); they are pointed at the wheel's copies here.
file(GLOB DLRUN_WHEEL_CUDART "${DLRUN_TORCH_LIBDIR}/../../nvidia/*/lib/libcudart.so.[0-9]*")
file(GLOB DLRUN_WHEEL_NVRTC "${DLRUN_TORCH_LIBDIR}/../../nvidia/*/lib/libnvrtc.so.[0-9]*")
set(DLRUN_RUNPATH "${DLRUN_TORCH_LIBDIR}")
if(DLRUN_WHEEL_CUDART)
  list(GET DLRUN_WHEEL_CUDART 0 DLRUN_WHEEL_CUDART)
  get_filename_component(DLRUN_WHEEL_CUDART "${DLRUN_WHEEL_CUDART}" REALPATH)
  get_filename_component(_cudart_dir "${DLRUN_WHEEL_CUDART}" DIRECTORY)
  list(APPEND DLRUN_RUNPATH "${_cudart_dir}")
  if(TARGET torch::cudart)
    # The toolkit's headers still compile against it (c10/cuda includes cuda_runtime_api.h).
    get_target_property(_cudart_inc CUDA::cudart INTERFACE_INCLUDE_DIRECTORIES)
    set_property(TARGET torch::cudart PROPERTY INTERFACE_LINK_LIBRARIES "${DLRUN_WHEEL_CUDART}")
    set_property(TARGET torch::cudart PROPERTY INTERFACE_INCLUDE_DIRECTORIES "${_cudart_inc}")
  endif()
  if(DLRUN_WHEEL_NVRTC)  # TorchConfig puts the toolkit's NVRTC into TORCH_LIBRARIES by path
    list(GET DLRUN_WHEEL_NVRTC 0 _nvrtc)
    set(_libs)
    foreach(_lib ${TORCH_LIBRARIES})
      if(_lib STREQUAL "${CUDA_NVRTC_LIB}")
        set(_lib "${_nvrtc}")
      endif()
      list(APPEND _libs "${_lib}")
    endforeach()
    set(TORCH_LIBRARIES "${_libs}")
    if(TARGET caffe2::nvrtc)
      set_property(TARGET caffe2::nvrtc PROPERTY INTERFACE_LINK_LIBRARIES "${_nvrtc};caffe2::cuda")
    endif()
  endif()
endif()
if(NOT DEFINED Torch_VERSION AND DEFINED TORCH_VERSION)
  set(Torch_VERSION ${TORCH_VERSION})
endif()

set(DLRUN_PYTHON "" CACHE FILEPATH "Python with torch, used by the Python-side tests")
