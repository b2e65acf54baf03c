#!/usr/bin/env python3
"""PyTorch side of the CBR benchmark, written as an expert PyTorch user's layer runs inside an AMP
network (bench/README.md states the rules): Conv2d(bias=False) + BatchNorm2d + ReLU in training
mode, channels_last, autocast fp16 (or bf16), the input already fp16/bf16 channels_last (the
previous layer's output), dX computed and every gradient set to None after each backward (never
accumulated), cudnn.benchmark on. Times the convolution alone and the block, eager and
torch.compile (default mode; max-autotune-no-cudagraphs on request), each compiled fresh per
shape; forward and forward+backward, timed as kiln_cbr_bench times (host clock to a device
synchronize), median of interleaved rounds after warm-up.
Prints one JSON object per line, like kiln_cbr_bench."""
import argparse
import copy
import json
import statistics
import time

import torch

SHAPES = [(256, 64, 224, 64, 3, 1), (256, 128, 112, 128, 3, 1), (256, 256, 56, 256, 3, 1),
          (256, 512, 28, 512, 3, 1), (256, 64, 56, 64, 3, 1), (256, 64, 56, 256, 1, 1),
          (256, 256, 56, 64, 1, 1), (256, 256, 14, 256, 3, 1)]

# Modes of torch.compile by the names the results use.
COMPILE_MODES = {"compile": "default", "max-autotune": "max-autotune-no-cudagraphs"}


def time_interleaved_ms(fns, warmup, iters):
    """Milliseconds per call of each function, interleaved: every round times one group of 3
    calls of each in turn, so that clock and temperature drift weighs on all alike (the BN+ReLU
    cost is a difference of two such times); median over `iters` rounds after warm-up.
    The clock is kiln_cbr_bench's: the host's monotonic clock from the first launch to a full
    device synchronize (kiln's step runs on several streams, which events on one stream would
    not cover), so both sides are timed the same way."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    samples = [[] for _ in fns]
    for _ in range(iters):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            samples[i].append((time.perf_counter() - start) * 1e3 / 3)
    return [statistics.median(v) for v in samples]


def step_functions(module, x, dy, dtype):
    """A training-mode forward, and a forward+backward that leaves no gradient behind: x.grad and
    every parameter's grad are set to None after each backward (zero_grad(set_to_none=True)), so
    every backward writes fresh gradients as kiln's does and nothing accumulates."""
    params = list(module.parameters())

    def fwd():
        with torch.autocast("cuda", dtype=dtype):
            return module(x)

    def fwd_bwd():
        fwd().backward(dy)
        x.grad = None
        for p in params:
            p.grad = None

    return fwd, fwd_bwd


def check_same_work(x, dy, dtype):
    """The work must match kiln's: input and output gradient already in the compute dtype and
    channels_last, and dX computed."""
    for t in (x, dy):
        assert t.dtype == dtype and t.is_contiguous(memory_format=torch.channels_last), t.dtype
    assert x.requires_grad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--modes", default="eager,compile",
                    help="comma-separated: eager, compile, max-autotune (torch.compile mode "
                         "max-autotune-no-cudagraphs, minutes of tuning per shape)")
    ap.add_argument("shapes", nargs="*", help="N,C,HW,K,kernel,stride (default: the eight CBR shapes)")
    args = ap.parse_args()
    modes = args.modes.split(",")
    unknown = set(modes) - {"eager", *COMPILE_MODES}
    if unknown:
        ap.error(f"unknown mode(s) {sorted(unknown)}: use eager, compile, max-autotune")
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] or SHAPES
    dtype = torch.float16 if args.precision == "fp16" else torch.bfloat16
    torch.backends.cudnn.benchmark = True
    for n, c, hw, k, kernel, stride in shapes:
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(c, k, kernel, stride, kernel // 2, bias=False)
        block = torch.nn.Sequential(conv, torch.nn.BatchNorm2d(k), torch.nn.ReLU())
        block = block.cuda().to(memory_format=torch.channels_last).train()
        # The previous layer's fp16/bf16 channels_last output: no cast inside the timed step.
        x = torch.randn(n, c, hw, hw, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
        x.requires_grad_(True)
        with torch.no_grad(), torch.autocast("cuda", dtype=dtype):
            out_shape = block(x).shape
        dy = torch.randn(out_shape, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
        check_same_work(x, dy, dtype)
        variants = []
        if "eager" in modes:
            variants += [("conv", "eager", conv), ("cbr", "eager", block)]
        # A fresh compile per shape (no cached graph or recompile limit carries over from the
        # last shape), and a module of its own per mode, so no mode reuses another's graph.
        torch._dynamo.reset()
        for mode in (m for m in modes if m in COMPILE_MODES):
            variants.append(("cbr", mode, torch.compile(copy.deepcopy(block), mode=COMPILE_MODES[mode])))
        fwds, fwd_bwds = [], []
        for _, _, module in variants:
            fwd, fwd_bwd = step_functions(module, x, dy, dtype)
            fwds.append(fwd)
            fwd_bwds.append(fwd_bwd)
        f = time_interleaved_ms(fwds, args.warmup, args.iters)
        fb = time_interleaved_ms(fwd_bwds, args.warmup, args.iters)
        for i, (variant, mode, _) in enumerate(variants):
            print(json.dumps({"kind": "block", "impl": "torch", "mode": mode, "variant": variant,
                              "precision": args.precision, "shape": [n, c, hw, k, kernel, stride],
                              "fwd_ms": round(f[i], 4), "fwd_bwd_ms": round(fb[i], 4)}), flush=True)
        del x, dy, block, conv, variants, fwds, fwd_bwds
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
