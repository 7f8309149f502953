# Targets:
#   dlrun_base  everything that does not need LibTorch (errors, logging, config, hashing,
#               JSON/event writers). Fast to compile; the config unit tests link only this.
#   dlrun_core  everything else but main.cpp: models, data, training, checkpoints. Links
#               LibTorch; one precompiled header carries the torch includes.
#   dlrun       the executable: src/main.cpp only.
file(GLOB_RECURSE DLRUN_BASE_SOURCES CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/src/base/*.cpp ${CMAKE_SOURCE_DIR}/src/config/*.cpp
     ${CMAKE_SOURCE_DIR}/src/metrics/*.cpp ${CMAKE_SOURCE_DIR}/src/preempt/*.cpp)
file(GLOB_RECURSE DLRUN_ALL_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/*.cpp)
set(DLRUN_CORE_SOURCES ${DLRUN_ALL_SOURCES})
list(REMOVE_ITEM DLRUN_CORE_SOURCES ${DLRUN_BASE_SOURCES} ${CMAKE_SOURCE_DIR}/src/main.cpp)
file(GLOB_RECURSE DLRUN_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/*.cu)

set(DLRUN_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)

add_library(dlrun_base STATIC ${DLRUN_BASE_SOURCES} ${CMAKE_BINARY_DIR}/generated/build_info.cpp)
target_include_directories(dlrun_base PUBLIC ${CMAKE_SOURCE_DIR}/src ${CMAKE_BINARY_DIR}/generated)
target_link_libraries(dlrun_base PUBLIC fmt::fmt yaml-cpp nlohmann_json::nlohmann_json
                      ZLIB::ZLIB Threads::Threads)
target_compile_options(dlrun_base PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DLRUN_WARNINGS}>)
if(DLRUN_HAVE_CURL)
  target_link_libraries(dlrun_base PUBLIC CURL::libcurl)
  target_compile_definitions(dlrun_base PUBLIC DLRUN_HAVE_CURL=1)
endif()

add_library(dlrun_core STATIC ${DLRUN_CORE_SOURCES})
target_link_libraries(dlrun_core PUBLIC dlrun_base ${TORCH_LIBRARIES} CLI11::CLI11
                      PNG::PNG dlrun::turbojpeg)
target_compile_options(dlrun_core PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DLRUN_WARNINGS}>)
# LibTorch ships its own fmt (v12) headers, which shadow Debian's fmt 9 on any target that
# sees torch's include directory. Those targets use it header-only; dlrun_base keeps
# Debian's. The two live in different inline namespaces (fmt::v9, fmt::v12), so they do not
# clash at link time. docs/development.md explains this.
target_compile_definitions(dlrun_core PUBLIC FMT_HEADER_ONLY=1)
target_precompile_headers(dlrun_core PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${CMAKE_SOURCE_DIR}/src/core/torch_pch.h>)
if(DLRUN_WITH_CUDA)
  find_package(CUDAToolkit REQUIRED)
  target_sources(dlrun_core PRIVATE ${DLRUN_CUDA_SOURCES})
  target_link_libraries(dlrun_core PUBLIC CUDA::cudart)
  target_compile_definitions(dlrun_core PUBLIC DLRUN_WITH_CUDA=1)
endif()
if(DLRUN_TORCH_HAS_CUDA)
  target_compile_definitions(dlrun_core PUBLIC DLRUN_TORCH_HAS_CUDA=1)
endif()

add_executable(dlrun ${CMAKE_SOURCE_DIR}/src/main.cpp)
target_link_libraries(dlrun PRIVATE dlrun_core)
# Keep torch's libraries findable without LD_LIBRARY_PATH (they live in the venv).
set_target_properties(dlrun PROPERTIES BUILD_RPATH "${DLRUN_TORCH_LIBDIR}"
                                       INSTALL_RPATH "${DLRUN_TORCH_LIBDIR}")
