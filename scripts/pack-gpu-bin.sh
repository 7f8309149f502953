#!/usr/bin/env bash
# scripts/pack-gpu-bin.sh [BUILD_DIR] — the executables of a GPU window, built here (this machine
# has nvcc 13.0, the GPU machine's version), with the Debian libraries they link, into .gpubin/
# (ignored by git), for the device call to carry (bench/gpu_window.sh runs them there; no build
# in the window). docs/benchmarks.md, "The GPU window".
#
#   scripts/pack-gpu-bin.sh          configure and build build-gpu/ for TORCH_CUDA_ARCH_LIST=9.0
#                                    (the lent H100/H200; the release list stays the default of
#                                    build/), the targets dlrun and dlrun_core_tests only
#   scripts/pack-gpu-bin.sh build    take build/'s executables as they are (the default list
#                                    carries sm_90 too; larger, no second build)
#
# .gpubin/ then holds dlrun and dlrun_core_tests, stripped, and lib/ with every shared library
# they load that the GPU machine may lack: not the C runtime (glibc, libstdc++, libgcc_s: the GPU
# machine's are newer), not LibTorch and its CUDA libraries (the GPU machine's torch provides
# them: bench/gpu_window.sh puts python3's torch/lib and nvidia/*/lib on LD_LIBRARY_PATH), not the
# driver's. It refuses executables without sm_90 machine code, and a folder over 48 MiB (a device
# call carries 64 MiB with the working tree).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/versions.sh
source "$ROOT/scripts/versions.sh"
VENV="${DLRUN_VENV:-$HOME/.cache/dlrun/venv-torch-$TORCH_VERSION}"
DEST="${DLRUN_GPU_BIN:-$ROOT/.gpubin}"
LIMIT_MB=48
say() { printf '[pack-gpu-bin] %s\n' "$*"; }

if [[ $# -ge 1 ]]; then
  BUILD="$(cd "$1" && pwd)"
else
  BUILD="$ROOT/build-gpu"
  DLRUN_SETUP_NO_BUILD=1 bash "$ROOT/scripts/setup.sh"
  if [[ ! -f "$BUILD/build.ninja" ]]; then
    say "configuring $BUILD (TORCH_CUDA_ARCH_LIST=9.0)"
    cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDLRUN_CUDA=ON -DTORCH_CUDA_ARCH_LIST=9.0 \
      -DCMAKE_PREFIX_PATH="$("$VENV/bin/python" -c 'import torch;print(torch.utils.cmake_prefix_path)')" \
      -DDLRUN_PYTHON="$VENV/bin/python" > "$BUILD.configure.log"
  fi
  say "building dlrun and dlrun_core_tests in $BUILD"
  cmake --build "$BUILD" --target dlrun dlrun_core_tests -- ${DLRUN_BUILD_JOBS:+-j$DLRUN_BUILD_JOBS}
fi
EXES=("$BUILD/dlrun" "$BUILD/tests/dlrun_core_tests")
for exe in "${EXES[@]}"; do
  [[ -x "$exe" ]] || { say "no $exe: build it first"; exit 2; }
  python3 "$ROOT/tools/cuda_archs.py" "$exe" --expect "sm_90" > /dev/null \
    || { say "$exe carries no sm_90 machine code (an H100/H200 needs it): TORCH_CUDA_ARCH_LIST must name 9.0"; exit 2; }
done

rm -rf "$DEST"
mkdir -p "$DEST/lib"
for exe in "${EXES[@]}"; do strip -o "$DEST/$(basename "$exe")" "$exe"; done
# The shared libraries to carry: what ldd resolves, less the C runtime, LibTorch, CUDA and the driver.
skip='/(ld-linux|libc|libm|libdl|librt|libpthread|libutil|libresolv|libstdc\+\+|libgcc_s)\.so|/(libtorch|libc10|libcaffe2|libcud|libcublas|libcufft|libcurand|libcusolver|libcusparse|libnccl|libnvrtc|libnvJitLink|libnvToolsExt|libnvshmem|libgomp|libshm|libcupti|libnvidia|libcuda)[^/]*$|/site-packages/'
ldd "${EXES[@]}" | awk '/=> \// {print $3}' | sort -u | grep -vE "$skip" | while read -r lib; do
  cp -L "$lib" "$DEST/lib/$(basename "$lib")"
done
{
  echo "# .gpubin, made by scripts/pack-gpu-bin.sh $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "git $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet || echo ' (with uncommitted changes)')"
  echo "build $BUILD"
  python3 "$ROOT/tools/cuda_archs.py" "$BUILD/dlrun" | head -3
  (cd "$DEST" && du -b dlrun dlrun_core_tests lib/*)
} > "$DEST/MANIFEST"
size_mb=$(( $(du -sb "$DEST" | cut -f1) / 1024 / 1024 ))
if (( size_mb > LIMIT_MB )); then
  say "$DEST is $size_mb MiB, over $LIMIT_MB MiB: build with TORCH_CUDA_ARCH_LIST=9.0 (run this script without an argument)"
  exit 2
fi
say "$DEST: $size_mb MiB ($(ls "$DEST/lib" | wc -l) carried libraries): carry .gpubin in the device call"
