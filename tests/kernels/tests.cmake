# The GPU code inside dlrun: every fatbinary holds machine code for each architecture of
# TORCH_CUDA_ARCH_LIST and the PTX asked for (tools/cuda_archs.py reads the ELF and fatbinary
# headers itself: the toolkit here has no cuobjdump), and the RUNPATH names no CUDA toolkit
# directory (the wheel's runtime is used, docs/development.md).
if(DLRUN_WITH_CUDA AND DLRUN_TORCH_HAS_CUDA)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  set(_excludes --runpath-excludes /usr/local/cuda)
  foreach(_dir "${CUDAToolkit_LIBRARY_ROOT}" "${CUDAToolkit_LIBRARY_DIR}")
    if(_dir)
      list(APPEND _excludes --runpath-excludes "${_dir}")
    endif()
  endforeach()
  add_test(NAME lint:cuda_archs
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/cuda_archs.py $<TARGET_FILE:dlrun>
                   --expect "${DLRUN_CUDA_ARCHS}" ${_excludes})
  set_tests_properties(lint:cuda_archs PROPERTIES LABELS lint)
endif()
