#!/usr/bin/env bash
# Every shipped config under configs/ must validate. Configs whose data lives elsewhere
# (CIFAR-10, ImageNet folders) are checked with data.root pointed at an empty directory.
set -u
dlrun="$1"; root="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail=0; n=0
while IFS= read -r cfg; do
  n=$((n + 1))
  extra=()
  grep -qE 'name: (cifar10|cifar100|image_folder)' "$cfg" && extra=("data.root=$tmp")
  if ! out="$("$dlrun" config validate "$cfg" "${extra[@]}" 2>&1)"; then
    echo "FAIL: $cfg"; echo "$out"; fail=1
  fi
done < <(find "$root/configs" -name '*.yaml' | sort)
echo "validated $n configs"
[[ $n -ge 10 ]] || { echo "FAIL: expected at least 10 configs"; fail=1; }
exit $fail
