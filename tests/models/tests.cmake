# Python-side model tests: dlrun's ResNets load into torchvision and give the same logits.
# dlrun_model_dump (a test-only executable) writes weights and logits that Python reads.
add_executable(dlrun_model_dump ${CMAKE_CURRENT_LIST_DIR}/model_dump.cpp)
dlrun_link(dlrun_model_dump)
target_precompile_headers(dlrun_model_dump REUSE_FROM dlrun_core)

if(DLRUN_PYTHON)
  add_test(NAME py:torchvision_resnet_compat
           COMMAND ${DLRUN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/torchvision_compat.py
                   $<TARGET_FILE:dlrun_model_dump>)
  set_tests_properties(py:torchvision_resnet_compat PROPERTIES LABELS python TIMEOUT 300)
  # The other way, for every torchvision model of the zoo (`dlrun models --json`): torchvision's
  # weights file, loaded strictly, gives torchvision's logits.
  add_test(NAME py:torchvision_zoo
           COMMAND ${DLRUN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/torchvision_zoo.py $<TARGET_FILE:dlrun>
                   $<TARGET_FILE:dlrun_model_dump>)
  set_tests_properties(py:torchvision_zoo PROPERTIES LABELS python TIMEOUT 600)
  # Each family's smallest members lowered to ONNX (kept and folded) run in onnxruntime and give
  # torchvision's logits.
  add_test(NAME py:onnx_zoo
           COMMAND ${DLRUN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/onnx_zoo.py $<TARGET_FILE:dlrun>
                   $<TARGET_FILE:dlrun_model_dump>)
  set_tests_properties(py:onnx_zoo PROPERTIES LABELS python TIMEOUT 300)
endif()

# Activation checkpointing really frees memory (each mode in its own dlrun process).
if(DLRUN_PYTHON)
  add_test(NAME py:activation_checkpointing_memory
           COMMAND ${DLRUN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/recompute_memory.py $<TARGET_FILE:dlrun>)
  set_tests_properties(py:activation_checkpointing_memory PROPERTIES LABELS python TIMEOUT 300)
endif()
