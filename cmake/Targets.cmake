# Targets:
#   dlrun_base     no LibTorch: errors, logging, clocks, SHA-256, files, HTTP, fault injection
#                  (base), the S3 client (remote), the config system (config), metrics sinks
#                  (metrics), preemption (preempt), the run directory and the triggers (run), the
#                  job layout (world). Fast to compile; its tests link only it.
#   dlrun_kernels  OBJECT library: operators registered with the PyTorch dispatcher
#                  (TORCH_LIBRARY in src/kernels/) and every CUDA source. Object files rather
#                  than an archive, because the linker drops archive members nobody calls by
#                  name, and a registration is called by nobody: dlrun_link() links these
#                  objects into each executable directly.
#   dlrun_core     LibTorch-based library: models, data, checkpoints, distribution, export.
#   dlrun_train_step, dlrun_train_averaging, dlrun_train_observe, dlrun_train_state, dlrun_train
#                  the training code, one target per folder of src/train/ (the step; the
#                  weights' averages; observing the run; the checkpointed state; the loop).
#   dlrun_cli      the command line; CLI11 is its private dependency.
#   dlrun          the executable: src/main.cpp.
#
# A folder is a build target: each folder of src/ is compiled whole into exactly one target,
# and no target picks single files out of another's folder. The folders in layer order (an
# include runs downhill only; tools/check_layers.py checks it, as the test lint:layers):
#   base < remote < config < metrics, preempt, run, world     (dlrun_base)
#   < kernels                                                 (dlrun_kernels)
#   < data, models < checkpoint < distributed < export        (dlrun_core)
#   < train/step < train/averaging < train/observe < train/state < train  (dlrun_train_*)
#   < cli                                                     (dlrun_cli)
set(_src ${CMAKE_SOURCE_DIR}/src)
set(DLRUN_BASE_FOLDERS base remote config metrics preempt run world)
set(DLRUN_BASE_SOURCES)
foreach(_folder ${DLRUN_BASE_FOLDERS})
  file(GLOB_RECURSE _files CONFIGURE_DEPENDS ${_src}/${_folder}/*.cpp)
  list(APPEND DLRUN_BASE_SOURCES ${_files})
endforeach()
file(GLOB_RECURSE DLRUN_KERNEL_SOURCES CONFIGURE_DEPENDS ${_src}/kernels/*.cpp)
file(GLOB_RECURSE DLRUN_CUDA_SOURCES CONFIGURE_DEPENDS ${_src}/*.cu)
if(NOT DLRUN_TORCH_HAS_CUDA)  # the operator kernels use ATen's CUDA side; the device query does not
  list(FILTER DLRUN_CUDA_SOURCES EXCLUDE REGEX "/src/kernels/bn_(relu|cudnn)")
endif()
file(GLOB_RECURSE DLRUN_CLI_SOURCES CONFIGURE_DEPENDS ${_src}/cli/*.cpp)
# The training code: one target per folder of src/train/, lowest first (each links the one below).
set(DLRUN_TRAIN_FOLDERS step averaging observe state)
foreach(_folder ${DLRUN_TRAIN_FOLDERS})
  file(GLOB DLRUN_TRAIN_${_folder}_SOURCES CONFIGURE_DEPENDS ${_src}/train/${_folder}/*.cpp)
endforeach()
file(GLOB DLRUN_TRAIN_SOURCES CONFIGURE_DEPENDS ${_src}/train/*.cpp)
file(GLOB_RECURSE DLRUN_CORE_SOURCES CONFIGURE_DEPENDS ${_src}/*.cpp)
file(GLOB_RECURSE _train_all CONFIGURE_DEPENDS ${_src}/train/*.cpp)
list(REMOVE_ITEM DLRUN_CORE_SOURCES ${DLRUN_BASE_SOURCES} ${DLRUN_KERNEL_SOURCES} ${DLRUN_CLI_SOURCES}
     ${_train_all} ${_src}/main.cpp)

set(DLRUN_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)

add_library(dlrun_base STATIC ${DLRUN_BASE_SOURCES} ${CMAKE_BINARY_DIR}/generated/build_info.cpp)
add_dependencies(dlrun_base dlrun_build_info)  # the revision refreshed at every build (Version.cmake)
target_include_directories(dlrun_base PUBLIC ${_src} ${CMAKE_BINARY_DIR}/generated)
target_link_libraries(dlrun_base PUBLIC fmt::fmt yaml-cpp nlohmann_json::nlohmann_json
                      ZLIB::ZLIB Threads::Threads OpenSSL::Crypto EXPAT::EXPAT ${CMAKE_DL_LIBS})
target_compile_options(dlrun_base PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DLRUN_WARNINGS}>)
if(DLRUN_HAVE_CURL)
  target_link_libraries(dlrun_base PUBLIC CURL::libcurl)
  target_compile_definitions(dlrun_base PUBLIC DLRUN_HAVE_CURL=1)
endif()
# A stand-in for the driver's NVML library, which tests/metrics/nvml_test.cpp loads by
# path (the base tests of both builds).
function(dlrun_fake_nvml target)
  if(NOT TARGET dlrun_fake_nvml)
    add_library(dlrun_fake_nvml SHARED ${CMAKE_SOURCE_DIR}/tests/metrics/fake_nvml.cpp)
    # Not instrumented, as the driver's library is not: UBSan's function-type check would
    # compare its own structs with dlrun's declarations of the same layout.
    if(DLRUN_HARDEN)
      target_compile_options(dlrun_fake_nvml PRIVATE -fno-sanitize=all)
    endif()
  endif()
  add_dependencies(${target} dlrun_fake_nvml)
  target_compile_definitions(${target} PRIVATE DLRUN_FAKE_NVML="$<TARGET_FILE:dlrun_fake_nvml>")
endfunction()

dlrun_unity(dlrun_base)
if(DLRUN_HARDEN)
  return()  # the sanitizer build (cmake/Hardening.cmake) takes dlrun_base and the source lists only
endif()

add_library(dlrun_core STATIC ${DLRUN_CORE_SOURCES})
target_link_libraries(dlrun_core PUBLIC dlrun_base ${TORCH_LIBRARIES} PNG::PNG dlrun::turbojpeg)
target_compile_options(dlrun_core PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DLRUN_WARNINGS}>)
# LibTorch ships its own fmt (v12) headers, which shadow Debian's fmt 9 on any target that
# sees torch's include directory. Those targets use it header-only; dlrun_base keeps
# Debian's. The two live in different inline namespaces (fmt::v9, fmt::v12), so they do not
# clash at link time. docs/development.md explains this.
target_compile_definitions(dlrun_core PUBLIC FMT_HEADER_ONLY=1)
target_precompile_headers(dlrun_core PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${_src}/pch/torch.h>)
if(DLRUN_TORCH_HAS_CUDA)
  target_compile_definitions(dlrun_core PUBLIC DLRUN_TORCH_HAS_CUDA=1)
endif()

# The one file that includes c10d's process groups: gloo's headers (Debian's libgloo-dev;
# the compiled gloo is the copy inside libtorch_cpu, and Debian's libgloo is never linked:
# docs/distributed.md), and NCCL's when LibTorch has CUDA. Its own flags, so no PCH.
set(_c10d_defs USE_C10D_GLOO=1)
set(_c10d_incs)
if(NOT DLRUN_GLOO_INCLUDE STREQUAL "/usr/include")  # (never -I the system directory: it breaks #include_next)
  list(APPEND _c10d_incs ${DLRUN_GLOO_INCLUDE})
endif()
if(DLRUN_TORCH_HAS_CUDA AND DLRUN_NCCL_INCLUDE)
  list(APPEND _c10d_defs USE_C10D_NCCL=1)
  list(APPEND _c10d_incs ${DLRUN_NCCL_INCLUDE})
endif()
set_source_files_properties(${_src}/distributed/group.cpp PROPERTIES
  COMPILE_DEFINITIONS "${_c10d_defs}" INCLUDE_DIRECTORIES "${_c10d_incs}" SKIP_PRECOMPILE_HEADERS ON)

add_library(dlrun_kernels OBJECT ${DLRUN_KERNEL_SOURCES})
target_link_libraries(dlrun_kernels PUBLIC dlrun_core)
target_compile_options(dlrun_kernels PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DLRUN_WARNINGS}>)
target_precompile_headers(dlrun_kernels REUSE_FROM dlrun_core)
# The CPU kernels' loops are vectorised through `#pragma omp simd` (reductions included), which
# -fopenmp-simd honours without OpenMP's runtime. Its own flags, so no PCH.
set_source_files_properties(${_src}/kernels/bn_relu_cpu.cpp PROPERTIES
  COMPILE_OPTIONS -fopenmp-simd SKIP_PRECOMPILE_HEADERS ON)
if(DLRUN_WITH_CUDA)
  find_package(CUDAToolkit REQUIRED)
  target_sources(dlrun_kernels PRIVATE ${DLRUN_CUDA_SOURCES})
  if(DLRUN_WHEEL_CUDART)
    target_link_libraries(dlrun_kernels PUBLIC ${DLRUN_WHEEL_CUDART})
    target_include_directories(dlrun_kernels PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  else()
    target_link_libraries(dlrun_kernels PUBLIC CUDA::cudart)
  endif()
  target_compile_definitions(dlrun_kernels PUBLIC DLRUN_WITH_CUDA=1)
  if(DLRUN_TORCH_HAS_CUDA)  # cuDNN's fused BatchNorm-activation (bn_cudnn.cu)
    target_include_directories(dlrun_kernels PRIVATE ${DLRUN_CUDNN_INCLUDE})
    target_link_libraries(dlrun_kernels PUBLIC ${DLRUN_CUDNN_LIBRARY})
  endif()
  string(REPLACE ";" " " _archs "${DLRUN_CUDA_ARCHS}")
  set_property(SOURCE ${_src}/kernels/device_query.cu APPEND PROPERTY COMPILE_DEFINITIONS
               "DLRUN_CUDA_ARCHS=\"${_archs}\"")
  # As PyTorch builds its own CUDA sources: c10::Half / c10::BFloat16 do the conversions, not
  # CUDA's __half operators; constexpr host functions usable on the device.
  target_compile_options(dlrun_kernels PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-D__CUDA_NO_HALF_OPERATORS__
    -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__ -D__CUDA_NO_HALF2_OPERATORS__
    --expt-relaxed-constexpr>)
endif()

set(_below dlrun_core)
foreach(_folder ${DLRUN_TRAIN_FOLDERS})
  add_library(dlrun_train_${_folder} STATIC ${DLRUN_TRAIN_${_folder}_SOURCES})
  target_link_libraries(dlrun_train_${_folder} PUBLIC ${_below})
  target_compile_options(dlrun_train_${_folder} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DLRUN_WARNINGS}>)
  target_precompile_headers(dlrun_train_${_folder} REUSE_FROM dlrun_core)
  set(_below dlrun_train_${_folder})
endforeach()
add_library(dlrun_train STATIC ${DLRUN_TRAIN_SOURCES})
target_link_libraries(dlrun_train PUBLIC ${_below})
target_compile_options(dlrun_train PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DLRUN_WARNINGS}>)
target_precompile_headers(dlrun_train REUSE_FROM dlrun_core)

# Link what an executable needs to run dlrun code: the libraries and the kernel objects.
function(dlrun_link target)
  target_link_libraries(${target} PRIVATE dlrun_train dlrun_kernels)
  # torch's libraries and the wheel's CUDA runtime found without LD_LIBRARY_PATH (they live in
  # the venv), and nothing else: CMake would add the directory of every library linked by path
  # (the toolkit's among them), so the RUNPATH is set outright.
  set_target_properties(${target} PROPERTIES BUILD_WITH_INSTALL_RPATH ON INSTALL_RPATH "${DLRUN_RUNPATH}")
endfunction()

add_library(dlrun_cli STATIC ${DLRUN_CLI_SOURCES})
target_link_libraries(dlrun_cli PUBLIC dlrun_train PRIVATE CLI11::CLI11)
target_compile_options(dlrun_cli PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DLRUN_WARNINGS}>)
target_precompile_headers(dlrun_cli REUSE_FROM dlrun_core)

add_executable(dlrun ${_src}/main.cpp)
target_link_libraries(dlrun PRIVATE dlrun_cli)
dlrun_link(dlrun)

# The libraries in batches (DLRUN_UNITY; sources with their own flags stay alone). Tests are
# not batched: their files share helper names.
set(_libs dlrun_core dlrun_kernels dlrun_train dlrun_cli)
foreach(_folder ${DLRUN_TRAIN_FOLDERS})
  list(APPEND _libs dlrun_train_${_folder})
endforeach()
dlrun_unity(${_libs})
