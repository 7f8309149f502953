#!/usr/bin/env bash
# scripts/test.sh — set up (idempotent), build, and run every test (the README's test command;
# .ci/run calls it). Extra arguments go to ctest, e.g. `scripts/test.sh -L unit`.
#
# The whole suite (no arguments) runs in phases, each timed, and ends with a table of the
# phases' seconds and the ten slowest tests (docs/testing.md, "Where CI's time goes"):
#   set-up          Debian packages and the venv (a second run installs nothing)
#   build           configure and build everything (ccache makes a rebuild of unchanged files free)
#   tests: light    the unit, core, lint, cli, ckpt, crash, python and gpu labels, two at a time:
#                   none trains for long, and they share the two cores without slowing each other
#   tests: e2e      the end-to-end tests, DLRUN_E2E_JOBS (2) at a time; those that run several
#                   processes or watch the clock hold both cores (their PROCESSORS property)
#   sanitizers, fuzzing   scripts/harden.sh ci (its own phases: build, tests, fuzz)
# DLRUN_HARDEN_CHECKS=0 leaves the last ones out.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${DLRUN_BUILD_DIR:-$ROOT/build}"
# --no-tests=error: a filter or a build that registers no test is a failure, not a pass.
CTEST=(ctest --output-on-failure --no-tests=error --timeout 900)

if [[ $# -gt 0 ]]; then  # a subset: as asked, one test at a time by default
  bash "$ROOT/scripts/setup.sh"
  cd "$BUILD_DIR"
  exec "${CTEST[@]}" -j "${DLRUN_TEST_JOBS:-1}" "$@"
fi

PHASES=()
FAILED=()
LOGS=()
# phase NAME CMD...: run CMD, record its seconds; a failure is recorded and the next phase runs.
phase() {
  local name=$1; shift
  local start=$SECONDS rc=0
  echo "[test] phase: $name"
  "$@" || rc=$?
  PHASES+=("$(printf '%-34s %6d s%s' "$name" $((SECONDS - start)) "$( ((rc)) && echo "  FAILED (exit $rc)")")")
  ((rc)) && FAILED+=("$name")
  return 0
}
report() {
  echo
  echo "[test] where the time went:"
  printf '  %s\n' "${PHASES[@]}"
  if ((${#LOGS[@]})); then
    echo "[test] the ten slowest tests:"
    # ctest's lines: "  12/597 Test  #12: e2e:dist ........   Passed  131.48 sec"
    cat "${LOGS[@]}" | sed -nE 's/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: ([^ ]+) .* ([0-9]+\.[0-9]+) sec$/\2 \1/p' |
      sort -rn | head -10 | awk '{printf "  %-34s %8.1f s\n", $2, $1}'
  fi
  if ((${#FAILED[@]})); then
    echo "[test] FAILED: ${FAILED[*]}"
  fi
}
trap report EXIT

phase "set-up" env DLRUN_SETUP_NO_BUILD=1 bash "$ROOT/scripts/setup.sh"
phase "build" bash "$ROOT/scripts/setup.sh"
((${#FAILED[@]})) && exit 1
cd "$BUILD_DIR"
LIGHT="unit|core|lint|cli|ckpt|crash|python|gpu"
LOGS+=("$BUILD_DIR/Testing/light.log" "$BUILD_DIR/Testing/e2e.log")
mkdir -p "$BUILD_DIR/Testing"
ctest_logged() {  # LOG ARGS...: ctest with its output on the terminal and in LOG
  local log=$1; shift
  set -o pipefail
  "${CTEST[@]}" "$@" 2>&1 | tee "$log"
}
phase "tests: light ($LIGHT)" ctest_logged "$BUILD_DIR/Testing/light.log" -L "$LIGHT" -LE e2e -j 2
phase "tests: e2e" ctest_logged "$BUILD_DIR/Testing/e2e.log" -L e2e -j "${DLRUN_E2E_JOBS:-2}"
# The sanitizer tests and every fuzz target for 45 s (scripts/harden.sh ci; docs/reliability.md).
if [[ "${DLRUN_HARDEN_CHECKS:-1}" != 0 ]]; then
  harden_logged() {
    set -o pipefail
    bash "$ROOT/scripts/harden.sh" ci 2>&1 | tee "$BUILD_DIR/Testing/harden.log"
  }
  phase "sanitizers and fuzzing (harden.sh ci)" harden_logged
  while read -r line; do PHASES+=("$(printf '  %s' "$line")"); done \
    < <(sed -n 's/^\[harden\] phase //p' "$BUILD_DIR/Testing/harden.log")
fi
((${#FAILED[@]} == 0))
