#!/usr/bin/env bash
# scripts/quickstart.sh — set up (idempotent), build, then train the embedded default:
# a small CNN on Fashion-MNIST on the CPU (configs/quickstart.yaml). Extra arguments are
# config overrides, e.g. `scripts/quickstart.sh train.epochs=1`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
BUILD_DIR="${DLRUN_BUILD_DIR:-$ROOT/build}"
"$BUILD_DIR/dlrun" info
exec "$BUILD_DIR/dlrun" train "$ROOT/configs/quickstart.yaml" --run-dir "$ROOT/runs/quickstart" "$@"
