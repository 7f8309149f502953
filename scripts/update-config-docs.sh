#!/usr/bin/env bash
# scripts/update-config-docs.sh [DLRUN] — rewrite the key reference in docs/configuration.md
# (between the BEGIN/END markers) from `dlrun config docs`, the schema table's own output.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DLRUN="${1:-$ROOT/build/dlrun}"
python3 - "$ROOT/docs/configuration.md" "$("$DLRUN" config docs)" <<'PY'
import sys
path, ref = sys.argv[1], sys.argv[2]
text = open(path).read()
begin, end = "<!-- BEGIN dlrun config docs -->\n", "<!-- END dlrun config docs -->"
a, b = text.index(begin) + len(begin), text.index(end)
open(path, "w").write(text[:a] + "\n" + ref.rstrip("\n") + "\n\n" + text[b:])
PY
echo "docs/configuration.md: key reference regenerated"
