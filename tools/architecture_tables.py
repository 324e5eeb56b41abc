#!/usr/bin/env python3
"""Prints the two generated tables of docs/architecture.md from the source tree: which layer
(a folder of src/) includes which, and where each Note [...] is written. No packages needed.

Usage: python3 tools/architecture_tables.py   # from the repository root; paste between the
                                              # markers of docs/architecture.md
"""

import collections
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
SOURCE = (".h", ".cpp", ".cu", ".cuh", ".inc")
INCLUDE = re.compile(r'#include "([a-z_]+)/')
# A note is written where a comment line is only its title; elsewhere it is cited.
NOTE = re.compile(r"^\s*//\s*Note \[([^\]]+)\]\s*$")


def sources():
    for layer in sorted(os.listdir(SRC)):
        folder = os.path.join(SRC, layer)
        if not os.path.isdir(folder):
            continue
        for dirpath, _, files in os.walk(folder):
            for name in sorted(files):
                if name.endswith(SOURCE):
                    yield layer, os.path.join(dirpath, name)


def main():
    uses = collections.defaultdict(set)
    notes = {}
    for layer, path in sources():
        with open(path, errors="replace") as f:
            lines = f.readlines()
        for i, line in enumerate(lines):
            m = INCLUDE.match(line)
            if m and m.group(1) != layer:
                uses[layer].add(m.group(1))
            n = NOTE.match(line)
            # The title alone, then the text on the next comment line: the note's home.
            if n and i + 1 < len(lines) and lines[i + 1].strip().startswith("//"):
                notes.setdefault(n.group(1), os.path.relpath(path, ROOT))
    layers = sorted({layer for layer, _ in sources()})
    print("| layer | includes from |")
    print("|---|---|")
    for layer in layers:
        print(f"| {layer} | {', '.join(sorted(uses[layer])) or '—'} |")
    cycles = sorted((a, b) for a in uses for b in uses[a] if a < b and a in uses.get(b, ()))
    print()
    print("Mutual includes: " + (", ".join(f"{a} ↔ {b}" for a, b in cycles) or "none"))
    print()
    print("| note | written in |")
    print("|---|---|")
    for title in sorted(notes, key=str.lower):
        print(f"| {title} | `{notes[title]}` |")


if __name__ == "__main__":
    main()
