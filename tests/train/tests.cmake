# Python-side training tests.
if(DLRUN_PYTHON)
  # optim.layer_decay and no_decay_norm_bias give a member of each family timm's rate scales and
  # weight decays (dlrun info --json against timm's param_groups_layer_decay).
  add_test(NAME py:layer_decay_timm COMMAND ${DLRUN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/layer_decay_timm.py
                                            $<TARGET_FILE:dlrun>)
  set_tests_properties(py:layer_decay_timm PROPERTIES LABELS python TIMEOUT 300)
endif()

# MixUp and CutMix against torchvision's (dlrun_mix, a test-only executable, mixes the batches).
add_executable(dlrun_mix ${CMAKE_CURRENT_LIST_DIR}/mix_tool.cpp)
dlrun_link(dlrun_mix)
target_precompile_headers(dlrun_mix REUSE_FROM dlrun_core)
if(DLRUN_PYTHON)
  add_test(NAME py:mixing_torchvision COMMAND ${DLRUN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/mixing_torchvision.py
                                              $<TARGET_FILE:dlrun_mix>)
  set_tests_properties(py:mixing_torchvision PROPERTIES LABELS python TIMEOUT 300)
endif()
