#!/usr/bin/env bash
# scripts/test.sh — set up (idempotent), build, and run every test (the README's test command;
# .ci/run calls it). Extra arguments go to ctest, e.g. `scripts/test.sh -L unit`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
BUILD_DIR="${DLRUN_BUILD_DIR:-$ROOT/build}"
cd "$BUILD_DIR"
# Tests run one at a time by default: several train real models and would fight over 2 cores.
# --no-tests=error: a filter or a build that registers no test is a failure, not a pass.
ctest --output-on-failure --no-tests=error -j "${DLRUN_TEST_JOBS:-1}" --timeout 900 "$@"
# The whole suite (no ctest arguments) also runs the sanitizer tests and every fuzz target for a
# minute (scripts/harden.sh ci; docs/reliability.md). DLRUN_HARDEN_CHECKS=0 leaves them out.
if [[ $# -eq 0 && "${DLRUN_HARDEN_CHECKS:-1}" != 0 ]]; then
  bash "$ROOT/scripts/harden.sh" ci
fi
