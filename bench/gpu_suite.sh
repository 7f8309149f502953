#!/usr/bin/env bash
# bench/gpu_suite.sh — every GPU check of dlrun in one command, for a GPU machine without
# network (the machine docs/benchmarks.md reports on): build against the Debian libraries
# carried in .devdeps (made by scripts/pack-gpu-deps.sh on a networked machine), run the
# GPU-labelled tests, then the GPU benchmarks.
#
#   scripts/pack-gpu-deps.sh                 # once, where Debian's registry is reachable
#   OUT=/somewhere bench/gpu_suite.sh        # on the GPU machine, from the checkout
#
# Each issue that adds a GPU path adds its checks here. Steps that fail are reported in
# summary.md and the script goes on; its exit code is non-zero if any failed.
#
# Results. Logs, tables and run records are written under $DLRUN_GPU_WORK (default
# /tmp/dlrun-gpu) and packed after every part into $OUT/gpu-results.tgz, with summary.md beside
# it: a device call returns at most 8 files from $OUT, and what is there when a call is cut off
# still comes back. After a build, $OUT/gpu-bin.tgz holds the executables (dlrun, the test
# binaries, a few MB): a later call on a fresh machine runs them from a carried folder
# (DLRUN_GPU_BIN=.gpubin, unpacked from that archive) instead of building again.
#
# Time. One device call may run 10 minutes, and a session has 15 minutes of device time in all,
# the machine's start (1-2 minutes) and every idle wait included; a machine idle for 30 s is
# given back (the next call gets a fresh one). So this suite is for a session whose work is the
# suite itself; the GPU speed work's window is bench/gpu_window.sh, one call of at most 9 minutes
# with its executables carried. The suite stops starting parts when less than a part needs is left of
# DLRUN_GPU_BUDGET_S (default 540 s), and DLRUN_GPU_PARTS picks parts (default all: "build
# safety tests sanitize kernels paths telemetry fast amp memory compare pipeline firsthour ema
# swa oom ckpt throughput"), in the order of what a session needs most:
#   1. DLRUN_GPU_PARTS="build safety tests sanitize"  the build (all cores), the safety checks
#                                                  (issue 28) and every GPU test
#   2. DLRUN_GPU_PARTS="kernels telemetry fast"    fused BatchNorm; records; time to accuracy
#   3. DLRUN_GPU_PARTS="amp"                       dlrun vs PyTorch on the GPU fast paths
#   4. DLRUN_GPU_PARTS="memory compare"            activation checkpointing; the harness
#   5. DLRUN_GPU_PARTS="pipeline firsthour ema swa oom ckpt throughput"
# Calls 2.. carry .gpubin (made from call 1's gpu-bin.tgz) with .devdeps.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu-out}"                       # what comes back: summary.md and two archives
RES="${DLRUN_GPU_WORK:-/tmp/dlrun-gpu}"           # everything the parts write
BUILD="${DLRUN_GPU_BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${DLRUN_GPU_JOBS:-$(nproc)}"
PARTS=" ${DLRUN_GPU_PARTS:-build safety tests sanitize kernels paths telemetry fast amp memory compare pipeline firsthour ema swa oom ckpt throughput} "
BUDGET="${DLRUN_GPU_BUDGET_S:-540}"
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
mkdir -p "$OUT" "$RES"
cd "$ROOT"
failed=()
summary="$RES/summary.md"
echo "# dlrun GPU suite, $(date -u +%Y-%m-%dT%H:%M:%SZ), parts:$PARTS" >> "$summary"
step() { echo "== $*" | tee -a "$RES/suite.log"; }
fail() { failed+=("$1"); echo "- FAILED: $1" >> "$summary"; }
# The results into $OUT: summary.md and gpu-results.tgz (without the profiler traces and run
# directories if it would pass 15 MiB, a device call's limit being 16 MiB a file).
pack() {
  cp "$summary" "$OUT/summary.md"
  tar czf "$OUT/gpu-results.tgz" -C "$RES" . 2>/dev/null
  if (( $(stat -c %s "$OUT/gpu-results.tgz") > 15 * 1024 * 1024 )); then
    tar czf "$OUT/gpu-results.tgz" -C "$RES" --exclude='*.trace.json' --exclude='run-*' . 2>/dev/null
  fi
}
trap pack EXIT
# want PART SECONDS: PART was asked for, and at least SECONDS of the budget are left for it.
want() {
  [[ "$PARTS" == *" $1 "* ]] || return 1
  if (( $(left) < ${2:-0} )); then
    echo "- skipped $1: $(left) s of the budget left, it needs about ${2:-0} s" >> "$summary"
    return 1
  fi
}

step "machine"
{ nvidia-smi || true; nproc; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; } \
  > "$RES/machine.txt" 2>&1
grep -E "NVIDIA|torch" "$RES/machine.txt" | head -4 | sed 's/^/    /' >> "$summary"

step "libraries"
DEVDEPS="${DLRUN_GPU_DEVDEPS:-.devdeps}"
if [[ -x "$DEVDEPS/unpack.sh" ]]; then
  bash "$DEVDEPS/unpack.sh" > "$RES/unpack.log" 2>&1 || fail "unpack $DEVDEPS"
else
  echo "- no $DEVDEPS/unpack.sh: run scripts/pack-gpu-deps.sh on a networked machine and carry .devdeps" >> "$summary"
fi
# Fashion-MNIST (Debian's dataset-fashion-mnist, carried in .devdeps): the tests read it at
# Debian's place, so it is linked there when that is missing and writable; else the runs below
# name the unpacked copy.
FMNIST=/usr/share/datasets/fashion-mnist
CARRIED_FMNIST=/opt/devdeps/usr/share/datasets/fashion-mnist
if [[ ! -d "$FMNIST" && -d "$CARRIED_FMNIST" ]]; then
  { mkdir -p "$(dirname "$FMNIST")" && ln -sfn "$CARRIED_FMNIST" "$FMNIST"; } 2>/dev/null || FMNIST="$CARRIED_FMNIST"
fi
[[ -d "$FMNIST" ]] || echo "- no Fashion-MNIST at $FMNIST: the e2e tests, compare's resnet18 and fast.yaml will fail" >> "$summary"
TORCH_CMAKE="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')"
export CMAKE_PREFIX_PATH="/opt/devdeps/usr:$TORCH_CMAKE"
export LD_LIBRARY_PATH="/opt/devdeps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
MULTIARCH_INC=/opt/devdeps/usr/include/x86_64-linux-gnu  # OpenSSL's configuration.h lives here

# Executables: built here, or carried from an earlier call's gpu-bin.tgz (DLRUN_GPU_BIN).
BIN="$BUILD"
if [[ -n "${DLRUN_GPU_BIN:-}" && -x "$DLRUN_GPU_BIN/dlrun" ]]; then
  BIN="$(cd "$DLRUN_GPU_BIN" && pwd)"
  echo "- executables from $DLRUN_GPU_BIN (an earlier call's build): $("$BIN/dlrun" --version 2>&1)" >> "$summary"
elif want build 0; then
  step "build ($JOBS jobs)"
  start=$(date +%s)
  # TORCH_CUDA_ARCH_LIST narrowed to this machine's GPU (the default list costs minutes more;
  # the safety part below checks what was built against what was asked).
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDLRUN_CUDA=ON \
        -DTORCH_CUDA_ARCH_LIST="${DLRUN_GPU_ARCHS:-9.0}" -DDLRUN_PYTHON="$(command -v python3)" \
        -DOPENSSL_ROOT_DIR=/opt/devdeps/usr -DCMAKE_CXX_FLAGS="-isystem $MULTIARCH_INC" \
        > "$RES/configure.log" 2>&1 || fail "configure"
  cmake --build "$BUILD" -j "$JOBS" > "$RES/build.log" 2>&1 || fail "build"
  echo "- build: $(( $(date +%s) - start )) s with $JOBS jobs" >> "$summary"
  mkdir -p "$BUILD/tests"
  tar czf "$OUT/gpu-bin.tgz" -C "$BUILD" dlrun -C "$BUILD/tests" dlrun_core_tests dlrun_base_tests 2>>"$RES/suite.log" \
    || fail "packing the executables"
fi
DLRUN="$BIN/dlrun"
CORE_TESTS="$BIN/dlrun_core_tests"
[[ -x "$CORE_TESTS" ]] || CORE_TESTS="$BIN/tests/dlrun_core_tests"
[[ -x "$DLRUN" ]] || { fail "no dlrun binary"; printf '%s\n' "${failed[@]}"; exit 1; }
"$DLRUN" info > "$RES/info.txt" 2>&1 || fail "dlrun info"
pack

# A command with what is left of the budget as its time limit (10 s at the least), so that a
# part running long ends inside the device call and its results are still packed.
limited() { local t; t=$(left); (( t > 10 )) || t=10; timeout -k 10 "$t" "$@"; }

# Issue 28, first: the GPU paths fail safe. A [gpu] case that finds no device fails here
# (DLRUN_REQUIRE_GPU=1) instead of skipping; the binary carries the GPU code it was built for
# and no toolkit RUNPATH; `dlrun info` sees the device and the fused kernels' image; a training
# run self-checks its fused kernels (summary.json's fused_kernels), falls back to the modules
# under an injected defect, and fails with exit 1 under fused_conv_bn_relu: true.
export DLRUN_REQUIRE_GPU=1
if want safety 60; then
step "safety: architectures, RUNPATH, dlrun info, the fused-kernel self-check and its fallback"
# What was asked of nvcc: TORCH_CUDA_ARCH_LIST as this suite built it ("9.0" -> sm_90, "9.0+PTX"
# adds compute_90); for carried executables, what their own `dlrun info` says.
asked=""
if [[ -z "${DLRUN_GPU_BIN:-}" ]]; then
  archs="${DLRUN_GPU_ARCHS:-9.0}"
  for a in ${archs//;/ }; do
    n=${a%%+*}; n=${n/./}; asked+=" sm_$n"; [[ "$a" == *+PTX ]] && asked+=" compute_$n"
  done
else
  asked=$(grep -o 'GPU code for: .*' "$RES/info.txt" | cut -d: -f2)
fi
python3 tools/cuda_archs.py "$DLRUN" --expect "$asked" --runpath-excludes /usr/local/cuda \
  > "$RES/cuda-archs.txt" 2>&1 || fail "cuda_archs: the binary's GPU code (asked:$asked)"
sed 's/^/    /' "$RES/cuda-archs.txt" | head -5 >> "$summary"
grep -E "^device|GPU code for" "$RES/info.txt" | sed 's/^/    /' >> "$summary"
# safe NAME EXPECTED_EXIT CHECK [ENV=VALUE ...] -- OVERRIDES...: a short resnet18 run on the GPU;
# CHECK, a Python expression over `s` (summary.json) and `log` (the run's output), must hold.
safe() {
  local name=$1 want=$2 check=$3; shift 3
  local envs=(); while [[ "$1" != "--" ]]; do envs+=("$1"); shift; done; shift
  rm -rf "$RES/run-$name"
  env ${envs[@]+"${envs[@]}"} timeout 120 "$DLRUN" train configs/synthetic/resnet18.yaml --run-dir "$RES/run-$name" \
    run.device=cuda train.max_steps=5 data.batch_size=64 log.progress=none \
    train.eval_at_end=false train.eval_every_epochs=0 checkpoint.at_end=false "$@" > "$RES/train-$name.log" 2>&1
  local got=$?
  (( got == want )) || fail "safety $name: exit $got, expected $want"
  python3 - "$RES/run-$name/summary.json" "$RES/train-$name.log" "$name" "$got" "$check" >> "$summary" 2>&1 <<'PY' \
    || fail "safety $name: $check"
import json, sys
s, log = json.load(open(sys.argv[1])), open(sys.argv[2]).read()
print(f"    {sys.argv[3]}: exit {sys.argv[4]}, fused_kernels {json.dumps(s.get('fused_kernels'))}")
assert eval(sys.argv[5]), sys.argv[5]
PY
  rm -rf "$RES/run-$name/checkpoints"
}
# (model.fused_conv_bn_relu: auto fuses in NCHW only: channels_last runs cuDNN's BatchNorm.)
safe checked 0 's["fused_kernels"]["enabled"] and s["fused_kernels"]["checks"] and all(c["passed"] for c in s["fused_kernels"]["checks"])' \
  DLRUN_FAULT= -- amp.enabled=true amp.dtype=bf16
safe fallback 0 'not s["fused_kernels"]["checks"][0]["passed"] and "this run uses the modules" in log' \
  DLRUN_FAULT=fused_mismatch --
safe strict 1 's["status"] == "failed" and "does not train on wrong kernels" in log' \
  DLRUN_FAULT=fused_mismatch -- model.fused_conv_bn_relu=true
grep -h "fused kernels\|disagree" "$RES"/train-checked.log "$RES"/train-fallback.log | head -4 | sed 's/^/    /' >> "$summary"
pack
fi

if want tests 60; then
step "tests: the gpu label"
[[ -f "$BUILD/CTestTestfile.cmake" ]] || fail "tests: no build directory here (run them in the call that builds)"
limited ctest --test-dir "$BUILD" -L gpu --output-on-failure --no-tests=error > "$RES/tests-gpu.log" 2>&1 \
  || fail "ctest -L gpu"
grep -E "tests passed|Skipped|Failed|\*\*\*" "$RES/tests-gpu.log" | sed 's/^/    /' >> "$summary"
pack
fi

# Issue 11: the fused kernels' comparison with the CPU under compute-sanitizer (memory errors,
# shared-memory races); the [sanitize] tag leaves out the long ones (200 training steps, a
# 140 M-value tensor), which would take hours under the tools.
SAN=/usr/local/cuda/bin/compute-sanitizer
if want sanitize 60 && [[ -x "$SAN" ]]; then
  step "compute-sanitizer memcheck and racecheck on the [gpu][sanitize] cases"
  for tool in memcheck racecheck; do
    limited "$SAN" --tool "$tool" --error-exitcode 9 "$CORE_TESTS" "[gpu][sanitize]" \
      > "$RES/sanitizer-$tool.log" 2>&1 || fail "compute-sanitizer $tool"
    echo "    compute-sanitizer $tool: $(tail -1 "$RES/sanitizer-$tool.log")" >> "$summary"
  done
  pack
fi

# Issue 11: the fused BatchNorm operators against PyTorch's unfused sequence on ResNet-50's
# shapes at batch 256, bf16, channels_last (the BN+ReLU part's speedup and bandwidth against the
# copy bandwidth), then resnet50 training with the operators on and off; NCHW once more.
if want kernels 120; then
step "benchmark: dlrun bench kernels (fused vs unfused, ResNet-50 shapes, batch 256 bf16 channels_last)"
limited "$DLRUN" bench kernels --device cuda > "$RES/bench-kernels.txt" 2>>"$RES/suite.log" || fail "bench kernels"
tail -3 "$RES/bench-kernels.txt" | sed 's/^/    /' >> "$summary"
pack
if want kernels 90; then
  limited "$DLRUN" bench kernels --device cuda --nchw --e2e-steps 10 > "$RES/bench-kernels-nchw.txt" \
    2>>"$RES/suite.log" || fail "bench kernels --nchw"
  pack
fi
fi

# Issue 40: which conv-BN-ReLU path is fastest where. The kernel tests (dlrun's vectorised
# channels_last kernels, cuDNN's fused BatchNorm-activation, the self-check over both), then
# `dlrun bench kernels` in channels_last for each dtype and path (dlrun's kernels, cuDNN's fused
# ops) against PyTorch's unfused sequence, then the CUDA kernels of two profiled ResNet-50
# training steps per dtype and path (auto, cudnn, true), top 25 by time, with the BatchNorm
# implementation seen (bench/trace_kernels.py). The figures decide kMeasured in
# src/kernels/bn_path.cpp (what model.fused_conv_bn_relu: auto picks).
if want paths 150; then
step "paths: kernel tests, bench kernels per dtype and path, profiled resnet50 steps"
limited "$CORE_TESTS" "[gpu][kernels]" > "$RES/tests-kernels.log" 2>&1 || fail "[gpu][kernels] tests"
grep -E "test cases|refuses bf16|self-check" "$RES/tests-kernels.log" | head -8 | sed 's/^/    /' >> "$summary"
for spec in "fp16 cudnn" "bf16 cudnn" "bf16 dlrun" "fp16 dlrun"; do
  read -r dt path <<< "$spec"
  want paths 45 || break
  limited "$DLRUN" bench kernels --device cuda --dtype "$dt" --path "$path" --repeat 3 --iters 10 --e2e-steps 20 \
    > "$RES/bench-kernels-$dt-$path.txt" 2>>"$RES/suite.log" || fail "bench kernels --dtype $dt --path $path"
  echo "    bench kernels $dt channels_last, path $path:" >> "$summary"
  tail -3 "$RES/bench-kernels-$dt-$path.txt" | sed 's/^/      /' >> "$summary"
  pack
done
for dt in bf16 fp16; do
  for path in auto cudnn true; do
    want paths 30 || break 2
    run="$RES/run-profile-$dt-$path"
    rm -rf "$run"
    limited "$DLRUN" train configs/synthetic/resnet50.yaml --run-dir "$run" run.device=cuda train.max_steps=14 \
      data.batch_size=256 data.device_resident=true amp.enabled=true amp.dtype="$dt" model.channels_last=true \
      model.fused_conv_bn_relu="$path" profile.steps=2 profile.start_step=10 log.progress=none \
      train.eval_at_end=false train.eval_every_epochs=0 checkpoint.at_end=false > "$RES/train-profile-$dt-$path.log" 2>&1 \
      || fail "profiled resnet50 step ($dt, $path)"
    trace="$(ls "$run"/profile/*.trace.json 2>/dev/null | head -1)"
    if [[ -n "$trace" ]]; then
      python3 bench/trace_kernels.py "$trace" --steps 2 --out "$RES/kernels-dlrun-resnet50-$dt-$path.txt" > /dev/null
      echo "    dlrun resnet50 $dt channels_last, fused_conv_bn_relu=$path: $(grep -o 'conv-BN-ReLU path [a-z]*' \
        "$RES/train-profile-$dt-$path.log" | head -1); $(tail -2 "$RES/kernels-dlrun-resnet50-$dt-$path.txt" | tr '\n' ' ')" \
        >> "$summary"
    fi
    rm -rf "$run/checkpoints"
  done
done
pack
fi

# Issue 12: where the time goes on a GPU -- the per-phase step times (CUDA events), NVML
# telemetry and the caching allocator's peak in the run's records, and a Kineto trace with
# CUDA kernels in it.
if want telemetry 60; then
step "telemetry: phase times, NVML, peak memory, a profiler trace with CUDA kernels"
run="$RES/run-telemetry"
rm -rf "$run"
if limited "$DLRUN" train configs/synthetic/resnet50.yaml --run-dir "$run" run.device=cuda train.max_steps=40 \
     data.batch_size=128 data.device_resident=true amp.enabled=true amp.dtype=bf16 model.channels_last=true \
     log.every_steps=10 log.progress=none train.eval_at_end=false train.eval_every_epochs=0 checkpoint.at_end=false \
     profile.steps=3 profile.start_step=20 > "$RES/train-telemetry.log" 2>&1; then
  python3 - "$run" >> "$summary" 2>&1 <<'PY' || fail "telemetry records"
import glob, json, sys
run = sys.argv[1]
rows = [json.loads(l) for l in open(run + "/metrics.jsonl") if '"samples_per_s"' in l]
last = rows[-1]
s = json.load(open(run + "/summary.json"))
trace = json.load(open(glob.glob(run + "/profile/*.pt.trace.json")[0]))
kernels = sum(1 for e in trace["traceEvents"] if e.get("cat") == "kernel")
print(f"    last record: " + ", ".join(f"{k}={last.get(k)}" for k in (
    "samples_per_s", "data_wait_s", "forward_s", "backward_s", "optimizer_s", "gpu_util_pct", "gpu_mem_used_mb",
    "gpu_power_w", "gpu_temp_c")))
print(f"    summary time_s={s['time_s']} peak_cuda_memory_mb={s['peak_cuda_memory_mb']}; trace: {kernels} CUDA kernels")
assert last.get("forward_s", 0) > 0 and s["peak_cuda_memory_mb"]["allocated"] > 0 and kernels > 0
PY
else
  fail "train telemetry"
fi
rm -rf "$run/checkpoints"
pack
fi

# Issue 12: time to accuracy on one GPU (configs/fashion_mnist/fast.yaml, target >= 95.0 % in
# <= 60 s of wall time, end to end). Needs Debian's dataset-fashion-mnist files (carried in .devdeps).
if want fast 120; then
step "time to accuracy: configs/fashion_mnist/fast.yaml"
run="$RES/run-fast"
rm -rf "$run"
start=$(date +%s.%N)
if limited "$DLRUN" train configs/fashion_mnist/fast.yaml --run-dir "$run" log.progress=lines data.root="$FMNIST" \
     > "$RES/train-fast.log" 2>&1; then
  end=$(date +%s.%N)
  python3 - "$run" "$start" "$end" >> "$summary" <<'PY' || fail "fast.yaml summary"
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
print(f"    fast.yaml: accuracy {s['eval']['accuracy']:.4f} after {s['steps']} steps; training {s['wall_time_s']:.1f} s, "
      f"end to end {float(sys.argv[3]) - float(sys.argv[2]):.1f} s; time_s {s['time_s']}")
PY
else
  fail "train fast.yaml"
fi
rm -rf "$run/checkpoints"
pack
fi

# Issues 10 and 40: dlrun eager and with CUDA graphs next to PyTorch eager and torch.compile in
# the same run, in alternated repetitions (3 x 100 steps), data resident on the GPU on both
# sides. By default the headline rows, bf16 and fp16 channels_last, resnet50 then resnet18
# (torch.compile's mode "default" only: max-autotune compiles for minutes);
# DLRUN_GPU_AMP_ARGS replaces that choice (the whole grid: "--variants pytorch-eager,dlrun-eager,
# dlrun-graphs,compile-default,compile-max-autotune --dtypes fp32,bf16,fp16 --layouts
# nchw,channels_last"). The results file (bench/results/README.md; commit it there) is rewritten
# after each row group, so a run cut short keeps the groups that finished, marked partial.
if want amp 300; then
step "benchmark: GPU fast paths, dlrun vs PyTorch eager and torch.compile"
AMP_ARGS="${DLRUN_GPU_AMP_ARGS:---dtypes bf16,fp16 --layouts channels_last --variants pytorch-eager,dlrun-eager,dlrun-graphs,compile-default}"
# shellcheck disable=SC2086  # AMP_ARGS is a list of options
limited python3 bench/gpu_amp.py --dlrun "$DLRUN" $AMP_ARGS --results-dir "$RES/results" --out "$RES/gpu-amp.tsv" \
  --profile > "$RES/gpu-amp.log" 2>&1 || fail "bench/gpu_amp.py $AMP_ARGS"
results="$(ls -t "$RES"/results/*.tsv 2>/dev/null | head -1)"
if [[ -n "$results" ]]; then
  echo "  results/$(basename "$results") (to commit as bench/results/$(basename "$results")):" >> "$summary"
  sed 's/^/    /' "$results" >> "$summary"
else
  grep -E "^resnet" "$RES/gpu-amp.log" | sed 's/^/    so far: /' >> "$summary"
fi
grep -hE "batchnorm backend|^cudnn version" "$RES/gpu-amp.log" | sed 's/^ */    /' >> "$summary"
pack
fi

# Issue 10: activation checkpointing, ResNet-50 224x224 bf16 channels_last: peak memory of a
# step at batch 128, its time, and the largest batch that fits, per mode.
if want memory 180; then
step "benchmark: activation checkpointing none/blocks/stages (peak memory, step time, largest batch)"
for mode in none blocks stages; do
  limited "$DLRUN" bench memory --model resnet50 --batch 128 --image-size 224 --checkpointing "$mode" --amp bf16 \
    --channels-last --device cuda --repeat 10 --max-batch --json >> "$RES/memory.jsonl" 2>>"$RES/suite.log" \
    || fail "bench memory $mode"
done
[[ -f "$RES/memory.jsonl" ]] && sed 's/^/    /' "$RES/memory.jsonl" >> "$summary"
pack
fi

# Issue 12: the side-by-side harness on the GPU workloads (resnet18 28x28 batch 512, resnet50
# 224 bf16 channels_last, resnet50 on a generated JPEG folder, a DDP world of one).
if want compare 300; then
step "benchmark: bench/compare.py --workloads gpu"
limited python3 bench/compare.py --dlrun "$DLRUN" --workloads gpu --reps 2 --steps 80 --fmnist "$FMNIST" \
  --jpegs 1280 --out "$RES/compare-logs" > "$RES/compare.md" 2>&1 || fail "bench/compare.py gpu"
sed 's/^/    /' "$RES/compare.md" | tail -16 >> "$summary"
pack
fi

# Issue 12: the input pipeline alone, dlrun's loader vs torchvision ImageFolder + DataLoader (PIL)
# on generated JPEGs, 1, 2 and all cores' workers.
if want pipeline 180; then
step "benchmark: bench/compare.py --workloads pipeline"
limited python3 bench/compare.py --dlrun "$DLRUN" --workloads pipeline --reps 2 --jpegs 1280 \
  --out "$RES/pipeline-logs" > "$RES/pipeline.md" 2>&1 || fail "bench/compare.py pipeline"
sed 's/^/    /' "$RES/pipeline.md" | tail -10 >> "$summary"
pack
fi

# Issue 30: on a GPU every shipped config validates (the GPU ones are refused on a CPU-only
# machine, as train refuses them); bench data delivers batches to the GPU; a fine-tune from an
# export with a validation split, the best checkpoint and early stopping runs on CUDA.
if want firsthour 90; then
step "first hour: shipped configs validate here, bench data to cuda, model.init + keep_best + early_stop on cuda"
bash tests/cli/validate_configs.sh "$DLRUN" "$ROOT" > "$RES/validate-configs.txt" 2>&1 || fail "validate_configs.sh"
tail -1 "$RES/validate-configs.txt" | sed 's/^/    /' >> "$summary"
limited "$DLRUN" bench data configs/quickstart.yaml run.device=cuda --batches 50 --json \
  > "$RES/bench-data-cuda.json" 2>>"$RES/suite.log" || fail "bench data run.device=cuda"
W="$RES/firsthour"; T=tests/e2e/data/tiny.yaml
{ limited "$DLRUN" train $T run.device=cuda train.epochs=1 --run-dir "$W/base" &&
  "$DLRUN" export --checkpoint "$W/base" --output "$W/base.safetensors" &&
  limited "$DLRUN" train $T run.device=cuda "model.init=$W/base.safetensors" data.val_fraction=0.25 \
    checkpoint.keep_best=accuracy train.early_stop=loss train.epochs=4 --run-dir "$W/ft"; } \
  >> "$RES/suite.log" 2>&1 || fail "model.init + keep_best + early_stop on cuda"
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print('    fine-tune on cuda:', s['status'], 'init', \
s['init'] and s['init']['loaded'], 'best', s['best'], 'test', s['test'])" "$W/ft/summary.json" >> "$summary" 2>&1
pack
fi

# Issue 31: the weights' moving average on CUDA (eager and with train.cuda_graphs, where the
# update is captured inside the step's graph), resumed exactly after a SIGTERM; check-resume of
# the tiny config on cuda; an ONNX export of the result; the update's cost in a captured
# ResNet-18 step (img/s with and without train.ema_decay, side by side).
if want ema 120; then
step "EMA on cuda (eager, CUDA graphs), resumed; check-resume on cuda; ONNX export of the average"
W="$RES/ema"; T=tests/e2e/data/tiny.yaml
for g in false true; do
  limited "$DLRUN" train $T run.device=cuda train.ema_decay=0.99 train.cuda_graphs=$g train.epochs=2 \
    --run-dir "$W/base-$g" >> "$RES/suite.log" 2>&1 || fail "ema on cuda (cuda_graphs=$g)"
  DLRUN_FAULT=signal_at_step:13 limited "$DLRUN" train $T run.device=cuda train.ema_decay=0.99 \
    train.cuda_graphs=$g train.epochs=2 --run-dir "$W/resumed-$g" >> "$RES/suite.log" 2>&1
  limited "$DLRUN" train $T run.device=cuda train.ema_decay=0.99 train.cuda_graphs=$g train.epochs=2 \
    --run-dir "$W/resumed-$g" >> "$RES/suite.log" 2>&1 || fail "ema resume on cuda (cuda_graphs=$g)"
  python3 -c "import json,sys; a=json.load(open(sys.argv[1]))['ema']; b=json.load(open(sys.argv[2]))['ema']; \
print('    ema on cuda, cuda_graphs=$g: updates', a['updates'], 'resumed equal:', a==b)" \
    "$W/base-$g/summary.json" "$W/resumed-$g/summary.json" >> "$summary" 2>&1 || fail "ema summaries (cuda_graphs=$g)"
done
limited "$DLRUN" check-resume $T run.device=cuda --steps 24 --interruptions 3 --seed 1 \
  > "$RES/check-resume-cuda.txt" 2>&1 || fail "check-resume on cuda"
tail -1 "$RES/check-resume-cuda.txt" | sed 's/^/    /' >> "$summary"
"$DLRUN" export --checkpoint "$W/base-false" --weights ema --format onnx --output "$W/ema.onnx" \
  >> "$RES/suite.log" 2>&1 || fail "onnx export of a cuda run's average"
for ema in 0 0.999; do
  limited "$DLRUN" train configs/synthetic/resnet18.yaml run.device=cuda train.cuda_graphs=true train.ema_decay=$ema \
    train.max_steps=160 log.every_steps=20 train.eval_at_end=false train.eval_every_epochs=0 checkpoint.at_end=false \
    log.progress=none --run-dir "$W/cost-$ema" > "$W/cost-$ema.log" 2>&1 || fail "resnet18 with cuda_graphs (ema_decay=$ema)"
  grep -q "the step was captured" "$W/cost-$ema.log" || fail "resnet18 step not captured (ema_decay=$ema)"
  # The median of the logged intervals after the capture (the first two hold the warm-up).
  python3 -c "import json,statistics,sys; r=[json.loads(l)['samples_per_s'] for l in open(sys.argv[1]) \
if '\"samples_per_s\"' in l][2:]; print('    resnet18, cuda_graphs, ema_decay=$ema: median', \
round(statistics.median(r), 1), 'img/s over', len(r), 'intervals')" "$W/cost-$ema/metrics.jsonl" >> "$summary" 2>&1 \
    || fail "ema cost summary"
done
pack
fi

# Issue 31: stochastic weight averaging on CUDA (the epoch-end average, update_bn on the device),
# resumed exactly (check-resume); the live metrics endpoint on a GPU run, with its NVML gauges.
if want swa 90; then
step "SWA on cuda, check-resume; the metrics endpoint's GPU gauges"
W="$RES/swa"; T=tests/e2e/data/tiny.yaml
limited "$DLRUN" train $T run.device=cuda optim.swa_start_epoch=1 optim.swa_lr=0.01 optim.swa_anneal_epochs=1 \
  --run-dir "$W/base" >> "$RES/suite.log" 2>&1 || fail "swa on cuda"
python3 -c "import json,sys; s=json.load(open(sys.argv[1])); print('    swa on cuda: updates', s['swa']['updates'], \
'bn_updates', s['swa']['bn_updates'], 'eval', s['eval'].get('swa'))" "$W/base/summary.json" >> "$summary" 2>&1 \
  || fail "swa summary"
limited "$DLRUN" check-resume $T run.device=cuda optim.swa_start_epoch=1 optim.swa_lr=0.01 --steps 40 \
  --interruptions 3 --seed 2 > "$RES/check-resume-swa-cuda.txt" 2>&1 || fail "check-resume with swa on cuda"
tail -1 "$RES/check-resume-swa-cuda.txt" | sed 's/^/    /' >> "$summary"
PORT=$(( 20000 + RANDOM % 20000 ))
DLRUN_FAULT=slow_batch:100 limited "$DLRUN" train $T run.device=cuda log.metrics_port=$PORT train.epochs=2 \
  --run-dir "$W/endpoint" >> "$RES/suite.log" 2>&1 &
for i in $(seq 1 40); do
  sleep 0.5
  python3 -c "import sys,urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=2).read().decode())" \
    "http://127.0.0.1:$PORT/metrics" > "$W/scrape.txt" 2>/dev/null && grep -q dlrun_step "$W/scrape.txt" && break
done
wait
grep -E "^dlrun_(step|gpu_utilization_percent|gpu_memory_used_megabytes)" "$W/scrape.txt" | sed 's/^/    /' \
  >> "$summary" || fail "metrics endpoint on a GPU run (no GPU gauges scraped)"
pack
fi

# Issue 31: out-of-memory recovery with a real OutOfMemoryError: ResNet-50 at a batch no card
# holds (4096 images of 224x224, float32), train.micro_batch: auto; the split it settles on and
# the seconds from the error to the step's end (the log line), then a second step at that split.
if want oom 120; then
step "out-of-memory recovery: train.micro_batch: auto with a batch too large for the card"
limited "$DLRUN" train configs/synthetic/resnet50.yaml run.device=cuda train.micro_batch=auto data.batch_size=4096 data.synthetic_train_size=8192 \
  train.max_steps=2 train.eval_at_end=false train.eval_every_epochs=0 checkpoint.at_end=false log.progress=none \
  --run-dir "$RES/run-oom" > "$RES/train-oom.log" 2>&1 || fail "oom: train.micro_batch: auto did not recover"
grep -E "train.micro_batch" "$RES/train-oom.log" | cut -c1-240 | sed 's/^/    /' >> "$summary"
grep -q "fits with each micro-batch split into" "$RES/train-oom.log" || fail "oom: no recovery logged"
pack
fi

if want ckpt 60; then
step "benchmark: checkpoint stall and write, ResNet-50 state, on the GPU and on the CPU"
for dev in cuda cpu; do
  limited "$DLRUN" bench ckpt --model resnet50 --repeat 3 --device "$dev" --json > "$RES/bench-ckpt-$dev.json" \
    2>>"$RES/suite.log" || fail "bench ckpt --device $dev"
done
pack
fi

if want throughput 180; then
step "benchmark: training throughput on synthetic ImageNet-sized data (ResNet-50, batch 128)"
tsv="$RES/train-throughput.tsv"
printf 'variant\tsamples_per_s\tsteps\n' > "$tsv"
LAUNCH=()  # empty: dlrun alone; else the launcher command that starts it (distributed variants)
throughput() {  # name, overrides...
  local name="$1"; shift
  local run="$RES/run-$name"
  rm -rf "$run"
  if limited "${LAUNCH[@]}" "$DLRUN" train configs/synthetic/resnet50.yaml --run-dir "$run" run.device=cuda \
       train.max_steps=60 data.batch_size=128 data.workers=8 log.every_steps=10 log.progress=none \
       train.eval_at_end=false train.eval_every_epochs=0 checkpoint.at_end=false "$@" > "$RES/train-$name.log" 2>&1; then
    python3 - "$run" "$name" >> "$tsv" <<'PY'
import sys
sys.path.insert(0, "bench")
from runlog import mean_samples_per_s
print(f"{sys.argv[2]}\t{mean_samples_per_s(sys.argv[1], 20):.1f}\t60")  # after warm-up (autotuning, allocator)
PY
  else
    fail "train $name"
  fi
  rm -rf "$run/checkpoints"
}
throughput fp32-nchw model.channels_last=false
throughput fp32-nhwc model.channels_last=true
throughput amp-fp16-nhwc model.channels_last=true amp.enabled=true amp.dtype=fp16
throughput amp-bf16-nhwc model.channels_last=true amp.enabled=true amp.dtype=bf16
throughput amp-bf16-nhwc-resident model.channels_last=true amp.enabled=true amp.dtype=bf16 data.device_resident=true
# Issue 9: the same bf16 run as a world of 1 through the launcher (NCCL process group, the
# Reducer's bucketed all-reduce on one rank): its cost over the plain run above. On a machine
# with more GPUs, every GPU (same global batch per GPU, so 128 x GPUs).
LAUNCH=(python3 scripts/dlrun-launch --nproc-per-node 1 --)
throughput ddp1-amp-bf16-nhwc-resident model.channels_last=true amp.enabled=true amp.dtype=bf16 \
  data.device_resident=true dist.backend=nccl
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if (( ngpu > 1 )); then
  LAUNCH=(python3 scripts/dlrun-launch --nproc-per-node "$ngpu" --)
  throughput "ddp${ngpu}-amp-bf16-nhwc-resident" model.channels_last=true amp.enabled=true amp.dtype=bf16 \
    data.device_resident=true dist.backend=nccl data.batch_size=$((128 * ngpu))
fi
LAUNCH=()
sed 's/^/    /' "$tsv" >> "$summary"
pack
fi

# Not in the default list: CI runs these on every change; a GPU session has better uses for its
# minutes. DLRUN_GPU_PARTS="... cputests" runs them against the GPU build.
if want cputests 120; then
step "tests: the CPU labels against the GPU build"
limited ctest --test-dir "$BUILD" -L "unit|core|cli|ckpt|crash" -j "$JOBS" --timeout 600 > "$RES/tests-cpu.log" 2>&1 \
  || fail "ctest unit|core|cli|ckpt|crash"
grep -E "tests passed" "$RES/tests-cpu.log" | sed 's/^/    /' >> "$summary"
fi

echo >> "$summary"
if ((${#failed[@]})); then
  echo "FAILED steps: ${failed[*]}" | tee -a "$summary"
  exit 1
fi
echo "all steps passed" | tee -a "$summary"
