#!/usr/bin/env bash
# show_roundtrip.sh DLRUN CONFIG [OVERRIDES...]
# `dlrun config show` prints YAML that `dlrun config show` reads back to the same text
# (with and without --no-docs), and prints nothing on stdout when the config is bad.
set -eu
dlrun="$1"; shift
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for docs in "" "--no-docs"; do
  "$dlrun" config show "$@" $docs > "$tmp/once.yaml"
  "$dlrun" config show "$tmp/once.yaml" $docs > "$tmp/twice.yaml"
  if ! diff -u "$tmp/once.yaml" "$tmp/twice.yaml"; then echo "FAIL: not a fixed point ($docs)"; exit 1; fi
  if [[ -n "$docs" ]] && grep -q '#' "$tmp/once.yaml"; then echo "FAIL: --no-docs printed comments"; exit 1; fi
  if [[ -z "$docs" ]] && ! grep -q '# peak learning rate' "$tmp/once.yaml"; then echo "FAIL: no docs"; exit 1; fi
done
# A bad override: exit 2, the error on stderr, nothing on stdout.
set +e
"$dlrun" config show "$1" optim.lr=-1 > "$tmp/bad.out" 2> "$tmp/bad.err"; rc=$?
set -e
[[ "$rc" == 2 ]] || { echo "FAIL: exit code $rc for a bad override"; exit 1; }
[[ ! -s "$tmp/bad.out" ]] || { echo "FAIL: stdout not empty on error"; cat "$tmp/bad.out"; exit 1; }
grep -q "optim.lr: value -1 is out of range" "$tmp/bad.err" || { echo "FAIL: stderr"; cat "$tmp/bad.err"; exit 1; }
echo PASS
