#!/usr/bin/env python3
"""Prints the two generated tables of docs/architecture.md from the source tree: which layer
(a folder of src/) includes which, and where each Note [...] is written. No packages needed.

Usage: python3 tools/architecture_tables.py          # paste between the markers of
                                                     # docs/architecture.md
       python3 tools/architecture_tables.py --check  # exit 1 when the doc is stale: a generated
                                                     # table differs, or the hand-written layer
                                                     # list misses a layer or puts one below a
                                                     # layer it includes
"""

import collections
import os
import re
import sys

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
    out = ["| layer | includes from |", "|---|---|"]
    for layer in layers:
        out.append(f"| {layer} | {', '.join(sorted(uses[layer])) or '—'} |")
    cycles = sorted((a, b) for a in uses for b in uses[a] if a < b and a in uses.get(b, ()))
    out += ["", "Mutual includes: " + (", ".join(f"{a} ↔ {b}" for a, b in cycles) or "none")]
    notes_table = ["| note | written in |", "|---|---|"]
    for title in sorted(notes, key=str.lower):
        notes_table.append(f"| {title} | `{notes[title]}` |")
    if "--check" not in sys.argv[1:]:
        print("\n".join(out + [""] + notes_table))
        return
    sys.exit(check("\n".join(out), "\n".join(notes_table), layers, uses))


def between(text, name):
    start, end = f"<!-- generated: {name} -->", f"<!-- end generated: {name} -->"
    if start not in text or end not in text:
        return None
    return text.split(start, 1)[1].split(end, 1)[0].strip()


def check(layers_table, notes_table, layers, uses):
    doc_path = os.path.join(ROOT, "docs", "architecture.md")
    with open(doc_path) as f:
        doc = f.read()
    problems = []
    for name, table in (("layers", layers_table), ("notes", notes_table)):
        if between(doc, name) != table.strip():
            problems.append(f"the generated '{name}' table is stale")
    # The hand-written list: "| layer | holds |" rows, from the bottom up.
    listed = []
    in_list = False
    for line in doc.splitlines():
        if line.startswith("| layer | holds |"):
            in_list = True
            continue
        if in_list:
            if not line.startswith("|"):
                break
            cell = line.split("|")[1].strip()
            if cell and not cell.startswith("---"):
                listed.append(cell)
    if sorted(listed) != layers:
        missing = sorted(set(layers) - set(listed))
        extra = sorted(set(listed) - set(layers))
        problems.append(f"the layer list misses {missing or 'none'} and names {extra or 'none'} "
                        "that src/ has not")
    position = {layer: i for i, layer in enumerate(listed)}
    for layer in listed:
        above = sorted(u for u in uses.get(layer, ()) if position.get(u, -1) > position[layer])
        if above:
            problems.append(f"the layer list puts {layer} below {', '.join(above)}, which it "
                            "includes")
    for problem in problems:
        print(f"docs/architecture.md: {problem} (python3 tools/architecture_tables.py prints the "
              "tables)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    main()
