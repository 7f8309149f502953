# End-to-end tests: the real dlrun binary on small configs (Python drivers, no pytest needed).
function(dlrun_e2e_test name script)
  add_test(NAME e2e:${name} COMMAND ${DLRUN_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/${script} ${ARGN})
  set_tests_properties(e2e:${name} PROPERTIES LABELS e2e TIMEOUT 900
    ENVIRONMENT "DLRUN=$<TARGET_FILE:dlrun>;DLRUN_SOURCE_DIR=${CMAKE_SOURCE_DIR};PYTHONUNBUFFERED=1")
endfunction()
if(DLRUN_PYTHON)
  dlrun_e2e_test(train test_train.py)
  dlrun_e2e_test(resume test_resume.py)
  dlrun_e2e_test(preemption test_preemption.py)
  dlrun_e2e_test(parity ../../tools/reference/parity.py --dlrun $<TARGET_FILE:dlrun>)
  dlrun_e2e_test(outputs test_outputs.py)
  dlrun_e2e_test(bad_input test_bad_input.py)
endif()
