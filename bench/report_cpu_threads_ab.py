#!/usr/bin/env python3
"""Joins bench/cpu_threads_ab.sh's variant folders: for each workload and thread count, each
variant's speed (digits recipe: epochs/s; networks: images/s), over the PyTorch run beside it
(eager, and torch.compile where it ran) and over the first variant. Writes <out>/ab.json.

usage: report_cpu_threads_ab.py <out dir>"""
import json
import os
import sys


def speeds(report):
    """workload -> threads -> (kiln, torch eager or None, torch.compile or None), from one cpu_threads.json."""
    table = {}
    for t, r in report.get("threads", {}).items():
        if r.get("kiln_onednn", {}).get("epochs_per_second"):
            table.setdefault("digits_recipe", {})[int(t)] = (r["kiln_onednn"]["epochs_per_second"],
                                                             r.get("torch_eager", {}).get("epochs_per_second"),
                                                             r.get("torch_compile", {}).get("epochs_per_second"))
    for key, by_threads in report.items():
        if key == "threads":
            continue
        for t, r in by_threads.items():
            if r.get("kiln_onednn"):
                table.setdefault(key, {})[int(t)] = (r["kiln_onednn"], r.get("torch_eager"), r.get("torch_compile"))
    return table


def over(x, y):
    return x / y if x and y else None


def cell(x, width, digits):
    return f"{x:{width}.{digits}f}" if x is not None else f"{'-':>{width}}"


def main():
    out = sys.argv[1]
    with open(os.path.join(out, "variants.txt")) as f:
        names = [line.strip() for line in f if line.strip()]
    tables = {}
    for name in names:
        path = os.path.join(out, name, "cpu_threads.json")
        if os.path.exists(path):
            with open(path) as f:
                tables[name] = speeds(json.load(f))
    if not tables:
        sys.exit("report_cpu_threads_ab.py: no variant measured")
    first = names[0]
    joined = {}
    for work in sorted({w for table in tables.values() for w in table}):
        print(f"{work}: each variant, the PyTorch run beside it, their ratio, and the variant over {first}")
        for name in names:
            for t in sorted(tables.get(name, {}).get(work, {})):
                kiln, torch, compiled = tables[name][work][t]
                base = tables.get(first, {}).get(work, {}).get(t, (None,))[0]
                row = {"kiln": kiln, "torch": torch, "kiln_over_torch": over(kiln, torch),
                       f"over_{first}": over(kiln, base)}
                if compiled:
                    row.update({"torch_compile": compiled, "kiln_over_torch_compile": over(kiln, compiled)})
                joined.setdefault(work, {}).setdefault(name, {})[t] = row
                compile_cells = (f"  compile {cell(compiled, 10, 3)} x{cell(row['kiln_over_torch_compile'], 5, 2)}"
                                 if compiled else "")
                print(f"  {name:>14} t={t:<3} {cell(kiln, 10, 3)} torch {cell(torch, 10, 3)} "
                      f"x{cell(row['kiln_over_torch'], 5, 2)}{compile_cells}  over {first} x{cell(row[f'over_{first}'], 5, 2)}")
    with open(os.path.join(out, "ab.json"), "w") as f:
        json.dump(joined, f, indent=1)


if __name__ == "__main__":
    main()
