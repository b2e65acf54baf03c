#!/usr/bin/env python3
"""Joins `kiln bench --json` rows that differ in one option (a field of the row, e.g. conv_stats)
and prints, for each model and precision, images/s (from the median of all rounds' step times),
device memory and first-step time per value of that field, against the first value in the order
given.

usage: report_ab.py FIELD VALUE[,VALUE...] rows.jsonl out.json [env.json]"""
import json
import sys

from report_seams import load, summary


def main():
    field, values = sys.argv[1], [int(v) if v.lstrip("-").isdigit() else v for v in sys.argv[2].split(",")]
    rows, out = load(sys.argv[3]), sys.argv[4]
    env = load(sys.argv[5])[0] if len(sys.argv) > 5 else {}
    if not rows:
        sys.exit("report_ab.py: no kiln result")
    gib = 1 << 30
    results = []
    for key in sorted({(r["model"], r["precision"], r["batch"]) for r in rows}):
        mine = [r for r in rows if (r["model"], r["precision"], r["batch"]) == key]
        sums = {v: summary([r for r in mine if r.get(field) == v]) for v in values
                if any(r.get(field) == v for r in mine)}
        if values[0] not in sums:
            print(f"{key}: no row with {field} = {values[0]}")
            continue
        base = sums[values[0]]
        print(f"{key[0]}, batch {key[2]}, {key[1]} ({env.get('gpu', 'GPU')}, commit {env.get('commit', '?')}):")
        result = {"model": key[0], "precision": key[1], "batch": key[2], "field": field, "sides": {}}
        for v, s in sums.items():
            speed = s["images_per_second"] / base["images_per_second"]
            print(f"  {field} = {v!s:<8}{s['images_per_second']:8.0f} img/s (x{speed:.3f})  step "
                  f"{s['median_step_ms']:7.2f} ms  memory {s['device_bytes'] / gib:5.2f} GiB  first step "
                  f"{', '.join(f'{t:.1f}' for t in s['first_step_seconds'])} s  rounds "
                  f"{', '.join(f'{x:.0f}' for x in s['rounds_images_per_second'])}")
            result["sides"][str(v)] = dict(s, ratio=speed)
        results.append(result)
    with open(out, "w") as f:
        json.dump({"env": env, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
