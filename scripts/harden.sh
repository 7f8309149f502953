#!/usr/bin/env bash
# scripts/harden.sh — the sanitizer and fuzz checks (docs/reliability.md).
#
#   scripts/harden.sh asan          build (clang, ASan+UBSan) and run the parser and base tests
#   scripts/harden.sh fuzz [SECS]   run every fuzz target SECS seconds (default 60) from its seeds
#                                   and the corpus earlier runs grew (build-harden/fuzz-corpus/)
#   scripts/harden.sh tsan          build with TSan and run the same tests (loader, writer, watcher threads)
#   scripts/harden.sh ci            asan, then fuzz 45 with two targets at a time (what
#                                   scripts/test.sh runs in CI), each phase's seconds printed
#
# Builds go to build-harden/ (asan + fuzzers) and build-tsan/ beside build/; the venv and the
# Debian packages come from scripts/setup.sh (run it first, or run scripts/test.sh).
# Fuzz findings are written to build-harden/fuzz-findings/<target>/ and fail the run; the
# corpus a run grows is kept in build-harden/fuzz-corpus/<target>/ (seeds: fuzz/corpus/).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/versions.sh
source "$ROOT/scripts/versions.sh"
VENV="${DLRUN_VENV:-$HOME/.cache/dlrun/venv-torch-$TORCH_VERSION}"
say() { printf '[harden] %s\n' "$*"; }
# DLRUN_FUZZ_TARGETS="config image" runs a subset (two subsets can run side by side on two cores).
read -r -a FUZZERS <<<"${DLRUN_FUZZ_TARGETS:-config notice s3 idx cifar image tar checkpoint weights}"

configure_build() {  # DIR SANITIZERS
  local dir=$1 san=$2
  if [[ ! -f "$dir/build.ninja" ]]; then
    say "configuring $dir (clang, $san)"
    local torch_cmake
    torch_cmake="$("$VENV/bin/python" -c 'import torch;print(torch.utils.cmake_prefix_path)')"
    CC=clang CXX=clang++ cmake -S "$ROOT" -B "$dir" -G Ninja -DDLRUN_HARDEN=ON \
      -DDLRUN_SANITIZERS="$san" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$torch_cmake" >/dev/null
  fi
  say "building $dir"
  cmake --build "$dir" -- ${DLRUN_BUILD_JOBS:+-j$DLRUN_BUILD_JOBS}
}

asan_tests() {
  (cd "$ROOT/build-harden" && ctest --output-on-failure --no-tests=error -L asan -j "${DLRUN_TEST_JOBS:-2}" --timeout 600)
}

run_asan() {
  configure_build "$ROOT/build-harden" "address,undefined"
  asan_tests
}

# timed NAME CMD...: CMD, then its seconds.
timed() {
  local name=$1; shift
  local start=$SECONDS rc=0
  "$@" || rc=$?
  say "phase $name: $((SECONDS - start)) s$( ((rc)) && echo " (FAILED)")"
  return $rc
}

# Every fuzz target for SECS seconds, two at a time (one core each; each fuzzer is one process),
# after one build: the two halves do not run ninja in the same directory at once.
fuzz_in_pairs() {
  local secs=$1 half=$(( (${#FUZZERS[@]} + 1) / 2 )) rc=0
  configure_build "$ROOT/build-harden" "address,undefined"
  DLRUN_FUZZ_NO_BUILD=1 DLRUN_FUZZ_TARGETS="${FUZZERS[*]:0:$half}" bash "$0" fuzz "$secs" &
  local first=$!
  DLRUN_FUZZ_NO_BUILD=1 DLRUN_FUZZ_TARGETS="${FUZZERS[*]:$half}" bash "$0" fuzz "$secs" || rc=1
  wait "$first" || rc=1
  return $rc
}

run_tsan() {
  configure_build "$ROOT/build-tsan" "thread"
  # The threaded parts are the data loader's workers, the background checkpoint writer, the
  # notice watcher and the HTTP transfers it and the uploader cancel.
  # Every test of the hardening build runs; these are the ones with threads of their own.
  (cd "$ROOT/build-tsan" && ctest --output-on-failure --no-tests=error -L tsan -j "${DLRUN_TEST_JOBS:-2}" --timeout 900)
}

run_fuzz() {
  local secs=${1:-60} dir="$ROOT/build-harden" failed=0
  [[ -n "${DLRUN_FUZZ_NO_BUILD:-}" ]] || configure_build "$dir" "address,undefined"
  local report="$dir/fuzz-report-${FUZZERS[*]// /-}.txt"
  : >"$report"
  for name in "${FUZZERS[@]}"; do
    local corpus="$dir/fuzz-corpus/$name" findings="$dir/fuzz-findings/$name" log="$dir/fuzz-$name.log"
    mkdir -p "$corpus" "$findings"
    say "fuzz_$name for $secs s"
    # Torch-free targets check leaks too; the torch ones cannot (LibTorch's one-time allocations).
    local leaks=1
    case $name in idx|cifar|image|checkpoint|weights) leaks=0 ;; esac
    if ASAN_OPTIONS="detect_leaks=$leaks:halt_on_error=1:allocator_may_return_null=1" UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
       "$dir/fuzz_$name" -max_total_time="$secs" -max_len=65536 -timeout=20 -rss_limit_mb=4096 \
         -malloc_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$findings/" \
         "$corpus" "$ROOT/fuzz/corpus/$name" >"$log" 2>&1; then
      :
    else
      failed=1
      say "fuzz_$name FOUND A PROBLEM: $(grep -m1 -E 'ERROR|runtime error|deadly signal|Timeout|out-of-memory' "$log" || tail -1 "$log")"
      ls "$findings" | sed 's/^/[harden]   finding: /'
    fi
    local runs cov secs_done
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo "?")
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || echo "cov: ?")
    secs_done=$(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$log" | grep -oE 'in [0-9]+' | grep -oE '[0-9]+' || echo "$secs")
    printf '%-11s %6s s  %10s runs  %s  corpus %s files\n' "$name" "$secs_done" "$runs" "$cov" \
      "$(find "$corpus" -type f | wc -l)" | tee -a "$report"
  done
  return $failed
}

case "${1:-ci}" in
  asan) run_asan ;;
  tsan) run_tsan ;;
  fuzz) run_fuzz "${2:-60}" ;;
  ci) timed "sanitizer build" configure_build "$ROOT/build-harden" "address,undefined" &&
      timed "sanitizer tests" asan_tests &&
      timed "fuzzing (two targets at a time)" fuzz_in_pairs "${2:-45}" ;;
  *) echo "usage: scripts/harden.sh asan|tsan|fuzz [SECONDS]|ci" >&2; exit 2 ;;
esac
