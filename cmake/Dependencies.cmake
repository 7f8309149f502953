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
# Torch's CUDA cmake otherwise adds -gencode flags for ~11 architectures to every .cu file.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "9.0" CACHE STRING "CUDA architectures for torch's flags (H100/H200)")
endif()
find_package(Torch REQUIRED)
get_filename_component(DLRUN_TORCH_LIBDIR "${TORCH_LIBRARY}" DIRECTORY)
if(NOT DEFINED Torch_VERSION AND DEFINED TORCH_VERSION)
  set(Torch_VERSION ${TORCH_VERSION})
endif()

set(DLRUN_PYTHON "" CACHE FILEPATH "Python with torch, used by the Python-side tests")
