# End-to-end tests: the real dlrun binary on small configs (Python drivers, no pytest needed).
# A preloadable library whose initialiser raises a signal before dlrun's main() (test_run_dir.py).
add_library(dlrun_raise_at_load SHARED ${CMAKE_SOURCE_DIR}/tests/e2e/raise_at_load.cpp)
function(dlrun_e2e_test name script)
  add_test(NAME e2e:${name} COMMAND ${DLRUN_PYTHON} ${CMAKE_SOURCE_DIR}/tests/e2e/${script} ${ARGN})
  set_tests_properties(e2e:${name} PROPERTIES LABELS e2e TIMEOUT 900
    ENVIRONMENT "DLRUN=$<TARGET_FILE:dlrun>;DLRUN_SOURCE_DIR=${CMAKE_SOURCE_DIR};PYTHONUNBUFFERED=1;DLRUN_RAISE_AT_LOAD_LIB=$<TARGET_FILE:dlrun_raise_at_load>;AWS_EC2_METADATA_DISABLED=true")
endfunction()
if(DLRUN_PYTHON)
  dlrun_e2e_test(train test_train.py)
  dlrun_e2e_test(resume test_resume.py)
  dlrun_e2e_test(preemption test_preemption.py)
  dlrun_e2e_test(parity ../../tools/reference/parity.py --dlrun $<TARGET_FILE:dlrun>)
  dlrun_e2e_test(outputs test_outputs.py)
  dlrun_e2e_test(onnx test_onnx.py)
  dlrun_e2e_test(zoo test_zoo.py)
  dlrun_e2e_test(ema test_ema.py)
  dlrun_e2e_test(swa test_swa.py)
  dlrun_e2e_test(micro_batch test_micro_batch.py)
  dlrun_e2e_test(check_resume test_check_resume.py)
  dlrun_e2e_test(metrics_endpoint test_metrics_endpoint.py)
  dlrun_e2e_test(bad_input test_bad_input.py)
  dlrun_e2e_test(disk_faults test_disk_faults.py)
  # The soak test, short (bench/soak.py; the long runs are in docs/reliability.md).
  dlrun_e2e_test(soak ../../bench/soak.py --dlrun $<TARGET_FILE:dlrun> --cycles 8)
  dlrun_e2e_test(run_dir test_run_dir.py)
  dlrun_e2e_test(remote test_remote.py)
  dlrun_e2e_test(remote_resume test_remote_resume.py)
  dlrun_e2e_test(remote_credentials test_remote_credentials.py)
  dlrun_e2e_test(remote_security test_remote_security.py)
  dlrun_e2e_test(launch test_launch.py)
  dlrun_e2e_test(dist test_dist.py)
  dlrun_e2e_test(exit75 test_exit75.py)
  dlrun_e2e_test(two_hosts test_two_hosts.py)
  dlrun_e2e_test(peer_lost test_peer_lost.py)
  # About 100 s: three two-host jobs in network namespaces (a host lost and back, the rendezvous's
  # host lost, real torchrun), each waiting out the 5 s peer timeout and the 10 s node timeout.
  dlrun_e2e_test(elastic test_elastic.py)
  dlrun_e2e_test(slurm test_slurm.py)
  dlrun_e2e_test(recipes test_recipes.py)
  dlrun_e2e_test(skypilot test_skypilot.py)
  # The image: about two minutes with the base layer cached on the machine, about 5 more on its
  # first run (docs/testing.md); mostly podman's and the disk's time, beside another test.
  dlrun_e2e_test(image test_image.py)
  # Each Kubernetes manifest's pods as containers of the image: a stop, 75, an exact resume.
  dlrun_e2e_test(k8s_emulate test_k8s_emulate.py)
  # Real torchrun growing a job from one node to two (about 45 s).
  dlrun_e2e_test(torchrun_elastic test_torchrun_elastic.py)
  dlrun_e2e_test(profile test_profile.py)
  dlrun_e2e_test(bench_scripts test_bench_scripts.py)
  dlrun_e2e_test(shards test_shards.py)
  # About 100 s: it starts dlrun twice for each of the 15 shipped configs and each documented
  # example (validate, then train up to its start-up checks), and trains a few tiny runs.
  dlrun_e2e_test(first_hour test_first_hour.py)
endif()
# scripts/test.sh runs the e2e tests two at a time. These run several processes at once, or
# their assertions watch the clock (a peer's timeout, a loader's speed, a kill's moment): they
# hold both cores (PROCESSORS 2), so that nothing runs beside them.
if(DLRUN_PYTHON)
  foreach(_t dist elastic two_hosts peer_lost exit75 slurm check_resume micro_batch shards soak metrics_endpoint
             profile bench_scripts preemption resume launch)
    set_tests_properties(e2e:${_t} PROPERTIES PROCESSORS 2)
  endforeach()
endif()
