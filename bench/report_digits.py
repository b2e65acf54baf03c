#!/usr/bin/env python3
"""Joins `kiln train --json` (one line per epoch) and bench/torch_digits.py output (one line per
mode) for the digits recipe into one results file and prints epochs per second side by side.

Both sides count epochs 2..E (the first holds compilation, cuDNN tuning and warm-up) and time
what a user waits for: the training steps with data loading, then the test-set evaluation.

usage: report_digits.py kiln.jsonl torch.jsonl out.json [env.json]"""
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def main():
    kiln_epochs, torch_rows, out = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
    env = load(sys.argv[4])[0] if len(sys.argv) > 4 else {}
    if len(kiln_epochs) < 2:
        sys.exit("report_digits.py: kiln ran fewer than 2 epochs")
    walls = [e["wall_seconds"] for e in kiln_epochs]
    kiln_eps = (len(walls) - 1) / sum(walls[1:])
    last = kiln_epochs[-1]
    tf32 = any(r.get("conv_tf32") for r in torch_rows)
    print(f"digits recipe, {len(walls)} epochs, batch {last['batch']}, {last['precision']}"
          f"{' (convolutions in TF32 on both sides)' if tf32 else ''} ({env.get('gpu', 'GPU')}, "
          f"commit {env.get('commit', '?')}):")
    print(f"  kiln ({last['device']})  {kiln_eps:7.2f} epochs/s  first epoch {walls[0]:6.2f} s  "
          f"test accuracy {last['test_accuracy']:.4f}")
    ratios = {}
    for r in torch_rows:
        ratios[r["mode"]] = kiln_eps / r["epochs_per_second"]
        print(f"  torch {r['mode']:<16}{r['epochs_per_second']:7.2f} epochs/s  first epoch "
              f"{r['first_epoch_seconds']:6.2f} s  test accuracy {r['test_accuracy']:.4f}  kiln x{ratios[r['mode']]:.2f}")
    with open(out, "w") as f:
        json.dump({"env": env, "kiln": {"epochs_per_second": kiln_eps, "epochs": kiln_epochs},
                   "pytorch": torch_rows, "ratio": ratios}, f, indent=1)


if __name__ == "__main__":
    main()
