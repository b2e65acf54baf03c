#!/usr/bin/env python3
"""Joins kiln_cbr_bench and torch_cbr_bench.py output (JSON lines) into one results file and a
table of milliseconds and ratios against the CBR targets.

usage: report_cbr.py kiln.jsonl torch.jsonl out.json [env.json] [tune.jsonl]"""
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def main():
    kiln_lines, torch = load(sys.argv[1]), load(sys.argv[2])
    kiln = [r for r in kiln_lines if r.get("kind") == "block"]
    ceiling = next((r for r in kiln_lines if r.get("kind") == "ceiling"), None)
    env = json.load(open(sys.argv[4])) if len(sys.argv) > 4 else {}
    tune = load(sys.argv[5]) if len(sys.argv) > 5 else []
    rows = []
    for shape in sorted({tuple(r["shape"]) for r in kiln}, key=lambda s: [256 - s[0]] + list(s)):
        k = {r["variant"]: r for r in kiln if tuple(r["shape"]) == shape}
        t = {(r["variant"], r["mode"]): r for r in torch if tuple(r["shape"]) == shape}
        if not {"conv", "cbr"} <= k.keys() or ("cbr", "eager") not in t:
            continue
        n, c, hw, kk, kernel, stride = shape
        kind = "vgg" if kernel == 3 and c == kk and c >= 64 and hw in (224, 112, 56, 28) else (
            "resnet1x1" if kernel == 1 else "other")
        target = {"vgg": 1.3, "resnet1x1": 1.6, "other": 1.5}[kind]
        eager, comp = t[("cbr", "eager")], t.get(("cbr", "compile"))
        ours_extra = k["cbr"]["fwd_bwd_ms"] - k["conv"]["fwd_bwd_ms"]
        torch_extra = eager["fwd_bwd_ms"] - t[("conv", "eager")]["fwd_bwd_ms"] if ("conv", "eager") in t else None
        row = {
            "shape": list(shape), "class": kind, "target_vs_eager": target,
            "kiln_conv_fwd_bwd_ms": k["conv"]["fwd_bwd_ms"], "kiln_unfused_fwd_bwd_ms": k.get("unfused", {}).get("fwd_bwd_ms"),
            "kiln_cbr_fwd_ms": k["cbr"]["fwd_ms"], "kiln_cbr_fwd_bwd_ms": k["cbr"]["fwd_bwd_ms"],
            "torch_conv_fwd_bwd_ms": t.get(("conv", "eager"), {}).get("fwd_bwd_ms"),
            "torch_eager_fwd_ms": eager["fwd_ms"], "torch_eager_fwd_bwd_ms": eager["fwd_bwd_ms"],
            "torch_compile_fwd_ms": comp and comp["fwd_ms"], "torch_compile_fwd_bwd_ms": comp and comp["fwd_bwd_ms"],
            "speedup_vs_eager": eager["fwd_bwd_ms"] / k["cbr"]["fwd_bwd_ms"],
            "speedup_vs_compile": comp and comp["fwd_bwd_ms"] / k["cbr"]["fwd_bwd_ms"],
            "bn_relu_extra_ms_kiln": ours_extra, "bn_relu_extra_ms_torch": torch_extra,
            # The backward pipelined over 2 or 4 batch slices ("1" is the default, the cbr row).
            "kiln_cbr_slices_fwd_bwd_ms": {"1": k["cbr"]["fwd_bwd_ms"], **{
                v[len("cbr_slices"):]: r["fwd_bwd_ms"] for v, r in k.items() if v.startswith("cbr_slices")}},
            # wgrad after dgrad on one stream instead of beside it.
            "kiln_conv_1stream_fwd_bwd_ms": k.get("conv_1stream", {}).get("fwd_bwd_ms"),
            "kiln_cbr_1stream_fwd_bwd_ms": k.get("cbr_1stream", {}).get("fwd_bwd_ms"),
        }
        row["meets_eager_target"] = row["speedup_vs_eager"] >= target
        row["meets_compile_target"] = comp is None or row["speedup_vs_compile"] >= 1.0
        row["meets_extra_target"] = torch_extra is not None and ours_extra <= 0.5 * torch_extra
        rows.append(row)
    json.dump({"env": env, "copy_ceiling": ceiling, "rows": rows, "tuning": tune, "raw": {"kiln": kiln, "torch": torch}},
              open(sys.argv[3], "w"), indent=1)
    print("CBR fp16, forward+backward ms (median); ratios = PyTorch time / kiln time"
          + (f"; copy bandwidth {ceiling['copy_tb_s']:.2f} TB/s" if ceiling else ""))
    print(f"{'shape N,C,HW,K,k,s':<24}{'conv':>8}{'unfused':>9}{'CBR':>8}{'eager':>8}{'compile':>9}"
          f"{'xEager':>8}{'need':>6}{'xComp':>7}{'BN+ReLU kiln/torch ms':>24}{'ratio':>7}"
          f"{'  CBR with 1/2/4 slices':>24}{'  1 stream conv/CBR':>20}")
    for r in rows:
        comp = r["torch_compile_fwd_bwd_ms"]
        print(f"{','.join(map(str, r['shape'])):<24}{r['kiln_conv_fwd_bwd_ms']:8.3f}"
              f"{(r['kiln_unfused_fwd_bwd_ms'] or 0):9.3f}{r['kiln_cbr_fwd_bwd_ms']:8.3f}"
              f"{r['torch_eager_fwd_bwd_ms']:8.3f}{(comp or 0):9.3f}{r['speedup_vs_eager']:8.2f}"
              f"{r['target_vs_eager']:6.1f}{(r['speedup_vs_compile'] or 0):7.2f}"
              f"{r['bn_relu_extra_ms_kiln']:12.3f}/{(r['bn_relu_extra_ms_torch'] or 0):.3f}"
              f"{r['bn_relu_extra_ms_kiln'] / (r['bn_relu_extra_ms_torch'] or float('nan')):7.2f}  "
              + "/".join(f"{r['kiln_cbr_slices_fwd_bwd_ms'].get(n, float('nan')):.3f}" for n in ("1", "2", "4"))
              + f"  {r['kiln_conv_1stream_fwd_bwd_ms'] or float('nan'):.3f}/{r['kiln_cbr_1stream_fwd_bwd_ms'] or float('nan'):.3f}")


if __name__ == "__main__":
    main()
