# The policies' image operations against torchvision's: dlrun_image_ops (a test-only executable)
# applies them to images that Python gives it.
add_executable(dlrun_image_ops ${CMAKE_CURRENT_LIST_DIR}/image_ops_tool.cpp)
dlrun_link(dlrun_image_ops)
target_precompile_headers(dlrun_image_ops REUSE_FROM dlrun_core)

if(DLRUN_PYTHON)
  add_test(NAME py:policy_ops
           COMMAND ${DLRUN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/policy_ops.py $<TARGET_FILE:dlrun_image_ops>)
  set_tests_properties(py:policy_ops PROPERTIES LABELS python TIMEOUT 300)
endif()
