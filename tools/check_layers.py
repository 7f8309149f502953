#!/usr/bin/env python3
"""Includes run downhill only (docs/design.md, "House rules").

Every folder of src/ has a layer; a file may include headers of its own folder and of folders
on lower layers, never of a folder on its own or a higher layer. A folder's sub-folders that
are listed (train/step, ...) are folders of their own; a file belongs to the deepest listed
folder that holds it. Prints each arrow that runs the wrong way (file:line, the include, both
layers) and exits 1 if there is one; a folder missing from LAYERS is an error too, so a new
folder has to be placed.

    tools/check_layers.py [SRC_DIR]      (default: src/ beside this script's parent)
"""
import pathlib
import re
import sys

# Lowest first. Folders on one line share a layer and may not include one another.
LAYERS = [
    ["base"],
    ["remote"],
    ["config"],
    ["metrics", "preempt", "run", "world"],
    ["pch", "kernels"],
    ["data", "models"],
    ["checkpoint"],
    ["distributed"],
    ["export", "train/step"],
    ["train/averaging"],
    ["train/observe"],
    ["train/state"],
    ["train"],
    ["cli"],
]
INCLUDE = re.compile(r'^\s*#\s*include\s+"((?:[a-z_]+/)+)[^"/]+"')


def folder_of(parts, layer):
    """The deepest listed folder among the leading path components `parts`, or the first one."""
    for n in range(len(parts), 0, -1):
        name = "/".join(parts[:n])
        if name in layer:
            return name
    return parts[0]


def main() -> int:
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[1] / "src")
    layer = {folder: i for i, row in enumerate(LAYERS) for folder in row}
    problems = []
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cpp", ".cu", ".in") or not path.is_file():
            continue
        rel = path.relative_to(src)
        if len(rel.parts) == 1:  # src/main.cpp: the top, may include anything
            continue
        here = folder_of(list(rel.parts[:-1]), layer)
        if here not in layer:
            problems.append(f"{rel}: folder src/{here}/ has no layer in tools/check_layers.py")
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            there = folder_of(m.group(1).rstrip("/").split("/"), layer)
            if there == here:
                continue
            if there not in layer:
                problems.append(f"{rel}:{n}: includes {there}/, a folder with no layer")
            elif layer[there] >= layer[here]:
                problems.append(f"{rel}:{n}: {here}/ (layer {layer[here]}) includes {there}/ (layer "
                                f"{layer[there]}): an include must run to a lower layer")
    for p in problems:
        print(p)
    print(f"check_layers: {len(problems)} include(s) against the layers" if problems else
          f"check_layers: every include under {src} runs downhill")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
