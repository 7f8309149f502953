# Checkpoint crash, CLI and Python-interop tests. dlrun_ckpt_fault (fault_helper.cpp) commits
# known snapshots; with DLRUN_FAULT=ckpt:<point> it aborts mid-commit like kill -9 would.
add_executable(dlrun_ckpt_fault ${CMAKE_CURRENT_LIST_DIR}/fault_helper.cpp)
target_include_directories(dlrun_ckpt_fault PRIVATE ${CMAKE_SOURCE_DIR}/tests)
dlrun_link(dlrun_ckpt_fault)
target_precompile_headers(dlrun_ckpt_fault REUSE_FROM dlrun_core)

set(_ckpt_helper $<TARGET_FILE:dlrun_ckpt_fault>)
set(_ckpt_fault_points file files manifest rename latest)  # ckpt::fault_points(), in order

foreach(point ${_ckpt_fault_points})
  add_test(NAME ckpt:fault_${point}
           COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/fault.sh ${_ckpt_helper} $<TARGET_FILE:dlrun> ${point})
  set_tests_properties(ckpt:fault_${point} PROPERTIES LABELS "ckpt;crash" ENVIRONMENT "DLRUN_FAULT=")
endforeach()

# The list above must name every point the code has.
string(REPLACE ";" " " _ckpt_points_str "${_ckpt_fault_points}")
add_test(NAME ckpt:fault_points_covered
         COMMAND bash -c "test \"$(\"$0\" points | tr '\\n' ' ')\" = \"$1 \"" ${_ckpt_helper} "${_ckpt_points_str}")
set_tests_properties(ckpt:fault_points_covered PROPERTIES LABELS ckpt)

add_test(NAME ckpt:cli COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/cli.sh ${_ckpt_helper} $<TARGET_FILE:dlrun>)
set_tests_properties(ckpt:cli PROPERTIES LABELS "ckpt;cli")

set(_expect ${CMAKE_SOURCE_DIR}/tests/cli/expect.sh)
add_test(NAME ckpt:list_missing_dir
         COMMAND ${_expect} 2 "does-not-exist: no such directory" -- $<TARGET_FILE:dlrun> ckpt list /nonexistent/does-not-exist)
add_test(NAME ckpt:verify_missing_dir
         COMMAND ${_expect} 2 "does-not-exist" -- $<TARGET_FILE:dlrun> ckpt verify /nonexistent/does-not-exist)
add_test(NAME ckpt:export_bad_format
         COMMAND ${_expect} 2 "tflite" -- $<TARGET_FILE:dlrun> export --checkpoint /tmp --format tflite --output /tmp/x)
set_tests_properties(ckpt:list_missing_dir ckpt:verify_missing_dir ckpt:export_bad_format PROPERTIES LABELS "ckpt;cli")

if(DLRUN_PYTHON)
  add_test(NAME ckpt:python_interop
           COMMAND ${DLRUN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/python_check.py ${_ckpt_helper} $<TARGET_FILE:dlrun>)
  set_tests_properties(ckpt:python_interop PROPERTIES LABELS "ckpt;python")
endif()
