# The git revision, for `dlrun --version`, reports and the run directory's config.yaml: written
# at configure time and again at every build (target dlrun_build_info), so that a commit shows
# in the next build without re-running cmake.
find_package(Git QUIET)
set(DLRUN_SOURCE ${CMAKE_SOURCE_DIR})
set(DLRUN_BUILD_INFO ${CMAKE_BINARY_DIR}/generated/build_info.cpp)
include(WriteBuildInfo)
add_custom_target(dlrun_build_info
  COMMAND ${CMAKE_COMMAND} -DDLRUN_SOURCE=${DLRUN_SOURCE} -DDLRUN_BUILD_INFO=${DLRUN_BUILD_INFO}
          -DGIT_EXECUTABLE=${GIT_EXECUTABLE} -DPROJECT_VERSION=${PROJECT_VERSION}
          -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE} -DCMAKE_CXX_COMPILER_ID=${CMAKE_CXX_COMPILER_ID}
          -DCMAKE_CXX_COMPILER_VERSION=${CMAKE_CXX_COMPILER_VERSION}
          -DCMAKE_CUDA_COMPILER_VERSION=${CMAKE_CUDA_COMPILER_VERSION} -DTorch_VERSION=${Torch_VERSION}
          -P ${CMAKE_SOURCE_DIR}/cmake/WriteBuildInfo.cmake
  BYPRODUCTS ${DLRUN_BUILD_INFO}
  COMMENT "git revision for build_info.cpp"
  VERBATIM)
