#!/usr/bin/env bash
# fault.sh HELPER DLRUN POINT — crash a commit at POINT and check the checkpoints survive.
# Commits step 1, then step 2 with DLRUN_FAULT=ckpt:POINT (the process aborts mid-commit),
# then checks: LATEST names a checkpoint that verifies, step 1 is intact, the CLI agrees,
# nothing was deleted, and a new commit of step 2 (and a re-commit of an existing step that
# crashes at POINT) recovers.
set -u
helper="$1"; dlrun="$2"; point="$3"
ulimit -c 0
d="$(mktemp -d)"; trap 'rm -rf "$d"' EXIT
fail() { echo "FAIL ($point): $*"; exit 1; }

"$helper" write "$d" 1 || fail "committing step 1"
DLRUN_FAULT="ckpt:$point" "$helper" write "$d" 2; rc=$?
[[ $rc -eq 134 ]] || fail "expected abort (exit 134) at fault point, got $rc"

"$helper" check "$d" 1 || fail "check after crash"
"$dlrun" ckpt verify "$d/step-00000001" || fail "step 1 does not verify"
"$dlrun" ckpt verify "$d" || fail "the checkpoint LATEST names does not verify"
list="$("$dlrun" ckpt list "$d")" || fail "ckpt list exit code"
printf '%s\n' "$list"
latest="$(cat "$d/LATEST")"
case "$point" in
  file|files|manifest)
    [[ "$latest" == step-00000001 ]] || fail "LATEST is $latest, expected step-00000001"
    [[ -d "$d/step-00000002.tmp" && ! -e "$d/step-00000002" ]] || fail "expected only step-00000002.tmp"
    grep -Eq 'step-00000002\.tmp .*partial' <<<"$list" || fail "list does not report the partial dir"
    "$dlrun" ckpt verify "$d/step-00000002.tmp"; [[ $? -eq 2 ]] || fail "verify of .tmp should exit 2"
    ;;
  rename)
    [[ "$latest" == step-00000001 ]] || fail "LATEST is $latest, expected step-00000001"
    "$helper" check "$d" 1 2 || fail "step 2 was renamed into place and must be complete"
    ;;
  latest)
    [[ "$latest" == step-00000002 ]] || fail "LATEST is $latest, expected step-00000002"
    "$helper" check "$d" 1 2 || fail "step 2 must be complete"
    ;;
esac
grep -Eq '^\* step-00000001 .*ok|^\* step-00000002 .*ok' <<<"$list" || fail "list does not mark LATEST ok"

# Recovery: committing step 2 again sets a stale step-00000002.tmp aside (never deletes it).
"$helper" write "$d" 2 || fail "re-committing step 2"
"$helper" check "$d" 1 2 || fail "check after recovery"
[[ "$(cat "$d/LATEST")" == step-00000002 ]] || fail "LATEST not step-00000002 after recovery"
[[ ! -e "$d/step-00000002.tmp" ]] || fail "stale step-00000002.tmp left in place"
case "$point" in
  file|files|manifest)
    compgen -G "$d/step-00000002.tmp.partial-*" >/dev/null || fail "the partial write was not kept aside"
    grep -q 'set aside' <<<"$("$dlrun" ckpt list "$d")" || fail "list does not report the set-aside dir"
    ;;
esac

# A crash while re-committing an existing step never loses the committed copy.
DLRUN_FAULT="ckpt:$point" "$helper" write "$d" 2; rc=$?
[[ $rc -eq 134 ]] || fail "expected abort on re-commit, got $rc"
"$helper" check "$d" 1 2 || fail "step 2 lost by a crashed re-commit"
echo "PASS ($point)"
