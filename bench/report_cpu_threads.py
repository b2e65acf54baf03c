#!/usr/bin/env python3
"""Joins bench/cpu_threads.sh's runs: for each thread count, the digits recipe's epochs/s (epochs
2..E, steps with data loading and the test evaluation) of kiln with oneDNN, kiln with its
reference kernels and PyTorch on the CPU (eager, and torch.compile where it ran), the whole
networks' training steps in images/s, and kiln's ratios to each PyTorch mode. Writes
<out>/cpu_threads.json.

usage: report_cpu_threads.py <out dir>"""
import glob
import json
import os
import re
import statistics
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def epochs_per_second(walls):
    return (len(walls) - 1) / sum(walls[1:]) if len(walls) > 1 else None


def median_or_none(values):
    values = [v for v in values if v]
    return statistics.median(values) if values else None


def main():
    out = sys.argv[1]
    rows = {}
    # A thread count may have run more than once (bench/cpu_threads_ab.sh's rounds): each side's
    # epochs/s is the median of its runs, "runs" their count and "each_run" every one.
    runs = {}  # (threads, side) -> [(epochs/s, test accuracy, extra)]
    for path in sorted(glob.glob(os.path.join(out, "kiln_*_t*.jsonl"))):
        side, threads = re.match(r"kiln_(\w+?)_t(\d+)(?:_r\d+)?\.jsonl", os.path.basename(path)).groups()
        epochs = load(path)
        runs.setdefault((int(threads), f"kiln_{side}"), []).append(
            (epochs_per_second([e["wall_seconds"] for e in epochs]), epochs[-1]["test_accuracy"] if epochs else None, {}))
    torch_path = os.path.join(out, "torch_cpu.jsonl")
    for r in load(torch_path) if os.path.exists(torch_path) else []:
        runs.setdefault((int(r["threads"]), f"torch_{r.get('mode', 'eager')}"), []).append(
            (r["epochs_per_second"], r["test_accuracy"], {"torch": r["torch"]}))
    for (threads, side), each in runs.items():
        rows.setdefault(threads, {})[side] = {
            "epochs_per_second": median_or_none([e[0] for e in each]), "test_accuracy": each[-1][1],
            "runs": len(each), "each_run": [e[0] for e in each], **each[-1][2]}
    if not rows and not glob.glob(os.path.join(out, "net_*.jsonl")):
        sys.exit("report_cpu_threads.py: no runs")
    if rows:
        print("digits recipe on the CPU, epochs/s (epochs 2..E; the median where a thread count ran more than once)")
        print(f"{'threads':>8} {'kiln onednn':>14} {'kiln reference':>15} {'torch eager':>12} {'onednn/torch':>13} "
              f"{'torch compile':>14} {'onednn/compile':>15}")
        for t in sorted(rows):
            r = rows[t]
            cell = lambda k: f"{r[k]['epochs_per_second']:.3f}" if k in r and r[k]["epochs_per_second"] else "-"
            ratios = {}
            for mode in ("eager", "compile"):
                if "kiln_onednn" in r and f"torch_{mode}" in r and r["kiln_onednn"]["epochs_per_second"]:
                    ratios[mode] = r["kiln_onednn"]["epochs_per_second"] / r[f"torch_{mode}"]["epochs_per_second"]
            if "eager" in ratios:
                r["onednn_over_torch"] = ratios["eager"]
            if "compile" in ratios:
                r["onednn_over_torch_compile"] = ratios["compile"]
            ratio_cell = lambda mode: f"x{ratios[mode]:.2f}" if mode in ratios else "-"
            print(f"{t:>8} {cell('kiln_onednn'):>14} {cell('kiln_reference'):>15} {cell('torch_eager'):>12} "
                  f"{ratio_cell('eager'):>13} {cell('torch_compile'):>14} {ratio_cell('compile'):>15}")
    networks = {}  # "<model>_<size>_batch<batch>" -> threads -> side -> images/s
    for path in sorted(glob.glob(os.path.join(out, "net_*.jsonl"))):
        framework, model = re.match(r"net_(kiln|torch)_(\w+)\.jsonl", os.path.basename(path)).groups()
        size = 32 if model.endswith("_cifar") else 224
        runs = {}  # (key, threads, side) -> images/s of each run: bench/cpu_threads_ab.sh may repeat a thread count
        for r in load(path):
            side = "kiln_onednn" if framework == "kiln" else f"torch_{r.get('mode', 'eager')}"
            runs.setdefault((f"{model}_{size}_batch{r['batch']}", int(r["threads"]), side), []).append(
                r["images_per_second"])
        for (key, threads, side), speeds in runs.items():
            networks.setdefault(key, {}).setdefault(threads, {})[side] = statistics.median(speeds)
    for key, by_threads in networks.items():
        print(f"{key}: training step, fp32, images/s (median of 3 steps; of the runs' medians where a thread "
              "count ran more than once)")
        print(f"{'threads':>8} {'kiln onednn':>12} {'torch eager':>12} {'kiln/torch':>11} {'torch compile':>14} "
              f"{'kiln/compile':>13}")
        for t in sorted(by_threads):
            r = by_threads[t]
            over = lambda mode: r["kiln_onednn"] / r[f"torch_{mode}"] if "kiln_onednn" in r and f"torch_{mode}" in r else None
            r["kiln_over_torch"] = over("eager")
            if over("compile"):
                r["kiln_over_torch_compile"] = over("compile")
            ratio_cell = lambda x: f"x{x:.2f}" if x else "-"
            print(f"{t:>8} {r.get('kiln_onednn', 0):12.1f} {r.get('torch_eager', 0):12.1f} "
                  f"{ratio_cell(over('eager')):>11} {r.get('torch_compile', 0):14.1f} {ratio_cell(over('compile')):>13}")
    with open(os.path.join(out, "cpu_threads.json"), "w") as f:
        json.dump({"threads": rows, **networks}, f, indent=1)

if __name__ == "__main__":
    main()
