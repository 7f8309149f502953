#!/usr/bin/env bash
# config_docs_current.sh DLRUN DOC — the key reference in DOC (between the BEGIN/END markers)
# must be exactly what `dlrun config docs` prints: field docs live in the schema table only.
set -u
dlrun="$1"; doc="$2"
want="$("$dlrun" config docs)" || { echo "FAIL: dlrun config docs exited $?"; exit 1; }
have="$(sed -n '/<!-- BEGIN dlrun config docs -->/,/<!-- END dlrun config docs -->/p' "$doc" | sed '1d;$d')"
if [[ "$(printf '%s' "$have" | sed '/^$/d')" != "$(printf '%s' "$want" | sed '/^$/d')" ]]; then
  echo "FAIL: $doc is out of date with the schema; run scripts/update-config-docs.sh"
  diff <(printf '%s\n' "$want" | sed '/^$/d') <(printf '%s\n' "$have" | sed '/^$/d') | head -20
  exit 1
fi
echo "ok: $doc matches dlrun config docs"
