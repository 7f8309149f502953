#!/usr/bin/env bash
# bench/gpu_speed.sh CALL — the GPU speed work (issue 40) as two device calls of at most 8
# minutes each, on one GPU machine held warm between them (docs/benchmarks.md, "The GPU speed
# calls"). Both run bench/gpu_suite.sh parts from the checkout, with .devdeps carried
# (scripts/pack-gpu-deps.sh), and leave summary.md and gpu-results.tgz in $OUT.
#
#   1  build, then `paths`: the kernel tests (dlrun's vectorised channels_last kernels, cuDNN's
#      fused BatchNorm-activation, the self-check over both), `dlrun bench kernels` per dtype and
#      path, and the CUDA kernels of profiled ResNet-50 steps per dtype and path.    ~7 minutes
#   2  `amp`: ResNet-50 224², batch 256, bf16 and fp16 channels_last: PyTorch eager,
#      torch.compile (default), dlrun with the path auto picks and with cuDNN's fused
#      ops, 3 alternated repetitions of 100 steps; the results file for bench/results/.
#                                                                                   ~6 minutes
#   3  (a later session) torch.compile max-autotune-no-cudagraphs, resnet18 with CUDA graphs,
#      and the suite's parts that never ran: memory compare pipeline firsthour ckpt throughput oom
#
# Each call stops starting steps when its budget (DLRUN_GPU_BUDGET_S, 450 s here) runs low, and
# packs what it has after every step.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
call="${1:-}"
export DLRUN_GPU_BUDGET_S="${DLRUN_GPU_BUDGET_S:-450}"
case "$call" in
  1) export DLRUN_GPU_PARTS="build paths" ;;
  2) export DLRUN_GPU_PARTS="amp"
     export DLRUN_GPU_AMP_ARGS="--only resnet50 --dtypes bf16,fp16 --layouts channels_last --warmup 20 \
--variants pytorch-eager,dlrun-eager,dlrun-cudnn,compile-default" ;;
  3) export DLRUN_GPU_PARTS="amp memory compare pipeline firsthour ckpt throughput oom"
     export DLRUN_GPU_AMP_ARGS="--dtypes bf16 --layouts channels_last \
--variants pytorch-eager,dlrun-eager,dlrun-graphs,compile-max-autotune" ;;
  *) echo "usage: bench/gpu_speed.sh 1|2|3 (see the top of this file)" >&2; exit 2 ;;
esac
# A call after the first runs the executables of the first, left in build-gpu on a machine held
# warm; on a fresh machine, carry .gpubin (unpacked from call 1's gpu-bin.tgz) instead.
if [[ "$call" != 1 && ! -x "$ROOT/build-gpu/dlrun" && -x "$ROOT/.gpubin/dlrun" ]]; then
  export DLRUN_GPU_BIN="$ROOT/.gpubin"
fi
exec bash "$ROOT/bench/gpu_suite.sh"
