#!/usr/bin/env bash
# bench/gpu_suite.sh — every GPU check of dlrun in one command, for a GPU machine without
# network (the machine docs/benchmarks.md reports on): build against the Debian libraries
# carried in .devdeps (made by scripts/pack-gpu-deps.sh on a networked machine), run the
# GPU-labelled tests and the CPU test labels, then the GPU benchmarks. Every log and result
# table goes under $OUT (default ./gpu-out).
#
#   scripts/pack-gpu-deps.sh                 # once, where Debian's registry is reachable
#   OUT=/somewhere bench/gpu_suite.sh        # on the GPU machine, from the checkout
#
# Each issue that adds a GPU path adds its checks here. Steps that fail are reported in
# $OUT/summary.md and the script goes on; its exit code is non-zero if any failed.
#
# The whole suite takes longer than one 10-minute device call: DLRUN_GPU_PARTS picks parts
# (default all: "build tests kernels ckpt throughput amp memory telemetry fast compare
# pipeline"); the build directory stays between calls while the machine is held. In the order
# of what a 30-minute session needs most:
#   DLRUN_GPU_PARTS="build tests"            the build (all cores) and every GPU test
#   DLRUN_GPU_PARTS="kernels amp"            fused BatchNorm; dlrun vs PyTorch on the fast paths
#   DLRUN_GPU_PARTS="telemetry fast memory"  records, time to accuracy, activation checkpointing
#   DLRUN_GPU_PARTS="compare"                bench/compare.py's GPU workloads
#   DLRUN_GPU_PARTS="pipeline ckpt throughput"
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-$ROOT/gpu-out}"
BUILD="${DLRUN_GPU_BUILD_DIR:-$ROOT/build-gpu}"
JOBS="${DLRUN_GPU_JOBS:-$(nproc)}"
PARTS=" ${DLRUN_GPU_PARTS:-build tests kernels ckpt throughput amp memory telemetry fast compare pipeline} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
mkdir -p "$OUT"
cd "$ROOT"
failed=()
summary="$OUT/summary.md"
echo "# dlrun GPU suite, $(date -u +%Y-%m-%dT%H:%M:%SZ), parts:$PARTS" >> "$summary"
step() { echo "== $*" | tee -a "$OUT/suite.log"; }
fail() { failed+=("$1"); echo "- FAILED: $1" >> "$summary"; }

step "machine"
{ nvidia-smi || true; nproc; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; } \
  > "$OUT/machine.txt" 2>&1
grep -E "NVIDIA|torch" "$OUT/machine.txt" | head -4 | sed 's/^/    /' >> "$summary"

step "libraries"
if [[ -x .devdeps/unpack.sh ]]; then
  bash .devdeps/unpack.sh > "$OUT/unpack.log" 2>&1 || fail "unpack .devdeps"
else
  echo "no .devdeps/unpack.sh: run scripts/pack-gpu-deps.sh on a networked machine and carry .devdeps" >> "$summary"
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

step "build ($JOBS jobs)"
if want build && [[ -z "${DLRUN_GPU_SKIP_BUILD:-}" ]]; then
  start=$(date +%s)
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDLRUN_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DTORCH_CUDA_ARCH_LIST=9.0 -DDLRUN_PYTHON="$(command -v python3)" \
        -DOPENSSL_ROOT_DIR=/opt/devdeps/usr -DCMAKE_CXX_FLAGS="-isystem $MULTIARCH_INC" \
        > "$OUT/configure.log" 2>&1 || fail "configure"
  cmake --build "$BUILD" -j "$JOBS" > "$OUT/build.log" 2>&1 || fail "build"
  echo "- build: $(( $(date +%s) - start )) s with $JOBS jobs" >> "$summary"
fi
DLRUN="$BUILD/dlrun"
[[ -x "$DLRUN" ]] || { fail "no dlrun binary"; printf '%s\n' "${failed[@]}"; exit 1; }
"$DLRUN" info > "$OUT/info.txt" 2>&1 || fail "dlrun info"

if want tests; then
step "tests: gpu label, then the CPU labels"
ctest --test-dir "$BUILD" -L gpu --output-on-failure --no-tests=error > "$OUT/tests-gpu.log" 2>&1 || fail "ctest -L gpu"
grep -E "tests passed|Skipped|Failed" "$OUT/tests-gpu.log" | sed 's/^/    /' >> "$summary"
# e2e and python need Fashion-MNIST and Python packages the GPU machine may lack.
ctest --test-dir "$BUILD" -L "unit|core|cli|ckpt|crash" -j "$JOBS" --timeout 600 > "$OUT/tests-cpu.log" 2>&1 \
  || fail "ctest unit|core|cli|ckpt|crash"
grep -E "tests passed" "$OUT/tests-cpu.log" | sed 's/^/    /' >> "$summary"
# Issue 11: the fused kernels' comparison with the CPU under compute-sanitizer (memory errors,
# shared-memory races); the [sanitize] tag leaves out the long ones (200 training steps, a
# 140 M-value tensor), which would take hours under the tools.
SAN=/usr/local/cuda/bin/compute-sanitizer
if [[ -x "$SAN" ]]; then
  for tool in memcheck racecheck; do
    "$SAN" --tool "$tool" --error-exitcode 9 "$BUILD/tests/dlrun_core_tests" "[gpu][sanitize]" \
      > "$OUT/sanitizer-$tool.log" 2>&1 || fail "compute-sanitizer $tool"
    echo "    compute-sanitizer $tool: $(tail -1 "$OUT/sanitizer-$tool.log")" >> "$summary"
  done
fi
fi

# Issue 11: the fused BatchNorm operators against PyTorch's unfused sequence on ResNet-50's
# shapes at batch 256, bf16, channels_last (the BN+ReLU part's speedup and bandwidth against the
# copy bandwidth), then resnet50 training with the operators on and off; NCHW once more.
if want kernels; then
step "benchmark: dlrun bench kernels (fused vs unfused, ResNet-50 shapes, batch 256 bf16 channels_last)"
"$DLRUN" bench kernels --device cuda > "$OUT/bench-kernels.txt" 2>>"$OUT/suite.log" || fail "bench kernels"
"$DLRUN" bench kernels --device cuda --nchw > "$OUT/bench-kernels-nchw.txt" 2>>"$OUT/suite.log" \
  || fail "bench kernels --nchw"
tail -3 "$OUT/bench-kernels.txt" | sed 's/^/    /' >> "$summary"
fi

if want ckpt; then
step "benchmark: checkpoint stall and write, ResNet-50 state, on the GPU and on the CPU"
for dev in cuda cpu; do
  "$DLRUN" bench ckpt --model resnet50 --repeat 3 --device "$dev" --json > "$OUT/bench-ckpt-$dev.json" 2>>"$OUT/suite.log" \
    || fail "bench ckpt --device $dev"
done
fi

if want throughput; then
step "benchmark: training throughput on synthetic ImageNet-sized data (ResNet-50, batch 128)"
tsv="$OUT/train-throughput.tsv"
printf 'variant\tsamples_per_s\tsteps\n' > "$tsv"
LAUNCH=()  # empty: dlrun alone; else the launcher command that starts it (distributed variants)
throughput() {  # name, overrides...
  local name="$1"; shift
  local run="$OUT/run-$name"
  rm -rf "$run"
  if "${LAUNCH[@]}" "$DLRUN" train configs/synthetic/resnet50.yaml --run-dir "$run" run.device=cuda train.max_steps=60 \
       data.batch_size=128 data.workers=8 log.every_steps=10 log.progress=none train.eval_at_end=false \
       train.eval_every_epochs=0 checkpoint.at_end=false "$@" > "$OUT/train-$name.log" 2>&1; then
    python3 - "$run/metrics.jsonl" "$name" >> "$tsv" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"samples_per_s"' in l]
rows = [r for r in rows if r["step"] > 20]  # after warm-up (cuDNN autotuning, allocator)
print(f"{sys.argv[2]}\t{sum(r['samples_per_s'] for r in rows) / len(rows):.1f}\t{rows[-1]['step']}")
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
fi

# Issue 10: fp32/bf16/fp16 x NCHW/channels_last x eager/CUDA graphs, dlrun next to PyTorch
# eager in the same run (resnet50 224x224 batch 256; resnet18 28x28 batch 512).
if want amp; then
step "benchmark: GPU fast paths, dlrun vs PyTorch eager"
python3 bench/gpu_amp.py --dlrun "$DLRUN" --steps 60 --out "$OUT/gpu-amp.tsv" > "$OUT/gpu-amp.log" 2>&1 \
  || fail "bench/gpu_amp.py"
[[ -f "$OUT/gpu-amp.tsv" ]] && sed 's/^/    /' "$OUT/gpu-amp.tsv" >> "$summary"
fi

# Issue 10: activation checkpointing, ResNet-50 224x224 bf16 channels_last: peak memory of a
# step at batch 128, its time, and the largest batch that fits, per mode.
if want memory; then
step "benchmark: activation checkpointing none/blocks/stages (peak memory, step time, largest batch)"
for mode in none blocks stages; do
  "$DLRUN" bench memory --model resnet50 --batch 128 --image-size 224 --checkpointing "$mode" --amp bf16 \
    --channels-last --device cuda --repeat 10 --max-batch --json >> "$OUT/memory.jsonl" 2>>"$OUT/suite.log" \
    || fail "bench memory $mode"
done
[[ -f "$OUT/memory.jsonl" ]] && sed 's/^/    /' "$OUT/memory.jsonl" >> "$summary"
fi

# Issue 12: where the time goes on a GPU -- the per-phase step times (CUDA events), NVML
# telemetry and the caching allocator's peak in the run's records, and a Kineto trace with
# CUDA kernels in it.
if want telemetry; then
step "telemetry: phase times, NVML, peak memory, a profiler trace with CUDA kernels"
run="$OUT/run-telemetry"
rm -rf "$run"
if "$DLRUN" train configs/synthetic/resnet50.yaml --run-dir "$run" run.device=cuda train.max_steps=40 \
     data.batch_size=128 data.device_resident=true amp.enabled=true amp.dtype=bf16 model.channels_last=true \
     log.every_steps=10 log.progress=none train.eval_at_end=false train.eval_every_epochs=0 checkpoint.at_end=false \
     profile.steps=3 profile.start_step=20 > "$OUT/train-telemetry.log" 2>&1; then
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
fi

# Issue 12: the side-by-side harness on the GPU workloads (resnet18 28x28 batch 512, resnet50
# 224 bf16 channels_last, resnet50 on a generated JPEG folder), then the input pipeline alone.
if want compare; then
step "benchmark: bench/compare.py --workloads gpu"
python3 bench/compare.py --dlrun "$DLRUN" --workloads gpu --reps 2 --steps 80 --fmnist "$FMNIST" \
  --jpegs 1280 --out "$OUT/compare-logs" > "$OUT/compare.md" 2>&1 || fail "bench/compare.py gpu"
sed 's/^/    /' "$OUT/compare.md" | tail -16 >> "$summary"
fi

# Issue 12: the input pipeline alone, dlrun's loader vs torchvision ImageFolder + DataLoader (PIL)
# on generated JPEGs, 1, 2 and all cores' workers.
if want pipeline; then
step "benchmark: bench/compare.py --workloads pipeline"
python3 bench/compare.py --dlrun "$DLRUN" --workloads pipeline --reps 2 --jpegs 1280 \
  --out "$OUT/pipeline-logs" > "$OUT/pipeline.md" 2>&1 || fail "bench/compare.py pipeline"
sed 's/^/    /' "$OUT/pipeline.md" | tail -10 >> "$summary"
fi

# Issue 12: time to accuracy on one GPU (configs/fashion_mnist/fast.yaml, target >= 95.0 % in
# <= 60 s of wall time, end to end). Needs Debian's dataset-fashion-mnist files (carried in .devdeps).
if want fast; then
step "time to accuracy: configs/fashion_mnist/fast.yaml"
run="$OUT/run-fast"
rm -rf "$run"
start=$(date +%s.%N)
if "$DLRUN" train configs/fashion_mnist/fast.yaml --run-dir "$run" log.progress=lines data.root="$FMNIST" \
     > "$OUT/train-fast.log" 2>&1; then
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
fi

echo >> "$summary"
if ((${#failed[@]})); then
  echo "FAILED steps: ${failed[*]}" | tee -a "$summary"
  exit 1
fi
echo "all steps passed" | tee -a "$summary"
