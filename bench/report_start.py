#!/usr/bin/env python3
"""Joins the runs of `scripts/gpu_check.sh start` into one results file and prints, per model, the
first-step time (cold: no plan cache; warm: the cache the cold run filled), the device memory held
and the rate of kiln's default start beside PyTorch eager and torch.compile, measured in the same
call, and the default's rate against exhaustive tuning's, with the issue's targets checked:
first step <= 30 s cold and <= 5 s warm, memory <= 0.85x torch.compile's, rate within 2% of
exhaustive tuning's. A missed target is printed as missed; the exit code is non-zero only when a
run is missing.

usage: report_start.py OUT_DIR out.json [env.json]"""
import json
import os
import statistics
import sys

GIB = 1 << 30


def load(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def by_model(rows):
    out = {}
    for r in rows:
        out.setdefault(r["model"], []).append(r)
    return out


def median_rate(rows):
    """images/s from the median of every step of every run (runs interleaved with the other side)."""
    steps = [t for r in rows for t in r["step_ms"]]
    return rows[0]["batch"] / (statistics.median(steps) * 1e-3)


def verdict(ok):
    return "met" if ok else "MISSED"


def main():
    out_dir, out = sys.argv[1], sys.argv[2]
    env = load(sys.argv[3])[0] if len(sys.argv) > 3 else {}
    cold, warm = by_model(load(f"{out_dir}/start_kiln_cold.jsonl")), by_model(load(f"{out_dir}/start_kiln_warm.jsonl"))
    torch_rows = by_model(load(f"{out_dir}/start_torch.jsonl"))
    bounded = by_model(load(f"{out_dir}/start_rate_bounded.jsonl"))
    exhaustive = by_model(load(f"{out_dir}/start_rate_exhaustive.jsonl"))
    print(f"default start beside PyTorch ({env.get('gpu', 'GPU')}, commit {env.get('commit', '?')}):")
    results, missing = {}, False
    for model in sorted(set(cold) | set(warm) | set(torch_rows)):
        if model not in cold or model not in warm:
            print(f"  {model}: kiln's cold or warm run is missing")
            missing = True
            continue
        c, w = cold[model][0], warm[model][0]
        ips = median_rate(cold[model] + warm[model])
        torch_modes = {r["mode"]: r for r in torch_rows.get(model, [])}
        row = {"batch": c["batch"], "kiln": {"cold_first_step_seconds": c["first_step_seconds"],
                                             "warm_first_step_seconds": w["first_step_seconds"],
                                             "device_bytes": c["device_bytes"], "warm_device_bytes": w["device_bytes"],
                                             "planned_bytes": c["planned_bytes"],
                                             "workspace_bytes": c["workspace_bytes"], "images_per_second": ips},
               "pytorch": torch_modes}
        print(f"  {model}, batch {c['batch']}, fp16:")
        print(f"    kiln           first step {c['first_step_seconds']:6.1f} s cold, {w['first_step_seconds']:5.1f} s warm"
              f"  memory {c['device_bytes'] / GIB:5.2f} GiB (warm {w['device_bytes'] / GIB:.2f})  {ips:6.0f} img/s")
        for mode, r in torch_modes.items():
            print(f"    torch {mode:<9}first step {r['first_step_seconds']:6.1f} s        "
                  f"        memory {r['device_bytes'] / GIB:5.2f} GiB  {r['images_per_second']:6.0f} img/s"
                  f"  kiln x{ips / r['images_per_second']:.2f}")
        targets = {"cold_first_step_30s": c["first_step_seconds"] <= 30,
                   "warm_first_step_5s": w["first_step_seconds"] <= 5}
        if "compile" in torch_modes:
            ratio = max(c["device_bytes"], w["device_bytes"]) / torch_modes["compile"]["device_bytes"]
            row["memory_ratio_to_compile"] = ratio
            targets["memory_0.85x_compile"] = ratio <= 0.85
            print(f"    memory against torch.compile's: x{ratio:.2f}")
        if model in bounded and model in exhaustive:
            b, e = median_rate(bounded[model]), median_rate(exhaustive[model])
            row["tuning"] = {"bounded_images_per_second": b, "exhaustive_images_per_second": e,
                             "exhaustive_first_step_seconds": exhaustive[model][0]["first_step_seconds"],
                             "exhaustive_device_bytes": exhaustive[model][0]["device_bytes"]}
            targets["rate_within_2pct_of_exhaustive"] = b >= 0.98 * e
            print(f"    default tuning {b:.0f} img/s against exhaustive {e:.0f} (x{b / e:.3f}); exhaustive's first step "
                  f"{row['tuning']['exhaustive_first_step_seconds']:.1f} s, holding "
                  f"{row['tuning']['exhaustive_device_bytes'] / GIB:.2f} GiB")
        row["targets"] = targets
        print("    targets: " + ", ".join(f"{k} {verdict(v)}" for k, v in targets.items()))
        results[model] = row
    with open(out, "w") as f:
        json.dump({"env": env, "models": results}, f, indent=1)
    sys.exit(1 if missing or not results else 0)


if __name__ == "__main__":
    main()
