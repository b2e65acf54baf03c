#!/usr/bin/env python3
"""Joins `kiln bench --json` rows of programs with and without fusion across layers (--fuse-seams;
scripts/gpu_check.sh seams) and prints, for each model and precision, images/s (from the median of
all rounds' step times), device memory and the first step's time of each, and the seams' ratios.

usage: report_seams.py kiln_seams.jsonl out.json [env.json]"""
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


# The programs compared: without seams and with them.
SIDES = ("without seams", "with seams")


def side(row):
    return SIDES[1] if row.get("fuse_seams") else SIDES[0]


def summary(rows):
    steps = [t for r in rows for t in r["step_ms"]]
    ms = statistics.median(steps)
    return {"images_per_second": rows[0]["batch"] / (ms * 1e-3), "median_step_ms": ms,
            "rounds_images_per_second": [r["images_per_second"] for r in rows],
            "device_bytes": max(r["device_bytes"] for r in rows), "planned_bytes": rows[0]["planned_bytes"],
            "first_step_seconds": [r["first_step_seconds"] for r in rows],
            "last_loss": [r["last_loss"] for r in rows]}


def main():
    rows, out = load(sys.argv[1]), sys.argv[2]
    env = load(sys.argv[3])[0] if len(sys.argv) > 3 else {}
    if not rows:
        sys.exit("report_seams.py: no kiln result")
    gib = 1 << 30
    results = []
    for key in sorted({(r["model"], r["precision"], r["batch"]) for r in rows}):
        mine = [r for r in rows if (r["model"], r["precision"], r["batch"]) == key]
        by = {name: [r for r in mine if side(r) == name] for name in SIDES}
        if not by[SIDES[0]] or not by[SIDES[1]]:
            print(f"{key}: missing a side"), results.append({"model": key[0], "missing": True})
            continue
        sums = {name: summary(rs) for name, rs in by.items() if rs}
        plain = sums[SIDES[0]]
        print(f"{key[0]}, batch {key[2]}, {key[1]} ({env.get('gpu', 'GPU')}, commit {env.get('commit', '?')}):")
        result = {"model": key[0], "precision": key[1], "batch": key[2]}
        for name, s in sums.items():
            speed = s["images_per_second"] / plain["images_per_second"]
            memory = s["device_bytes"] / plain["device_bytes"]
            print(f"  {name:<24}{s['images_per_second']:8.0f} img/s (x{speed:.3f})  step {s['median_step_ms']:7.2f} ms  "
                  f"memory {s['device_bytes'] / gib:5.2f} GiB (x{memory:.3f}, planned {s['planned_bytes'] / gib:.2f})  "
                  f"first step {', '.join(f'{t:.1f}' for t in s['first_step_seconds'])} s  rounds "
                  f"{', '.join(f'{v:.0f}' for v in s['rounds_images_per_second'])}")
            result[name.replace(" ", "_")] = dict(s, speed_ratio=speed, memory_ratio=memory)
        results.append(result)
    with open(out, "w") as f:
        json.dump({"env": env, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
