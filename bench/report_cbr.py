#!/usr/bin/env python3
"""Joins kiln_cbr_bench and torch_cbr_bench.py output (JSON lines) into one results file and a
table of milliseconds and ratios against the CBR targets.

Where a target is missed, each row also says by how much and where the time goes: the bytes the
CBR's BN+ReLU passes must move, their floor at the measured copy bandwidth, and (with the stage
times of `gpu_check.sh stages`) each kernel's time and bandwidth.

usage: report_cbr.py kiln.jsonl torch.jsonl[,more.jsonl] out.json [env.json] [tune.jsonl] [stages.jsonl]
(several PyTorch files, comma-separated: e.g. max-autotune timed in a call of its own)"""
import json
import sys

# Bytes each CBR kernel moves, in units of one activation tensor A (N*Ho*Wo*K elements); the bit
# mask is A/16 for fp16/bf16 (one bit per two-byte element).
STAGE_BYTES = {
    "bn_apply_kernel": 2 + 1 / 16,            # read conv_out, write y and the mask
    "bn_backward_reduce_kernel": 2 + 1 / 16,  # read dy, conv_out, mask
    "bn_backward_apply_kernel": 3 + 1 / 16,   # read dy, conv_out, mask; write dconv
}
FLOOR_PASSES = sum(STAGE_BYTES.values())  # 7.19 A: what the CBR's BN+ReLU must move at least


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def stage_times(stages, shape, activation_bytes):
    """Per-kernel times of the CBR block for one shape, with bytes and bandwidth where known."""
    label = "cbr " + ",".join(map(str, shape))
    rows = [r for r in stages if r["label"] == label]
    applies = next((r["count"] for r in rows if r["kernel"] == "bn_apply_kernel"), None)
    out = []
    for r in rows:
        stage = {"kernel": r["kernel"], "median_us": r["median_us"], "count": r["count"]}
        if r["kernel"] in STAGE_BYTES and applies:
            slices = max(1, r["count"] // applies)  # the backward apply runs once per batch slice
            stage["bytes"] = STAGE_BYTES[r["kernel"]] * activation_bytes / slices
            stage["tb_s"] = stage["bytes"] / (r["median_us"] * 1e-6) / 1e12
        out.append(stage)
    return out


def main():
    kiln_lines = load(sys.argv[1])
    torch = [r for path in sys.argv[2].split(",") for r in load(path)]
    kiln = [r for r in kiln_lines if r.get("kind") == "block"]
    ceiling = next((r for r in kiln_lines if r.get("kind") == "ceiling"), None)
    env = json.load(open(sys.argv[4])) if len(sys.argv) > 4 else {}
    tune = load(sys.argv[5]) if len(sys.argv) > 5 else []
    stages = load(sys.argv[6]) if len(sys.argv) > 6 else []
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
        eager, comp, tuned = t[("cbr", "eager")], t.get(("cbr", "compile")), t.get(("cbr", "max-autotune"))
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
            "torch_max_autotune_fwd_ms": tuned and tuned["fwd_ms"],
            "torch_max_autotune_fwd_bwd_ms": tuned and tuned["fwd_bwd_ms"],
            "speedup_vs_max_autotune": tuned and tuned["fwd_bwd_ms"] / k["cbr"]["fwd_bwd_ms"],
            "bn_relu_extra_ms_kiln": ours_extra, "bn_relu_extra_ms_torch": torch_extra,
        }
        row["meets_eager_target"] = row["speedup_vs_eager"] >= target
        row["meets_compile_target"] = comp is None or row["speedup_vs_compile"] >= 1.0
        row["meets_max_autotune_target"] = tuned is None or row["speedup_vs_max_autotune"] >= 1.0
        row["meets_extra_target"] = torch_extra is not None and ours_extra <= 0.5 * torch_extra
        # By how much, and the floor of this design: its BN+ReLU bytes at copy bandwidth.
        ho = (hw + 2 * (kernel // 2) - kernel) // stride + 1
        activation = n * ho * ho * kk * 2  # fp16 bytes
        row["activation_bytes"] = activation
        row["eager_target_shortfall"] = max(0.0, target - row["speedup_vs_eager"])
        if torch_extra:
            row["extra_ratio"] = ours_extra / torch_extra
            row["extra_over_target_ms"] = max(0.0, ours_extra - 0.5 * torch_extra)
        if ceiling:
            floor_ms = FLOOR_PASSES * activation / (ceiling["copy_tb_s"] * 1e12) * 1e3
            row["bn_relu_floor_ms"] = floor_ms
            row["bn_relu_floor_ratio"] = floor_ms / torch_extra if torch_extra else None
            row["bn_relu_fraction_of_floor_speed"] = floor_ms / ours_extra if ours_extra > 0 else None
        if stages:
            row["stages"] = stage_times(stages, shape, activation)
        rows.append(row)
    json.dump({"env": env, "copy_ceiling": ceiling, "rows": rows, "tuning": tune, "raw": {"kiln": kiln, "torch": torch}},
              open(sys.argv[3], "w"), indent=1)
    print("CBR fp16, forward+backward ms (median); ratios = PyTorch time / kiln time"
          + (f"; copy bandwidth {ceiling['copy_tb_s']:.2f} TB/s" if ceiling else ""))
    print(f"{'shape N,C,HW,K,k,s':<24}{'conv':>8}{'unfused':>9}{'CBR':>8}{'tconv':>8}{'eager':>8}{'compile':>9}"
          f"{'autotune':>9}{'xEager':>8}{'need':>6}{'xComp':>7}{'xAuto':>7}{'BN+ReLU kiln/torch ms':>24}{'ratio':>7}")
    for r in rows:
        comp, tuned = r["torch_compile_fwd_bwd_ms"], r["torch_max_autotune_fwd_bwd_ms"]
        print(f"{','.join(map(str, r['shape'])):<24}{r['kiln_conv_fwd_bwd_ms']:8.3f}"
              f"{(r['kiln_unfused_fwd_bwd_ms'] or 0):9.3f}{r['kiln_cbr_fwd_bwd_ms']:8.3f}"
              f"{(r['torch_conv_fwd_bwd_ms'] or 0):8.3f}"
              f"{r['torch_eager_fwd_bwd_ms']:8.3f}{(comp or 0):9.3f}{(tuned or 0):9.3f}{r['speedup_vs_eager']:8.2f}"
              f"{r['target_vs_eager']:6.1f}{(r['speedup_vs_compile'] or 0):7.2f}{(r['speedup_vs_max_autotune'] or 0):7.2f}"
              f"{r['bn_relu_extra_ms_kiln']:12.3f}/{(r['bn_relu_extra_ms_torch'] or 0):.3f}"
              f"{r['bn_relu_extra_ms_kiln'] / (r['bn_relu_extra_ms_torch'] or float('nan')):7.2f}")


if __name__ == "__main__":
    main()
