# Python-side check of the TensorBoard writer: tensorboard's EventAccumulator must read the
# event files dlrun writes. dlrun_tb_write (dlrun_base only) produces one.
add_executable(dlrun_tb_write ${CMAKE_CURRENT_LIST_DIR}/tb_write.cpp)
target_link_libraries(dlrun_tb_write PRIVATE dlrun_base)
if(DLRUN_PYTHON)
  add_test(NAME py:tensorboard_reader
           COMMAND ${DLRUN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/read_events.py $<TARGET_FILE:dlrun_tb_write>)
  set_tests_properties(py:tensorboard_reader PROPERTIES LABELS python TIMEOUT 120)
endif()
