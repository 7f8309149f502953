#!/usr/bin/env bash
# Every shipped config under configs/ must pass `dlrun config validate`, which also opens the
# data and resolves the device as `dlrun train` would. Configs whose data lives elsewhere
# (CIFAR-10, ImageNet folders) are checked with data.root pointed at a small stand-in set of the
# same format made here. On a machine without CUDA, a GPU config (fp16 autocast, CUDA graphs on
# run.device: auto) is refused as train refuses it, naming what needs a CUDA device; with CUDA,
# every config must pass. (tests/e2e/test_first_hour.py checks that train agrees each time.)
set -u
dlrun="$1"; root="$2"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
fail=0; n=0
cuda=yes; "$dlrun" info --json | grep -q '"cuda_available": false' && cuda=no

# Enough samples for one global batch of the largest shipped config (validate checks that): the
# ImageNet recipes' global batches reach 4096 (ViT-B/16: 512 x 8 GPUs).
samples=300
# CIFAR-10 binary: records of 1 label byte + 3072 pixel bytes; samples/5 per training file.
mkdir -p "$tmp/cifar10"
for f in data_batch_1 data_batch_2 data_batch_3 data_batch_4 data_batch_5 test_batch; do
  head -c $((3073 * samples / 5)) /dev/zero > "$tmp/cifar10/$f.bin"
done
# An ImageNet-style folder of 2x2 RGB PNGs: 64 classes of 64 hard links to one file in train/
# (4096 images), one class in val/.
png='iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEElEQVR4nGM4kWIERAwQCgAorgV5QuEn7gAAAABJRU5ErkJggg=='
for split in train val; do
  mkdir -p "$tmp/images/$split/n00"
  base64 -d <<<"$png" > "$tmp/images/$split/n00/0.png"
  for ((i = 1; i < 64; i++)); do ln "$tmp/images/$split/n00/0.png" "$tmp/images/$split/n00/$i.png"; done
done
for ((k = 1; k < 64; k++)); do cp -al "$tmp/images/train/n00" "$tmp/images/train/n$k"; done

while IFS= read -r cfg; do
  n=$((n + 1))
  extra=()
  grep -qE 'name: cifar10' "$cfg" && extra=("data.root=$tmp/cifar10")
  grep -qE 'name: image_folder' "$cfg" && extra=("data.root=$tmp/images")
  if ! out="$("$dlrun" config validate "$cfg" "${extra[@]}" 2>&1)"; then
    if [[ $cuda == no ]] && grep -qE 'needs? a CUDA device, but run.device=auto resolves to cpu here' <<<"$out"; then
      echo "refused without CUDA, as train refuses it: $cfg"
    else
      echo "FAIL: $cfg"; echo "$out"; fail=1
    fi
  fi
done < <(find "$root/configs" -name '*.yaml' | sort)
echo "validated $n configs"
[[ $n -ge 10 ]] || { echo "FAIL: expected at least 10 configs"; fail=1; }
exit $fail
