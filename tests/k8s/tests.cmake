# The Kubernetes manifests of examples/k8s/: Kubernetes' schemas of every version docs/deploy.md
# claims, and the PyTorchJob and JobSet CRDs kept in tests/k8s/crds/ (its README says from where).
if(DLRUN_PYTHON)
  add_test(NAME py:k8s_manifests COMMAND ${DLRUN_PYTHON} ${CMAKE_CURRENT_LIST_DIR}/validate_manifests.py)
  set_tests_properties(py:k8s_manifests PROPERTIES LABELS python TIMEOUT 300)
endif()
