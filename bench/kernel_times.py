#!/usr/bin/env python3
"""Per-kernel GPU times from Nsight Compute's CSV (ncu --csv --metrics gpu__time_duration.sum):
kernels grouped by name (template arguments and parameters dropped), with their count and
median duration. Used to see where a block's time goes, stage by stage.

usage: kernel_times.py ncu.csv label > lines.jsonl"""
import csv
import json
import re
import statistics
import sys


def short(name):
    name = re.sub(r"^void ", "", name)
    depth, out = 0, []
    for ch in name:  # drop <...> and (...) spans
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).split("::")[-1][:90]


def main():
    rows = [r for r in csv.DictReader(l for l in open(sys.argv[1]) if l.startswith('"'))
            if r.get("Metric Name") == "gpu__time_duration.sum"]
    times = {}
    for r in rows:
        value = float(r["Metric Value"].replace(",", ""))
        unit = r["Metric Unit"]
        scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit)
        if scale is None:
            sys.exit(f"kernel_times.py: unknown time unit '{unit}' in {sys.argv[1]}")
        times.setdefault(short(r["Kernel Name"]), []).append(value * scale)
    for name, us in times.items():
        print(json.dumps({"label": sys.argv[2], "kernel": name, "count": len(us),
                          "median_us": round(statistics.median(us), 2)}))


if __name__ == "__main__":
    main()
