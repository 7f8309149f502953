#!/usr/bin/env bash
# scripts/quickstart.sh — set up (idempotent), build, then train the embedded default:
# a small CNN on Fashion-MNIST on the CPU (configs/quickstart.yaml). Extra arguments are
# config overrides, e.g. `scripts/quickstart.sh train.epochs=1`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${DLRUN_BUILD_DIR:-$ROOT/build}"
# What the first run needs and nothing more (README, "Time to the first step"): the packages that
# build and run dlrun (not the test servers, clang or the Python packages other than torch), the
# binary alone (the tests are built by scripts/test.sh), and without a GPU on this machine, no
# CUDA kernels: compiled for six GPU generations they would double the build for nothing.
# `DLRUN_CUDA=AUTO scripts/setup.sh` adds them later.
if [[ -z "${DLRUN_CUDA:-}" && ! -f "$BUILD_DIR/build.ninja" ]] && ! nvidia-smi -L >/dev/null 2>&1; then
  echo "[quickstart] no GPU visible (nvidia-smi): building without the CUDA kernels (DLRUN_CUDA=OFF)"
  export DLRUN_CUDA=OFF
fi
DLRUN_SETUP_MINIMAL=1 DLRUN_BUILD_TARGETS=dlrun bash "$ROOT/scripts/setup.sh"
"$BUILD_DIR/dlrun" info
exec "$BUILD_DIR/dlrun" train "$ROOT/configs/quickstart.yaml" --run-dir "$ROOT/runs/quickstart" "$@"
