#!/usr/bin/env bash
# expect.sh CODE REGEX [REGEX...] -- CMD...
# Runs CMD, passes when it exits with CODE and its combined output matches every REGEX
# (grep -E, line by line).
set -u
code="$1"; shift
regexes=()
while [[ $# -gt 0 && "$1" != "--" ]]; do regexes+=("$1"); shift; done
[[ "${1:-}" == "--" ]] && shift
out="$("$@" 2>&1)"; rc=$?
printf '%s\n' "$out"
if [[ "$rc" != "$code" ]]; then echo "FAIL: exit code $rc, expected $code"; exit 1; fi
for regex in "${regexes[@]}"; do
  if ! grep -Eq -- "$regex" <<<"$out"; then echo "FAIL: output does not match /$regex/"; exit 1; fi
done
echo "PASS"
