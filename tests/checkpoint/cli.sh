#!/usr/bin/env bash
# cli.sh HELPER DLRUN — `dlrun ckpt list|verify` and `dlrun export` on valid, damaged and
# partial checkpoints: exit codes (0 valid / 2 not) and the reasons they print.
set -u
helper="$1"; dlrun="$2"
d="$(mktemp -d)"; trap 'rm -rf "$d"' EXIT
run="$d/run"; ck="$run/checkpoints"
fail() { echo "FAIL: $*"; exit 1; }
# expect CODE REGEX CMD...: exit code and output must match.
expect() {
  local code="$1" regex="$2"; shift 2
  local out; out="$("$@" 2>&1)"; local rc=$?
  printf '$ %s\n%s\n' "$*" "$out"
  [[ $rc -eq $code ]] || fail "exit $rc, expected $code: $*"
  grep -Eq -- "$regex" <<<"$out" || fail "output does not match /$regex/: $*"
}
flip_byte() {  # flip_byte FILE OFFSET
  local b; b=$(od -An -tu1 -j"$2" -N1 "$1" | tr -d ' ')
  printf "$(printf '\\%03o' $((b ^ 1)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

for s in 1 2 3 4; do "$helper" write "$ck" $s >/dev/null || fail "commit $s"; done
expect 0 '^\* step-00000004 .* ok  <- LATEST' "$dlrun" ckpt list "$run"
expect 0 'step-00000001 +1 +0 ' "$dlrun" ckpt list "$ck"
expect 0 '"latest": "step-00000004"' "$dlrun" ckpt list --json "$run"
expect 0 'step-00000002: ok \(step 2, epoch 0, 5 files' "$dlrun" ckpt verify "$ck/step-00000002"
expect 0 'LATEST is .*step-00000004' "$dlrun" ckpt verify "$run"

expect 0 'written as safetensors' "$dlrun" export --checkpoint "$run" --format safetensors --output "$d/m.safetensors"
[[ -s "$d/m.safetensors" ]] || fail "no safetensors file"
expect 0 'written as torch' "$dlrun" export --checkpoint "$ck/step-00000002" --format torch --output "$d/m.pt"
[[ -s "$d/m.pt" ]] || fail "no torch file"

# Damage: a flipped bit (4), a truncated file (3), a missing manifest (2), a partial dir (5).
flip_byte "$ck/step-00000004/model.pt" 200
truncate -s -7 "$ck/step-00000003/optim.pt"
rm "$ck/step-00000002/manifest.json"
mkdir "$ck/step-00000005.tmp"
expect 2 'model.pt: SHA-256 mismatch \(file changed or corrupt\)' "$dlrun" ckpt verify "$ck/step-00000004"
expect 2 'optim.pt: size [0-9]+ != [0-9]+ in manifest' "$dlrun" ckpt verify "$ck/step-00000003"
expect 2 'missing manifest.json \(partial write\?\)' "$dlrun" ckpt verify "$ck/step-00000002"
expect 2 'partial' "$dlrun" ckpt verify "$ck/step-00000005.tmp"
expect 2 'step-00000004: INVALID: model.pt: SHA-256' "$dlrun" ckpt verify "$run"
expect 2 'does not verify: model.pt: SHA-256 mismatch' \
  "$dlrun" export --checkpoint "$run" --format torch --output "$d/bad.pt"
[[ ! -e "$d/bad.pt" ]] || fail "export wrote a file from an invalid checkpoint"

out="$("$dlrun" ckpt list "$run")" || fail "ckpt list must exit 0 with invalid checkpoints"
printf '%s\n' "$out"
grep -Eq 'step-00000001 .* ok$' <<<"$out" || fail "step 1 not ok"
grep -Eq 'step-00000002 .*INVALID: missing manifest.json' <<<"$out" || fail "step 2 not invalid"
grep -Eq 'step-00000003 .*INVALID: optim.pt: size' <<<"$out" || fail "step 3 not invalid"
grep -Eq '^\* step-00000004 .*INVALID: model.pt: SHA-256 mismatch.*<- LATEST' <<<"$out" || fail "step 4 not invalid"
grep -Eq 'step-00000005.tmp .*partial' <<<"$out" || fail "step 5.tmp not partial"
expect 0 '"status": "partial"' "$dlrun" ckpt list --json "$run"
# Nothing was deleted by looking.
for n in step-00000001 step-00000002 step-00000003 step-00000004 step-00000005.tmp; do
  [[ -d "$ck/$n" ]] || fail "$n disappeared"
done
expect 0 'no checkpoints' "$dlrun" ckpt list "$d/run/.."
echo PASS
