#!/usr/bin/env bash
# scripts/pack-gpu-deps.sh — on a machine with Debian's package registry, download the
# Debian libraries dlrun builds against (and the Fashion-MNIST files) into .devdeps/debs (ignored by git) and write
# .devdeps/unpack.sh, which unpacks them under /opt/devdeps on an offline GPU machine (never
# over /). bench/gpu_suite.sh runs that script first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.devdeps"
PKGS=(libyaml-cpp-dev libyaml-cpp0.7 libfmt-dev libfmt9 libcli11-dev catch2 nlohmann-json3-dev
      libturbojpeg0-dev libturbojpeg0 libjpeg62-turbo-dev libjpeg62-turbo libpng-dev libpng16-16
      zlib1g-dev zlib1g libssl-dev libssl3 libexpat1-dev libexpat1 libgloo-dev
      dataset-fashion-mnist)  # the data set (31 MB): the e2e tests, bench/compare.py and fast.yaml read it
rm -rf "$DEST/debs"
mkdir -p "$DEST/debs"
(cd "$DEST/debs" && apt-get download "${PKGS[@]}" 2>&1 | grep -v 'Download is performed unsandboxed' || true)
cat > "$DEST/unpack.sh" <<'EOS'
#!/usr/bin/env bash
# Unpack the carried Debian packages under /opt/devdeps (written by scripts/pack-gpu-deps.sh).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p /opt/devdeps
for f in "$here"/debs/*.deb; do dpkg -x "$f" /opt/devdeps; done
echo "unpacked $(ls "$here"/debs | wc -l) packages under /opt/devdeps"
EOS
chmod +x "$DEST/unpack.sh"
du -sh "$DEST"
ls "$DEST/debs"
