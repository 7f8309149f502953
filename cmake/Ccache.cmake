# Use ccache as the compiler launcher when it is installed (DLRUN_CCACHE=OFF to disable).
# The torch translation units use a precompiled header: ccache caches them only with the
# pch_defines/time_macros sloppiness and -fpch-preprocess. CCACHE_BASEDIR makes paths
# relative to the checkout (a clone elsewhere reuses the entries of the torch-free units; the
# PCH units hit only when rebuilt in the same build directory, the .gch being part of the key).
option(DLRUN_CCACHE "Use ccache when found" ON)
find_program(CCACHE_PROGRAM ccache)
if(DLRUN_CCACHE AND CCACHE_PROGRAM)
  set(_dlrun_launcher ${CMAKE_COMMAND} -E env
      CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
      CCACHE_BASEDIR=${CMAKE_SOURCE_DIR} ${CCACHE_PROGRAM})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${_dlrun_launcher})
  set(CMAKE_C_COMPILER_LAUNCHER ${_dlrun_launcher})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${_dlrun_launcher})
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fpch-preprocess>)
  set(DLRUN_CCACHE_USED ON)
else()
  set(DLRUN_CCACHE_USED OFF)
endif()
