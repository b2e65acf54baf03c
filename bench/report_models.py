#!/usr/bin/env python3
"""Joins `kiln bench --json` and bench/torch_models.py output (JSON lines, one model) into one
results file and prints images/s side by side with kiln's ratio to each PyTorch mode and to the
best of them.

kiln runs before and after PyTorch in the same call (two rounds, so that clock and temperature
drift weigh on both sides); its images/s is taken from the median of both rounds' step times.

usage: report_models.py kiln.jsonl torch.jsonl out.json [env.json]"""
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def main():
    kiln_rows, torch_rows, out = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
    env = load(sys.argv[4])[0] if len(sys.argv) > 4 else {}
    if not kiln_rows:
        sys.exit("report_models.py: no kiln result")
    first = kiln_rows[0]
    steps = [t for r in kiln_rows for t in r["step_ms"]]
    kiln_ms = statistics.median(steps)
    kiln_ips = first["batch"] / (kiln_ms * 1e-3)
    gib = 1 << 30
    print(f"{first['model']}, batch {first['batch']}, {first['precision']} ({env.get('gpu', 'GPU')}, commit "
          f"{env.get('commit', '?')}):")
    print(f"  kiln          {kiln_ips:8.0f} img/s  step {kiln_ms:7.2f} ms  first step {first['first_step_seconds']:6.1f} s"
          f"  memory {first['device_bytes'] / gib:5.1f} GiB (planned {first['planned_bytes'] / gib:.1f})"
          f"  rounds {', '.join(f'{r['images_per_second']:.0f}' for r in kiln_rows)}")
    ratios = {}
    for r in torch_rows:
        ratios[r["mode"]] = kiln_ips / r["images_per_second"]
        print(f"  torch {r['mode']:<12}{r['images_per_second']:8.0f} img/s  step {r['median_step_ms']:7.2f} ms  first step "
              f"{r['first_step_seconds']:6.1f} s  memory {r['device_bytes'] / gib:5.1f} GiB "
              f"(allocated peak {r['max_memory_allocated'] / gib:.1f})  kiln x{ratios[r['mode']]:.2f}")
    best = max(torch_rows, key=lambda r: r["images_per_second"]) if torch_rows else None
    if best:
        print(f"  kiln / best PyTorch mode ({best['mode']}): x{kiln_ips / best['images_per_second']:.2f}")
    with open(out, "w") as f:
        json.dump({"env": env, "model": first["model"], "batch": first["batch"], "precision": first["precision"],
                   "kiln": {"images_per_second": kiln_ips, "median_step_ms": kiln_ms, "rounds": kiln_rows},
                   "pytorch": torch_rows, "ratio": ratios,
                   "ratio_to_best": kiln_ips / best["images_per_second"] if best else None}, f, indent=1)


if __name__ == "__main__":
    main()
