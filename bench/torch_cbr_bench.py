#!/usr/bin/env python3
"""PyTorch side of the CBR benchmark: Conv2d(bias=False) + BatchNorm2d + ReLU, channels_last,
autocast fp16 (or bf16), training mode. Times conv alone and the block, eager and torch.compile,
forward and forward+backward (dX included), median of many runs after warm-up, CUDA events; the
variants of one shape are timed interleaved.
Prints one JSON object per line, like kiln_cbr_bench."""
import argparse
import json
import statistics

import torch

SHAPES = [(256, 64, 224, 64, 3, 1), (256, 128, 112, 128, 3, 1), (256, 256, 56, 256, 3, 1),
          (256, 512, 28, 512, 3, 1), (256, 64, 56, 64, 3, 1), (256, 64, 56, 256, 1, 1),
          (256, 256, 56, 64, 1, 1), (256, 256, 14, 256, 3, 1)]


def time_interleaved_ms(fns, warmup, iters):
    """Milliseconds per call of each function, interleaved: every round times one group of 3
    calls of each in turn, so that clock and temperature drift weighs on all alike (the BN+ReLU
    cost is a difference of two such times); median over `iters` rounds after warm-up."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    samples = [[] for _ in fns]
    for _ in range(iters):
        for i, fn in enumerate(fns):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(3):
                fn()
            end.record()
            end.synchronize()
            samples[i].append(start.elapsed_time(end) / 3)
    return [statistics.median(v) for v in samples]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--precision", default="fp16", choices=["fp16", "bf16"])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("shapes", nargs="*")
    args = ap.parse_args()
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes] or SHAPES
    dtype = torch.float16 if args.precision == "fp16" else torch.bfloat16
    torch.backends.cudnn.benchmark = True
    for n, c, hw, k, kernel, stride in shapes:
        conv = torch.nn.Conv2d(c, k, kernel, stride, kernel // 2, bias=False)
        block = torch.nn.Sequential(conv, torch.nn.BatchNorm2d(k), torch.nn.ReLU())
        block = block.cuda().to(memory_format=torch.channels_last).train()
        x = torch.randn(n, c, hw, hw, device="cuda").to(memory_format=torch.channels_last)
        x.requires_grad_(True)
        with torch.no_grad(), torch.autocast("cuda", dtype=dtype):
            out_shape = block(x).shape
        dy = torch.randn(out_shape, device="cuda", dtype=dtype).to(memory_format=torch.channels_last)
        variants = [("conv", "eager", conv), ("cbr", "eager", block)]
        if not args.no_compile:
            variants.append(("cbr", "compile", torch.compile(block)))
        fwds, fwd_bwds = [], []
        for variant, mode, module in variants:
            def fwd(module=module):
                with torch.autocast("cuda", dtype=dtype):
                    return module(x)

            def fwd_bwd(fwd=fwd):
                fwd().backward(dy)

            fwds.append(fwd)
            fwd_bwds.append(fwd_bwd)
        f = time_interleaved_ms(fwds, args.warmup, args.iters)
        fb = time_interleaved_ms(fwd_bwds, args.warmup, args.iters)
        for i, (variant, mode, _) in enumerate(variants):
            print(json.dumps({"kind": "block", "impl": "torch", "mode": mode, "variant": variant,
                              "precision": args.precision, "shape": [n, c, hw, k, kernel, stride],
                              "fwd_ms": round(f[i], 4), "fwd_bwd_ms": round(fb[i], 4)}), flush=True)
        del x, dy, block, conv
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
