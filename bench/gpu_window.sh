#!/usr/bin/env bash
# bench/gpu_window.sh — the one prepared device call of a GPU window (docs/benchmarks.md, "The GPU
# window"): everything that matters about the GPU BatchNorm paths, in order of value, each part
# with a time cap, its results written into $OUT as it ends, so that a call cut off loses only
# the part in flight. No build: it runs the executables carried in .gpubin (scripts/pack-gpu-bin.sh
# made them here) against the torch that python3 imports on the GPU machine.
#
#   DLRUN_WINDOW_S=500 OUT=/out bench/gpu_window.sh     # on the GPU machine, from the checkout
#
# DLRUN_WINDOW_S is the seconds this call may run: what the device session really has left
# (status's budget_left_s less the machine's start and the transfers), at most the call's own
# limit less a margin. Every part's cap is cut to the time left less the final packing's
# RESERVE; a part that would get less than it needs is skipped with a line saying so.
#
# Parts, in order (caps in seconds, DLRUN_WINDOW_CAPS="part=s ..." overrides):
#   setup     20  the libraries found (ldd), the GPU, torch, `dlrun info`
#   memcheck  60  the kernel tests under compute-sanitizer memcheck \  [gpu][kernels], without the
#   racecheck 60  ... and racecheck                                  |  200-step model test and the
#   tests     45  ... and plainly                                    /  large shapes under the tools
#   bench     88  dlrun bench kernels: fp16 cudnn, fp16 dlrun, bf16 dlrun, bf16 cudnn (a quarter each)
#   headline 210  ResNet-50 224², batch 256, channels_last, bf16 and fp16: PyTorch eager vs dlrun
#                 (auto) vs dlrun-cudnn, 2 alternated repetitions of 50 steps (bench/gpu_amp.py;
#                 its results file rewritten after every repetition)
#   profile   60  with time left: the CUDA kernels of profiled dlrun steps, bf16, auto and cudnn
#   compile  150  with time left: torch.compile (mode default) beside PyTorch eager, bf16
#
# What comes back ($OUT, at most 8 files, as the device tool returns them): summary.md (rewritten
# after every part), machine.txt, kernel-tests.txt, bench-kernels.txt, results/<date>-<gpu>.tsv
# (commit it to bench/results/), profile.txt, logs.tgz (every log, repacked after every part).
#
# DLRUN_WINDOW_FAKE=1: a dry run on a machine without a GPU (tests/e2e/test_gpu_window.py): the
# same parts, in the same order, with the same caps and files, on the CPU and at toy sizes, so
# the window is never the first run of this script. DLRUN_GPU_BIN (default .gpubin) names the
# executables' folder; DLRUN_WINDOW_SANITIZER a compute-sanitizer to use instead of the CUDA one.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
T0=$(date +%s)
WINDOW="${DLRUN_WINDOW_S:-480}"
RESERVE=12  # seconds kept for the last packing of the results
FAKE="${DLRUN_WINDOW_FAKE:-0}"
OUT="${OUT:-$ROOT/gpu-out}"
WORK="${DLRUN_WINDOW_WORK:-}"
[[ -n "$WORK" ]] || { WORK="$(mktemp -d /tmp/dlrun-window.XXXXXX)"; OWN_WORK=1; }
BIN="$(cd "${DLRUN_GPU_BIN:-$ROOT/.gpubin}" 2>/dev/null && pwd)"
PY="${DLRUN_PYTHON:-python3}"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT" "$WORK/logs"
SUMMARY="$OUT/summary.md"

declare -A CAP=([setup]=20 [memcheck]=60 [racecheck]=60 [tests]=45 [bench]=88 [headline]=210 [profile]=60
                [compile]=150)
declare -A NEEDS=([setup]=5 [memcheck]=20 [racecheck]=20 [tests]=15 [bench]=40 [headline]=90 [profile]=30
                  [compile]=100)
for kv in ${DLRUN_WINDOW_CAPS:-}; do CAP[${kv%%=*}]=${kv#*=}; done

left() { echo $(( WINDOW - RESERVE - ($(date +%s) - T0) )); }
say() { echo "$*" | tee -a "$SUMMARY"; }
pack() {
  tar czf "$OUT/logs.tgz.tmp" -C "$WORK" logs 2>/dev/null && mv "$OUT/logs.tgz.tmp" "$OUT/logs.tgz"
}
finish() {
  pack
  [[ -n "${OWN_WORK:-}" ]] && rm -rf "$WORK"
}
trap finish EXIT

# cap PART: the seconds PART may take now (its cap, cut to what is left), or nothing (and a line
# in the summary) when that is less than it needs (NEEDS, or its cap when that is smaller).
cap() {
  local part=$1 l c need
  l=$(left)
  c=${CAP[$part]}
  need=${NEEDS[$part]}
  (( need > c )) && need=$c
  (( c > l )) && c=$l
  if (( c < need )); then
    say "- $part: skipped, $l s left of the window (it needs $need s)" >&2
    return 1
  fi
  echo "$c"
}

# capped CAP LOG CMD...: CMD with CAP seconds (its process group killed after that), its output
# in LOG; sets RC and TOOK. verdict PART: the one summary line of that: ok, FAILED (exit N) with
# the log's last line, or cut at its cap. run PART CAP LOG CMD...: both; returns CMD's status.
capped() {
  local c=$1 log=$2; shift 2
  local start=$SECONDS
  timeout -k 5 "$c" "$@" > "$log" 2>&1
  RC=$?
  TOOK=$(( SECONDS - start ))
  CAPPED_AT=$c
  CAPPED_LOG=$log
}
verdict() {
  if (( RC == 124 || RC == 137 )); then
    say "- $1: cut at its cap of $CAPPED_AT s (ran ${TOOK} s): what it finished is below and in logs.tgz"
  elif (( RC != 0 )); then
    say "- $1: FAILED (exit $RC) in ${TOOK} s: $(grep -v '^\s*$' "$CAPPED_LOG" | tail -1 | cut -c1-200)"
  else
    say "- $1: ok in ${TOOK} s"
  fi
}
run() {
  local part=$1; shift
  capped "$@"
  verdict "$part"
  return "$RC"
}

: > "$SUMMARY"
say "# dlrun GPU window, $(date -u +%Y-%m-%dT%H:%M:%SZ)$([[ $FAKE == 1 ]] && echo ' (DRY RUN: no GPU, toy sizes)')"
say "window ${WINDOW} s; caps: $(for p in setup memcheck racecheck tests bench headline profile compile; do printf '%s=%s ' "$p" "${CAP[$p]}"; done)"
say "command: DLRUN_WINDOW_S=$WINDOW bench/gpu_window.sh (git $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"

# ---- setup: where the executables find their libraries -------------------------------------
# The carried executables link the torch of the GPU machine (the one python3 imports, 2.11.0+cu130
# there) and its nvidia/* libraries, and the Debian libraries carried in $BIN/lib beside them,
# through two wrappers in $WORK/bin that set LD_LIBRARY_PATH for them alone.
if c=$(cap setup); then
  if [[ -z "$BIN" || ! -x "$BIN/dlrun" ]]; then
    say "- setup: FAILED: no executables in ${DLRUN_GPU_BIN:-.gpubin} (scripts/pack-gpu-bin.sh makes them)"
    exit 1
  fi
  # Only the executables see this path (through the wrappers below), not python3: the GPU
  # machine's own libraries first, the carried Debian ones last (they fill in what it lacks).
  TORCH_DIR="$("$PY" -c 'import os,torch;print(os.path.dirname(torch.__file__))' 2>/dev/null)"
  libs=""
  [[ -n "$TORCH_DIR" ]] && libs="$TORCH_DIR/lib"
  for d in "$TORCH_DIR"/../nvidia/*/lib; do [[ -d "$d" ]] && libs+=":$(cd "$d" && pwd)"; done
  libs+="${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:$BIN/lib"
  REAL_TESTS="$BIN/dlrun_core_tests"
  [[ -x "$REAL_TESTS" ]] || REAL_TESTS="$BIN/tests/dlrun_core_tests"
  mkdir -p "$WORK/bin"
  for pair in "dlrun:$BIN/dlrun" "dlrun_core_tests:$REAL_TESTS"; do
    printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$libs" "${pair#*:}" > "$WORK/bin/${pair%%:*}"
    chmod +x "$WORK/bin/${pair%%:*}"
  done
  DLRUN="$WORK/bin/dlrun"
  CORE_TESTS="$WORK/bin/dlrun_core_tests"
  {
    if command -v nvidia-smi > /dev/null; then nvidia-smi; else echo "(no nvidia-smi)"; fi
    nproc
    "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())'
    echo "the executables' LD_LIBRARY_PATH=$libs"
    for b in "$BIN/dlrun" "$REAL_TESTS"; do echo "== ldd $b"; LD_LIBRARY_PATH="$libs" ldd "$b"; done
  } > "$OUT/machine.txt" 2>&1
  missing=$(grep -c "=> not found" "$OUT/machine.txt")
  run setup "$c" "$WORK/logs/info.txt" "$DLRUN" info
  grep -E "NVIDIA H|NVIDIA-SMI|^torch " "$OUT/machine.txt" | head -3 | sed 's/^/    /' | tee -a "$SUMMARY"
  grep -E "^device|GPU code for|batchnorm" "$WORK/logs/info.txt" | head -4 | sed 's/^/    /' | tee -a "$SUMMARY"
  if (( missing > 0 )); then
    say "- setup: FAILED: $missing librar(ies) not found: $(grep '=> not found' "$OUT/machine.txt" | awk '{print $1}' | sort -u | tr '\n' ' ')"
    exit 1
  fi
fi
pack

# ---- (a) the kernel tests: under compute-sanitizer, then plainly ----------------------------
SPEC_PLAIN="[gpu][kernels]~[models]"
SPEC_TOOLS="[gpu][kernels]~[models]~[large]"
[[ $FAKE == 1 ]] || export DLRUN_REQUIRE_GPU=1
SAN="${DLRUN_WINDOW_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}"
: > "$OUT/kernel-tests.txt"
for tool in memcheck racecheck; do
  c=$(cap "$tool") || continue
  if [[ ! -x "$SAN" ]]; then
    say "- $tool: no compute-sanitizer here ($SAN): skipped"
    continue
  fi
  log="$WORK/logs/sanitizer-$tool.txt"
  capped "$c" "$log" env LD_LIBRARY_PATH="$libs" "$SAN" --tool "$tool" --error-exitcode 9 "$REAL_TESTS" "$SPEC_TOOLS"
  refusal='device not supported|error 999|CUDA_ERROR_NOT_SUPPORTED|failed to initialize'
  if (( RC != 0 && RC != 124 && RC != 137 )) && grep -qiE "$refusal" "$log"; then
    say "- $tool: compute-sanitizer refused the device on this machine's runtime, no $tool verdict: $(grep -m1 -iE "$refusal" "$log" | cut -c1-120)"
  else
    verdict "$tool"
  fi
  { echo "== compute-sanitizer $tool: $SPEC_TOOLS"; tail -25 "$log"; } >> "$OUT/kernel-tests.txt"
  grep -E "ERROR SUMMARY|test cases" "$log" | tail -2 | sed 's/^/    /' | tee -a "$SUMMARY"
  pack
done
if c=$(cap tests); then
  log="$WORK/logs/kernel-tests.txt"
  run tests "$c" "$log" "$CORE_TESTS" "$SPEC_PLAIN" --durations yes
  { echo "== plainly: $SPEC_PLAIN"; grep -vE "^\s*$" "$log" | tail -60; } >> "$OUT/kernel-tests.txt"
  { grep -E "^test cases|refused|^self-check" "$log" | head -8
    grep -c "SKIP: no CUDA device" "$log" | sed 's/$/ case(s) skipped: no CUDA device/'; } | sed 's/^/    /' | tee -a "$SUMMARY"
fi
pack

# ---- (b) dlrun bench kernels per dtype and path ----------------------------------------------
if c=$(cap bench); then
  : > "$OUT/bench-kernels.txt"
  each=$(( c / 4 ))
  for spec in "fp16 cudnn" "fp16 dlrun" "bf16 dlrun" "bf16 cudnn"; do
    read -r dt path <<< "$spec"
    (( $(left) > 10 )) || { say "- bench $dt $path: skipped, the window is spent"; break; }
    (( each > $(left) )) && each=$(left)
    args=(--device cuda --dtype "$dt" --path "$path" --repeat 3 --iters 5 --no-e2e)
    # (the dry run: the CPU, float32, dlrun's kernels, a toy batch)
    [[ $FAKE == 1 ]] && args=(--device cpu --dtype fp32 --path dlrun --batch 2 --image-size 32 --repeat 3 --iters 1 --no-e2e)
    log="$WORK/logs/bench-kernels-$dt-$path.txt"
    run "bench $dt $path" "$each" "$log" "$DLRUN" bench kernels "${args[@]}"
    { echo "== dlrun bench kernels ${args[*]}"; cat "$log"; echo; } >> "$OUT/bench-kernels.txt"
    grep -E "^over the network|refused|FAILED" "$log" | head -3 | sed 's/^/    /' | tee -a "$SUMMARY"
    pack
  done
fi

# ---- (c) the headline rows: PyTorch eager vs dlrun, ResNet-50, bf16 and fp16 channels_last ----
AMP=(bench/gpu_amp.py --dlrun "$DLRUN" --results-dir "$OUT/results" --log-dir "$WORK/logs/amp")
if c=$(cap headline); then
  args=(--only resnet50 --dtypes bf16,fp16 --layouts channels_last --variants pytorch-eager,dlrun-eager,dlrun-cudnn
        --reps 2 --steps 50 --warmup 20)
  [[ $FAKE == 1 ]] && args=(--device cpu --tiny --dtypes fp32 --layouts channels_last --variants pytorch-eager,dlrun-eager
                            --reps 2 --steps 5 --warmup 0 --threads 1)
  run headline "$c" "$WORK/logs/headline.txt" "$PY" "${AMP[@]}" "${args[@]}"
  res="$(ls -t "$OUT"/results/*.tsv 2>/dev/null | head -1)"
  if [[ -n "$res" ]]; then
    say "    results/$(basename "$res") (commit it to bench/results/):"
    grep -vE "^#" "$res" | cut -f1-4,6,9,13,18 | sed 's/^/    /' | tee -a "$SUMMARY"
  else
    grep -E "rep [0-9]" "$WORK/logs/headline.txt" | sed 's/^/    so far: /' | tee -a "$SUMMARY"
  fi
fi
pack

# ---- (d) with time left: profiled dlrun steps, then torch.compile ----------------------------
if c=$(cap profile); then
  : > "$OUT/profile.txt"
  for path in auto cudnn; do
    (( $(left) > 20 )) || break
    run_dir="$WORK/run-profile-$path"
    args=(configs/synthetic/resnet50.yaml --run-dir "$run_dir" run.device=cuda train.max_steps=14 data.batch_size=256
          data.device_resident=true amp.enabled=true amp.dtype=bf16 model.channels_last=true
          model.fused_conv_bn_relu="$path" profile.steps=2 profile.start_step=10 log.progress=none
          train.eval_at_end=false train.eval_every_epochs=0 checkpoint.at_end=false)
    [[ $FAKE == 1 ]] && args=(configs/synthetic/resnet18.yaml --run-dir "$run_dir" run.device=cpu train.max_steps=6
          data.batch_size=4 data.synthetic_shape=[3,32,32] model.fused_conv_bn_relu="$path" profile.steps=2
          profile.start_step=3 log.progress=none train.eval_at_end=false train.eval_every_epochs=0 checkpoint.at_end=false)
    each=$(( c / 2 )); (( each > $(left) )) && each=$(left)
    run "profile $path" "$each" "$WORK/logs/train-profile-$path.txt" "$DLRUN" train "${args[@]}"
    trace="$(ls "$run_dir"/profile/*.trace.json 2>/dev/null | head -1)"
    if [[ -n "$trace" ]]; then
      "$PY" bench/trace_kernels.py "$trace" --steps 2 --out "$WORK/logs/kernels-$path.txt" > /dev/null 2>&1
      { echo "== fused_conv_bn_relu=$path: $(grep -o 'conv-BN-ReLU path [a-z]* ([^)]*)' \
          "$WORK/logs/train-profile-$path.txt" | head -1)"; cat "$WORK/logs/kernels-$path.txt" 2>/dev/null; echo; } \
        >> "$OUT/profile.txt"
      tail -1 "$WORK/logs/kernels-$path.txt" 2>/dev/null | sed "s/^/    $path: /" | tee -a "$SUMMARY"
    fi
    pack
  done
fi
if c=$(cap compile); then
  args=(--only resnet50 --dtypes bf16 --layouts channels_last --variants pytorch-eager,compile-default --reps 2
        --steps 50 --warmup 10)
  [[ $FAKE == 1 ]] && args=(--device cpu --tiny --dtypes fp32 --layouts channels_last --variants pytorch-eager
                            --reps 1 --steps 5 --warmup 0 --threads 1)
  run compile "$c" "$WORK/logs/compile.txt" "$PY" "${AMP[@]}" "${args[@]}"
  grep -E "compiled in|^resnet50.*compile" "$WORK/logs/compile.txt" | head -3 | sed 's/^/    /' | tee -a "$SUMMARY"
fi

say "window used: $(( $(date +%s) - T0 )) s of ${WINDOW} s"
