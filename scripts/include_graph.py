#!/usr/bin/env python3
"""The include graph of a revision, part by part, judged by today's layering table.

Usage: scripts/include_graph.py [REV ...]        (default: HEAD; e.g. 1540906 HEAD)

For each revision: how many library files each part holds, how many `#include "..."` lines run
from each part to each other part, and every include the layering forbids (an include running
up or across to a part the part may not use). The parts and the table are read from
tests/architecture/include_layers_test.cpp of the working tree, which is the authority: this
script places files as its part_of() does (src/<area>, the lowerings and exports inside src/ops,
the public headers by name, tools/), so two revisions are judged by the same rules. Tests and
the headers only tests include (*_test.cpp, *_test.h) are not the library and are left out.
"""
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "tests/architecture/include_layers_test.cpp")
LOWERING_TAILS = ("_layer", "_optimizer", "_loss", "_loss_scale", "_lowering")


def read_table():
    text = open(TABLE).read()
    headers_block = text.split("kPublicHeaders = {", 1)[1].split("};", 1)[0]
    headers = dict(re.findall(r'\{"([^"]+)",\s*"([^"]+)"\}', headers_block))
    may_block = text.split("kMayInclude = {", 1)[1].split("\n};", 1)[0]
    may = {}
    for part, allowed in re.findall(r'\{"([^"]+)",\s*\{([^}]*)\}\}', may_block, re.S):
        may[part] = set(re.findall(r'"([^"]+)"', allowed))
    return headers, may


def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], check=True, capture_output=True).stdout


def files_of(rev):
    names = git("ls-tree", "-r", "--name-only", rev, "--", "src", "include", "tools").decode().split("\n")
    keep = []
    for name in names:
        base = os.path.basename(name)
        if not base.endswith((".h", ".cpp", ".cu", ".cuh")):
            continue
        if base.endswith(("_test.cpp", "_test.h")):
            continue
        keep.append(name)
    return keep


def contents(rev, names):
    """Each file's text at `rev`, through one `git cat-file --batch`."""
    request = "".join(f"{rev}:{n}\n" for n in names).encode()
    out = subprocess.run(["git", "-C", ROOT, "cat-file", "--batch"], input=request, check=True,
                         capture_output=True).stdout
    texts, pos = {}, 0
    for name in names:
        header_end = out.index(b"\n", pos)
        size = int(out[pos:header_end].split()[2])
        texts[name] = out[header_end + 1:header_end + 1 + size].decode(errors="replace")
        pos = header_end + 1 + size + 1
    return texts


def part_of(path, headers):
    parts = path.split("/")
    if parts[0] == "include":
        return headers.get(parts[-1], "")
    if parts[0] == "tools":
        return "tools"
    if parts[0] == "src" and len(parts) > 1:
        area = parts[1]
        stem = os.path.splitext(parts[-1])[0]
        if area == "ops":
            if any(stem.endswith(t) and stem != t for t in LOWERING_TAILS):
                return "lowering"
            if stem.endswith("_export") and stem != "_export":
                return "export"
        return area
    return "?"


def include_target(name, tool_dirs):
    if name.startswith("kiln/"):
        return "include/" + name
    head = name.split("/", 1)[0]
    if "/" in name and head in tool_dirs:
        return "tools/" + name
    return "src/" + name


def report(rev, headers, may):
    names = files_of(rev)
    texts = contents(rev, names)
    tool_dirs = {n.split("/")[1] for n in names if n.startswith("tools/") and n.count("/") >= 2}
    rooms = Counter()
    edges = Counter()
    bad = defaultdict(list)
    include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    for name in names:
        src = part_of(name, headers) or "unplaced header"
        rooms[src] += 1
        for line_no, line in enumerate(texts[name].split("\n"), 1):
            m = include.match(line)
            if not m:
                continue
            dst = part_of(include_target(m.group(1), tool_dirs), headers) or "unplaced header"
            if dst == "?":
                continue  # a generated or third-party header
            edges[(src, dst)] += 1
            if src != dst and dst not in may.get(src, set()):
                bad[(src, dst)].append(f"{name}:{line_no}: {m.group(1)}")
    sha = git("rev-parse", "--short", rev).decode().strip()
    print(f"## {rev} ({sha})\n")
    print("Files per part: " + ", ".join(f"{p} {n}" for p, n in sorted(rooms.items())) + "\n")
    print("| from → to | includes |\n|---|---|")
    for (src, dst), n in sorted(edges.items()):
        if src != dst:
            print(f"| {src} → {dst} | {n} |")
    total = sum(len(v) for v in bad.values())
    print(f"\nIncludes the layering forbids: {total}")
    for (src, dst), where in sorted(bad.items()):
        print(f"- {src} → {dst}: {len(where)}, e.g. {where[0]}")
    print()


def floors(may):
    """Each part's floor: 0 for a part that uses no other, else one above the highest it may use."""
    memo = {}

    def floor(part):
        if part not in memo:
            memo[part] = 1 + max((floor(o) for o in may[part] if o != part), default=-1)
        return memo[part]

    by_floor = defaultdict(list)
    for part in may:
        by_floor[floor(part)].append(part)
    return "; ".join(f"{f}: {', '.join(sorted(by_floor[f]))}" for f in sorted(by_floor))


def main():
    headers, may = read_table()
    print(f"Floors of today's layering table, bottom up: {floors(may)}\n")
    for rev in sys.argv[1:] or ["HEAD"]:
        report(rev, headers, may)


if __name__ == "__main__":
    main()
