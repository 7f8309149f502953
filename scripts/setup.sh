#!/usr/bin/env bash
# scripts/setup.sh — install what dlrun needs, then configure and build it.
#
# Idempotent: a second run installs nothing and only rebuilds what changed.
# Works offline once everything is installed. Uses sudo only when not root.
#
#   scripts/setup.sh              # deps + venv + configure + build (Release)
#   DLRUN_SETUP_NO_BUILD=1 ...    # deps + venv only
#
# Environment:
#   DLRUN_VENV       virtual environment (default ~/.cache/dlrun/venv-torch-$TORCH_VERSION,
#                    shared by every clone so the 3 GB torch wheel installs once)
#   DLRUN_BUILD_DIR  build directory (default ./build)
#   DLRUN_CUDA       AUTO|ON|OFF (default AUTO: compile the .cu sources when nvcc is found)
#   DLRUN_BUILD_TYPE CMake build type (default Release)
#   DLRUN_BUILD_TARGETS  targets to build (default all; scripts/quickstart.sh: dlrun)
#   DLRUN_SETUP_MINIMAL=1  what building and running dlrun needs, not what only the tests need
#                    (their servers, clang, the Python packages other than torch):
#                    scripts/quickstart.sh; scripts/test.sh adds the rest
#   DLRUN_CUDA given and different from the build directory's setting: it is configured again
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/versions.sh
source "$ROOT/scripts/versions.sh"

VENV="${DLRUN_VENV:-$HOME/.cache/dlrun/venv-torch-$TORCH_VERSION}"
BUILD_DIR="${DLRUN_BUILD_DIR:-$ROOT/build}"
say() { printf '[setup] %s\n' "$*"; }

# ---- Debian packages ------------------------------------------------------------------
DEBS=(cmake ninja-build ccache g++ pkg-config
      libcli11-dev libyaml-cpp-dev libfmt-dev catch2 nlohmann-json3-dev
      libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev zlib1g-dev libcurl4-openssl-dev libssl-dev libexpat1-dev libgloo-dev
      dataset-fashion-mnist python3-venv ca-certificates)
TEST_DEBS=(prometheus  # the real scraper of the live metrics endpoint's e2e test
      munge slurmctld slurmd slurm-client iproute2  # the real single-node Slurm and the two-host namespaces of the e2e tests
      openssl  # the TLS test's CA and certificates (e2e:remote_security)
      clang libclang-rt-14-dev  # the sanitizer + fuzz build (scripts/harden.sh)
      mmdebstrap buildah podman runc netavark skopeo docker-registry)  # the container image (scripts/image.sh), its e2e test
if [[ -n "${DLRUN_SETUP_MINIMAL:-}" ]]; then
  # torch (scripts/versions.sh lists it first) and numpy, without which importing torch warns
  PY_PINS=("${PY_PINS[0]}" $(printf '%s\n' "${PY_PINS[@]}" | grep '^numpy=='))
else
  DEBS+=("${TEST_DEBS[@]}")
fi
missing=()
for p in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  say "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # Debian starts the registry it installs as a service on port 5000; the image test starts its
  # own on a free loopback port, so the service is stopped and left disabled.
  if [[ " ${missing[*]} " == *" docker-registry "* ]] && command -v systemctl >/dev/null; then
    $SUDO systemctl disable --now docker-registry >/dev/null 2>&1 || true
  fi
fi

# ---- Python virtual environment with the pinned torch ---------------------------------
if [[ ! -x "$VENV/bin/python" ]]; then
  say "creating virtual environment $VENV"
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" - "${PY_PINS[@]}" >/dev/null 2>&1 <<'PY'
import sys
from importlib.metadata import version, PackageNotFoundError
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    name = name.split("[")[0]  # "moto[server]": the distribution is "moto"
    try:
        have = version(name)
    except PackageNotFoundError:
        sys.exit(1)
    if have.split("+")[0] != want:
        sys.exit(1)
PY
then
  say "installing Python packages into $VENV: ${PY_PINS[*]} (torch is ~3 GB with its CUDA libraries)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PY_PINS[@]}"
fi

# ---- SkyPilot's own virtual environment (the tests validate examples/skypilot/ with it) ---
if [[ -z "${DLRUN_SETUP_MINIMAL:-}" ]]; then
  SKY_VENV="${DLRUN_SKY_VENV:-$HOME/.cache/dlrun/venv-skypilot-$SKYPILOT_VERSION}"
  if ! "$SKY_VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('skypilot') != '$SKYPILOT_VERSION')" \
      >/dev/null 2>&1; then
    say "installing skypilot==$SKYPILOT_VERSION into $SKY_VENV (its schema, for the tests; no cloud SDKs)"
    mkdir -p "$(dirname "$SKY_VENV")"
    python3 -m venv "$SKY_VENV"
    "$SKY_VENV/bin/python" -m pip install -q --disable-pip-version-check "skypilot==$SKYPILOT_VERSION"
  fi
fi

[[ -n "${DLRUN_SETUP_NO_BUILD:-}" ]] && exit 0

# ---- configure + build ---------------------------------------------------------------
TORCH_CMAKE="$("$VENV/bin/python" -c 'import torch;print(torch.utils.cmake_prefix_path)')"
cached_cuda() { sed -n 's/^DLRUN_CUDA:STRING=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null; }
if [[ -f "$BUILD_DIR/build.ninja" && -n "${DLRUN_CUDA:-}" && "$(cached_cuda)" != "$DLRUN_CUDA" ]]; then
  say "configuring $BUILD_DIR again: DLRUN_CUDA=$DLRUN_CUDA (it was $(cached_cuda))"
  cmake "$BUILD_DIR" -DDLRUN_CUDA="$DLRUN_CUDA" >/dev/null
fi
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  say "configuring $BUILD_DIR"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE="${DLRUN_BUILD_TYPE:-Release}" \
    -DCMAKE_PREFIX_PATH="$TORCH_CMAKE" \
    -DDLRUN_PYTHON="$VENV/bin/python" \
    -DDLRUN_CUDA="${DLRUN_CUDA:-AUTO}"
fi
# DLRUN_BUILD_TARGETS: what to build (default: everything, the tests included); the quickstart
# builds `dlrun` alone.
read -r -a targets <<< "${DLRUN_BUILD_TARGETS:-}"
say "building ${targets[*]:-everything} (ninja -C $BUILD_DIR)"
cmake --build "$BUILD_DIR" ${targets[@]:+--target "${targets[@]}"} -- ${DLRUN_BUILD_JOBS:+-j$DLRUN_BUILD_JOBS}
