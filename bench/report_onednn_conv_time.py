#!/usr/bin/env python3
"""How much of a CPU training step is oneDNN's convolutions, on each side (bench/cpu_conv_share.sh).

Reads ONEDNN_VERBOSE=1 logs of kiln and of PyTorch training the same network, sums the
`exec` times of the convolutions (forward, backward data, backward weights) and of the reorders,
and divides by the steps the log covers: the images the first layer's forward convolution saw
(kiln runs a batch in pieces, PyTorch whole) over the batch. At one thread the summed times are
the step's time in those kernels; beside each side's median step (its --json line) that gives
the rest of the step and the most kiln can gain over PyTorch while both run the same kernels:
PyTorch's step over kiln's convolutions alone.

  report_onednn_conv_time.py <kiln log> <kiln json> <torch log> <torch json> <batch> [--out F]
"""
import argparse
import collections
import json
import re

PROBLEM = re.compile(r"mb(\d+)_(.*)")


def exec_rows(path):
    """(primitive kind, propagation, problem without the batch, images, ms) of each exec line, in
    either of oneDNN 3.x's verbose formats ("onednn_verbose,exec,..." and
    "onednn_verbose,v1,primitive,exec,...")."""
    for line in open(path, errors="replace"):
        fields = line.strip().split(",")
        if len(fields) < 8 or "exec" not in fields[:5] or "info" in fields[:5]:
            continue
        at = fields.index("exec")
        kind, prop, problem = fields[at + 2], fields[at + 4], fields[-2]
        try:
            ms = float(fields[-1])
        except ValueError:
            continue
        m = PROBLEM.match(problem)
        images = int(m.group(1)) if m else 0
        yield kind, prop, (m.group(2) if m else problem), images, ms


def input_height(problem):
    """The input height (ih) of a oneDNN problem string, 0 where it names none."""
    m = re.search(r"ih(\d+)", problem)
    return int(m.group(1)) if m else 0


def side(log, json_path, batch):
    rows = list(exec_rows(log))
    convs = [r for r in rows if r[0] == "convolution"]
    if not convs:
        raise SystemExit(f"{log}: no oneDNN convolution exec lines; was it run with ONEDNN_VERBOSE=1?")
    forward = [r for r in convs if r[1] == "forward_training"]
    # The first layer's forward problem: the one with the largest input height (its images, summed
    # over the log, count the steps).
    first = max({r[2] for r in forward}, key=input_height)
    steps = sum(r[3] for r in forward if r[2] == first) / batch
    ms = collections.defaultdict(float)
    for kind, prop, _, _, t in rows:
        ms[prop if kind == "convolution" else kind] += t / steps
    median = [json.loads(l) for l in open(json_path) if l.strip()][-1]["median_step_ms"]
    conv = sum(v for k, v in ms.items() if k in ("forward_training", "backward_data", "backward_weights"))
    return {"steps_in_log": steps, "ms_per_step": dict(ms), "convolutions_ms": conv, "median_step_ms": median,
            "rest_ms": median - conv - ms.get("reorder", 0.0)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kiln_log"), p.add_argument("kiln_json"), p.add_argument("torch_log"), p.add_argument("torch_json")
    p.add_argument("batch", type=int)
    p.add_argument("--out")
    a = p.parse_args()
    result = {"kiln": side(a.kiln_log, a.kiln_json, a.batch), "pytorch": side(a.torch_log, a.torch_json, a.batch)}
    k, t = result["kiln"], result["pytorch"]
    result["kiln_over_pytorch"] = t["median_step_ms"] / k["median_step_ms"]
    result["ceiling_same_convolutions"] = t["median_step_ms"] / k["convolutions_ms"]
    print("| | kiln | PyTorch |\n| --- | --- | --- |")
    for key in ("forward_training", "backward_data", "backward_weights", "reorder"):
        print(f"| {key} | {k['ms_per_step'].get(key, 0):.1f} ms | {t['ms_per_step'].get(key, 0):.1f} ms |")
    print(f"| convolutions | {k['convolutions_ms']:.1f} ms | {t['convolutions_ms']:.1f} ms |")
    print(f"| median step | {k['median_step_ms']:.1f} ms | {t['median_step_ms']:.1f} ms |")
    print(f"| the rest | {k['rest_ms']:.1f} ms | {t['rest_ms']:.1f} ms |")
    print(f"kiln ÷ PyTorch {result['kiln_over_pytorch']:.2f}; with the rest of kiln's step at zero it would be "
          f"{result['ceiling_same_convolutions']:.2f} (PyTorch's step over kiln's convolutions)")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
