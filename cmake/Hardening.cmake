# The hardening build (-DDLRUN_HARDEN=ON, clang; scripts/harden.sh drives it): the code that
# parses outside input -- dlrun_base (config, notices, HTTP, S3) and dlrun_parsers (the data
# readers and image decoding of src/data, the checkpoint code of src/checkpoint) -- compiled
# with sanitizers, their Catch2 tests, and the libFuzzer targets of fuzz/.
#
#   DLRUN_SANITIZERS=address,undefined  (default) tests under ASan+UBSan, and the fuzzers
#   DLRUN_SANITIZERS=thread             tests under TSan (no fuzzers)
#
# LibTorch itself is not instrumented: reports come from dlrun's code and what it calls.
# Only torch_cpu and c10 are linked (the parsers never touch CUDA), which keeps the CUDA
# libraries and their address-space reservations out of the sanitized processes.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "DLRUN_HARDEN needs clang (CC=clang CXX=clang++); scripts/harden.sh sets it")
endif()
set(DLRUN_SANITIZERS "address,undefined" CACHE STRING "address,undefined | thread")
set(_san_flags -fsanitize=${DLRUN_SANITIZERS} -fno-omit-frame-pointer -g)
set(DLRUN_FUZZERS OFF)
if(DLRUN_SANITIZERS MATCHES "address")
  # vptr: type checks across the uninstrumented libtorch give false reports. Every UB report
  # stops the process (a test or fuzz run fails on it).
  list(APPEND _san_flags -fno-sanitize=vptr -fno-sanitize-recover=all)
  set(DLRUN_FUZZERS ON)
endif()
add_compile_options(${_san_flags})
add_link_options(${_san_flags})
if(DLRUN_FUZZERS)
  # Coverage instrumentation for libFuzzer in every object; the fuzz executables add the driver.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

include(Targets)  # dlrun_base and the source lists (it stops before the LibTorch targets)

find_library(DLRUN_TORCH_CPU torch_cpu PATHS ${DLRUN_TORCH_LIBDIR} NO_DEFAULT_PATH REQUIRED)
find_library(DLRUN_C10 c10 PATHS ${DLRUN_TORCH_LIBDIR} NO_DEFAULT_PATH REQUIRED)
file(GLOB DLRUN_PARSER_SOURCES CONFIGURE_DEPENDS ${_src}/data/*.cpp ${_src}/checkpoint/*.cpp)
add_library(dlrun_parsers STATIC ${DLRUN_PARSER_SOURCES})
dlrun_unity(dlrun_parsers)
target_include_directories(dlrun_parsers PUBLIC ${TORCH_INCLUDE_DIRS})
target_compile_options(dlrun_parsers PRIVATE ${DLRUN_WARNINGS})
target_precompile_headers(dlrun_parsers PRIVATE ${_src}/pch/torch.h)
target_compile_definitions(dlrun_parsers PUBLIC FMT_HEADER_ONLY=1)  # torch's fmt, as in dlrun_core
separate_arguments(_torch_flags UNIX_COMMAND "${TORCH_CXX_FLAGS}")
target_compile_options(dlrun_parsers PUBLIC ${_torch_flags})
target_link_libraries(dlrun_parsers PUBLIC dlrun_base ${DLRUN_TORCH_CPU} ${DLRUN_C10} PNG::PNG dlrun::turbojpeg)
set_target_properties(dlrun_parsers PROPERTIES INTERFACE_LINK_OPTIONS "-Wl,-rpath,${DLRUN_TORCH_LIBDIR}")

# ---- tests: the same Catch2 sources as the normal build, registered as asan:/tsan: ----------
include(CTest)
find_package(Catch2 2 CONFIG REQUIRED)
include(Catch)
set(_t ${CMAKE_SOURCE_DIR}/tests)
string(REGEX MATCH "^[a-z]+" _kind "${DLRUN_SANITIZERS}")
string(REPLACE "address" "asan" _kind "${_kind}")
string(REPLACE "thread" "tsan" _kind "${_kind}")
add_library(dlrun_test_support STATIC ${_t}/support/support.cpp ${_t}/support/catch_main.cpp)
target_link_libraries(dlrun_test_support PUBLIC dlrun_base Catch2::Catch2)
target_include_directories(dlrun_test_support PUBLIC ${_t})
target_compile_definitions(dlrun_test_support PUBLIC DLRUN_SOURCE_DIR="${CMAKE_SOURCE_DIR}")

set(_base_tests)
foreach(_folder ${DLRUN_BASE_FOLDERS})  # tests/ mirrors src/: the base folders' tests
  file(GLOB _files CONFIGURE_DEPENDS ${_t}/${_folder}/*_test.cpp)
  list(APPEND _base_tests ${_files})
endforeach()
# sanitizer_defaults.cpp as a source of each executable (in an archive nothing would pull it in).
set(_defaults ${CMAKE_SOURCE_DIR}/fuzz/sanitizer_defaults.cpp)
add_executable(dlrun_base_tests ${_base_tests} ${_defaults})
target_link_libraries(dlrun_base_tests PRIVATE dlrun_test_support)
dlrun_fake_nvml(dlrun_base_tests)
file(GLOB _parser_tests CONFIGURE_DEPENDS ${_t}/data/*_test.cpp ${_t}/checkpoint/*_test.cpp)
add_executable(dlrun_parser_tests ${_parser_tests} ${_defaults})
target_link_libraries(dlrun_parser_tests PRIVATE dlrun_test_support dlrun_parsers)
target_precompile_headers(dlrun_parser_tests REUSE_FROM dlrun_parsers)

# Sanitizer settings for every test process: fail on the first report, no leak reports from
# the uninstrumented libtorch's one-time allocations (leaks in dlrun code are found by the
# fuzzers' own leak check on the torch-free targets).
set(_env "ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:allocator_may_return_null=1"
         "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
         "TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=${CMAKE_SOURCE_DIR}/fuzz/tsan.supp")
# LibTorch's intra-op parallelism (OpenMP) synchronises inside uninstrumented libraries, so TSan
# would report its own worker threads racing; one intra-op thread keeps dlrun's threads (loader
# workers, checkpoint writer, notice watcher, HTTP transfers) the only ones TSan judges.
if(DLRUN_SANITIZERS MATCHES "thread")
  list(APPEND _env "OMP_NUM_THREADS=1")
endif()
catch_discover_tests(dlrun_base_tests TEST_PREFIX "${_kind}:unit:" PROPERTIES LABELS "${_kind}" ENVIRONMENT "${_env}")
# [no-tsan]: tests of LibTorch arithmetic alone, no thread of dlrun's (see the test).
set(_spec "~[gpu]~[.]")
if(_kind STREQUAL "tsan")
  set(_spec "~[gpu]~[.]~[no-tsan]")
endif()
catch_discover_tests(dlrun_parser_tests TEST_SPEC "${_spec}" TEST_PREFIX "${_kind}:core:"
                     PROPERTIES LABELS "${_kind}" ENVIRONMENT "${_env}")

# ---- fuzzers -----------------------------------------------------------------------------
if(DLRUN_FUZZERS)
  set(_fz ${CMAKE_SOURCE_DIR}/fuzz)
  foreach(name config notice s3)
    add_executable(fuzz_${name} ${_fz}/${name}_fuzz.cpp)
    target_link_libraries(fuzz_${name} PRIVATE dlrun_base)
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
  endforeach()
  foreach(name idx cifar image tar checkpoint weights)
    add_executable(fuzz_${name} ${_fz}/${name}_fuzz.cpp)
    target_link_libraries(fuzz_${name} PRIVATE dlrun_parsers)
    target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer)
  endforeach()
endif()
message(STATUS "dlrun hardening build: sanitizers ${DLRUN_SANITIZERS}, fuzzers ${DLRUN_FUZZERS}")
