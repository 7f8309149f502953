#!/usr/bin/env bash
# expect.sh CODE REGEX [--stdout-file F] -- CMD...
# Runs CMD, passes when it exits with CODE and its combined output matches REGEX (grep -E).
set -u
code="$1"; regex="$2"; shift 2
[[ "$1" == "--" ]] && shift
out="$("$@" 2>&1)"; rc=$?
printf '%s\n' "$out"
if [[ "$rc" != "$code" ]]; then echo "FAIL: exit code $rc, expected $code"; exit 1; fi
if ! grep -Eq -- "$regex" <<<"$out"; then echo "FAIL: output does not match /$regex/"; exit 1; fi
echo "PASS"
