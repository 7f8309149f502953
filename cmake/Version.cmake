# The git revision, for `dlrun --version` and the run directory's config.yaml.
find_package(Git QUIET)
set(DLRUN_GIT_REV "unknown")
if(GIT_FOUND AND EXISTS ${CMAKE_SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} describe --always --dirty --abbrev=12
                  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                  OUTPUT_VARIABLE DLRUN_GIT_REV OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT DLRUN_GIT_REV)
    set(DLRUN_GIT_REV "unknown")
  endif()
endif()
configure_file(${CMAKE_SOURCE_DIR}/src/base/build_info.cpp.in
               ${CMAKE_BINARY_DIR}/generated/build_info.cpp @ONLY)
