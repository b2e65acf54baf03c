#!/usr/bin/env python3
"""After its default start (bounded cuDNN tuning, no plan cache), a kiln process holds no more device
memory than its memory plan, its workspaces and the libraries' own state.

Runs `kiln bench` for each model, fp16, on the GPU alone (device memory is measured device-wide, so
nothing else may run on the GPU meanwhile: scripts/gpu_check.sh runs this after the test shards),
and fails when the device memory the run added exceeds planned + workspace + ALLOWANCE.

ALLOWANCE, 1 GiB: the CUDA context is made before kiln bench's first reading, so what remains is
cuDNN's and cuBLASLt's handles and the kernels loaded for the chosen plans, 0.1-0.2 GiB measured on
the H200 (docs/results.md); tuning that kept the plans it tried, or their scratch tensors, left
8.5 GiB behind for ResNet-50 before tuning was bounded, far above it.

Usage: check_prepare_memory.py KILN_BINARY OUT.jsonl [MODEL...]"""
import json
import subprocess
import sys

ALLOWANCE = 1 << 30


def main():
    kiln, out = sys.argv[1], sys.argv[2]
    models = sys.argv[3:] or ["resnet50", "vgg16_bn"]
    failed = False
    for model in models:
        cmd = [kiln, "bench", "--device", "cuda", "--model", model, "--batch", "128", "--precision", "fp16",
               "--steps", "5", "--warmup", "2", "--plan-cache", "none", "--json", out]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            print(f"prepare memory: {model}: kiln bench failed ({run.returncode}): {run.stderr.strip()[-500:]}")
            failed = True
            continue
        with open(out) as f:
            r = [json.loads(line) for line in f if line.strip()][-1]
        bound = r["planned_bytes"] + r["workspace_bytes"] + ALLOWANCE
        gib = 1 << 30
        ok = r["device_bytes"] <= bound
        print(f"prepare memory: {model}: device {r['device_bytes'] / gib:.2f} GiB, planned "
              f"{r['planned_bytes'] / gib:.2f} + workspace {r['workspace_bytes'] / gib:.2f} + allowance "
              f"{ALLOWANCE / gib:.2f} = {bound / gib:.2f} GiB: {'ok' if ok else 'EXCEEDED'} "
              f"(first step after {r['first_step_seconds']:.1f} s)")
        failed |= not ok
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
