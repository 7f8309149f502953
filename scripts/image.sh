#!/usr/bin/env bash
# scripts/image.sh — dlrun's OCI image, built without a Docker engine from Debian's packages and
# the pinned torch wheel (docs/deploy.md, "The image").
#
#   scripts/image.sh [--tag TAG] [--out FILE]
#
# Two layers:
#   base   a minimal Debian 12 root file system made by mmdebstrap, with the Debian packages that
#          provide the libraries build/dlrun links (read from the binary: its NEEDED libraries,
#          their files' packages by dpkg -S), python3 for the launcher, the Fashion-MNIST package
#          of the quickstart, a user `dlrun` (uid 1000); and the torch wheel's libraries
#          (torch/lib, nvidia/*/lib: the CUDA ones included) under /opt/dlrun/site. Committed by
#          buildah as localhost/dlrun-base:<key>, the key a hash of everything that goes into it:
#          a second build reuses it.
#   top    build/dlrun, scripts/dlrun-launch (with dlrun_rendezvous.py) and configs/ under
#          /opt/dlrun; labels (version, git revision, torch, CUDA); user dlrun; ENTRYPOINT dlrun.
#          Committed as localhost/dlrun:<tag> (default: dlrun's version), which `podman run`
#          runs and `skopeo copy containers-storage:localhost/dlrun:TAG docker://REGISTRY/...`
#          pushes. With --out, also written as an OCI archive (gzip layers; the base's compressed
#          blob is kept and reused by later archives), which `podman load`, `skopeo` and a registry
#          push accept.
#
# Needs root (buildah's storage, mmdebstrap's chroot) and Debian's mmdebstrap and buildah
# (scripts/setup.sh installs them with the test packages). Prints each phase's seconds.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/versions.sh
source "$ROOT/scripts/versions.sh"
VENV="${DLRUN_VENV:-$HOME/.cache/dlrun/venv-torch-$TORCH_VERSION}"
DLRUN="${DLRUN:-$ROOT/build/dlrun}"
SUITE=bookworm
say() { printf '[image] %s\n' "$*"; }
die() { say "error: $*" >&2; exit 2; }

OUT="" TAG=""
while (($#)); do
  case "$1" in
    --out) OUT="$2"; shift 2 ;;
    --tag) TAG="$2"; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
[[ $(id -u) -eq 0 ]] || die "run as root: buildah's storage and mmdebstrap's chroot need it"
for tool in mmdebstrap buildah dpkg-query; do command -v "$tool" >/dev/null || die "$tool is missing (apt-get install $tool)"; done
[[ -x "$DLRUN" ]] || die "$DLRUN is missing: build it first (scripts/setup.sh)"
# The venv's site-packages, and the torch wheel's version and CUDA read from its files (importing
# torch takes seconds).
SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
[[ -f "$SITE/torch/version.py" ]] || die "no torch in $SITE (scripts/setup.sh installs it)"
# "dlrun 0.1.0 (git 4ea2dcf3ea1e, torch 2.11.0, Release)": the version, and the git revision the
# binary was built from (dirty: "-dirty" follows)
said="$("$DLRUN" --version)"
VERSION="$(awk '{print $2}' <<<"$said")"
REVISION="$(sed -n 's/.*(git \([^,]*\),.*/\1/p' <<<"$said")"
CUDA="$(sed -n "s/^cuda[^=]*= '\(.*\)'$/\1/p" "$SITE/torch/version.py")"; CUDA="${CUDA:-none}"
TAG="${TAG:-$VERSION}"
t0=$SECONDS

# ---- what the binary links, from Debian ---------------------------------------------------
# Each NEEDED library that ldd finds outside the torch wheel and the CUDA toolkit, mapped to
# the Debian package that owns its file.
packages=()
while read -r lib path; do
  case "$path" in "$SITE"/*|/usr/local/cuda*|"") continue ;; esac
  pkg=""
  for candidate in "$path" "$(realpath "$path")" "/usr$path" "${path#/usr}"; do
    pkg="$(dpkg-query -S "$candidate" 2>/dev/null | head -1 | cut -d: -f1)" && [[ -n $pkg ]] && break
  done
  [[ -n $pkg ]] || die "no Debian package owns $path ($lib, linked by $DLRUN)"
  packages+=("$pkg")
done < <(ldd "$DLRUN" | awk '$2 == "=>" {print $1, $3}')
mapfile -t packages < <(printf '%s\n' "${packages[@]}" python3 ca-certificates dataset-fashion-mnist | sort -u)

# ---- the torch wheel's libraries ------------------------------------------------------------
libdirs=("torch/lib")
for d in "$SITE"/nvidia/*/lib; do libdirs+=("${d#"$SITE"/}"); done
ld_path="$(printf '/opt/dlrun/site/%s:' "${libdirs[@]}")"; ld_path="${ld_path%:}"

# ---- the base layer, cached by a key of all that goes into it ------------------------------
key="$( { printf '%s\n' "$SUITE" "${packages[@]}" "${libdirs[@]}"; grep -m1 '^Version:' "$SITE"/torch-*.dist-info/METADATA;
          sed -n '/^# ---- the base layer/,/^# ---- the top layer/p' "$0"; } | sha256sum | cut -c1-16)"
BASE="localhost/dlrun-base:$key"
if buildah inspect --type image "$BASE" >/dev/null 2>&1; then
  say "base $BASE: cached"
else
  work="$(mktemp -d "${TMPDIR:-/tmp}/dlrun-image-XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  say "base: Debian $SUITE with ${packages[*]}"
  mmdebstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='chroot "$1" useradd --uid 1000 --create-home --shell /bin/sh dlrun' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
    --quiet "$SUITE" "$work/rootfs.tar" >/dev/null
  say "base: root file system $(du -h "$work/rootfs.tar" | cut -f1) in $((SECONDS - t0)) s"
  ctr="$(buildah from scratch)"
  buildah add --quiet "$ctr" "$work/rootfs.tar" / >/dev/null
  for d in "${libdirs[@]}"; do
    # the wheel's Python extension is of no use without Python's torch
    mkdir -p "$work/lib/$d" && find "$SITE/$d" -maxdepth 1 \( -type f -o -type l \) -name '*.so*' \
      ! -name 'libtorch_python.so' -exec cp -a {} "$work/lib/$d/" \;
  done
  buildah add --quiet "$ctr" "$work/lib" /opt/dlrun/site >/dev/null
  buildah commit --quiet --rm "$ctr" "$BASE" >/dev/null
  rm -rf "$work"; trap - EXIT
  say "base $BASE committed in $((SECONDS - t0)) s"
fi

# ---- the top layer: dlrun, the launcher, the configs --------------------------------------
t1=$SECONDS
ctr="$(buildah from --quiet "$BASE")"
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
buildah copy --quiet --chmod 0755 "$ctr" "$DLRUN" /opt/dlrun/bin/dlrun >/dev/null
buildah copy --quiet --chmod 0755 "$ctr" "$ROOT/scripts/dlrun-launch" /opt/dlrun/bin/dlrun-launch >/dev/null
buildah copy --quiet "$ctr" "$ROOT/scripts/dlrun_rendezvous.py" /opt/dlrun/bin/dlrun_rendezvous.py >/dev/null
buildah copy --quiet "$ctr" "$ROOT/configs" /opt/dlrun/configs >/dev/null
buildah config \
  --user dlrun --workingdir /home/dlrun \
  --env PATH=/opt/dlrun/bin:/usr/local/bin:/usr/bin:/bin --env LD_LIBRARY_PATH="$ld_path" \
  --env DLRUN=/opt/dlrun/bin/dlrun \
  --entrypoint '["/opt/dlrun/bin/dlrun"]' --cmd '["--help"]' \
  --label org.opencontainers.image.title=dlrun \
  --label org.opencontainers.image.version="$VERSION" \
  --label org.opencontainers.image.revision="$REVISION" \
  --label org.opencontainers.image.base.name="debian:$SUITE" \
  --label io.dlrun.torch="$TORCH_VERSION" --label io.dlrun.cuda="$CUDA" \
  "$ctr"
previous="$(podman image inspect --format '{{.Id}}' "localhost/dlrun:$TAG" 2>/dev/null || true)"
buildah commit --quiet --rm "$ctr" "localhost/dlrun:$TAG" >/dev/null
trap - EXIT
# The image this tag named before, left without a name: removed unless a container uses it.
[[ -n $previous ]] && podman rmi "$previous" >/dev/null 2>&1 || true
say "localhost/dlrun:$TAG ($VERSION, git $REVISION, $(podman image inspect --format '{{.Size}}' "localhost/dlrun:$TAG" 2>/dev/null | numfmt --to=iec 2>/dev/null || echo '?')): top layer in $((SECONDS - t1)) s"
if [[ -n $OUT ]]; then
  t2=$SECONDS
  mkdir -p "$(dirname "$OUT")"
  rm -f "$OUT"
  buildah push --quiet "localhost/dlrun:$TAG" "oci-archive:$OUT:dlrun:$TAG" >/dev/null
  say "$OUT ($(du -h "$OUT" | cut -f1)) in $((SECONDS - t2)) s"
fi
say "all in $((SECONDS - t0)) s"
