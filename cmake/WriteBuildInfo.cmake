# generated/build_info.cpp from src/base/build_info.cpp.in with the git revision of the source
# tree as it is now. Included by cmake/Version.cmake at configure time and run as a script
# (cmake -P) by its dlrun_build_info target at every build. configure_file leaves an identical
# file untouched, so an unchanged revision rebuilds nothing.
set(DLRUN_GIT_REV "unknown")
if(GIT_EXECUTABLE AND EXISTS "${DLRUN_SOURCE}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" describe --always --dirty --abbrev=12
                  WORKING_DIRECTORY "${DLRUN_SOURCE}"
                  OUTPUT_VARIABLE _rev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_rev)
    set(DLRUN_GIT_REV "${_rev}")
  endif()
endif()
configure_file("${DLRUN_SOURCE}/src/base/build_info.cpp.in" "${DLRUN_BUILD_INFO}" @ONLY)
