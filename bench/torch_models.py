#!/usr/bin/env python3
"""PyTorch side of the whole-network benchmark (`kiln bench`), written as an expert PyTorch user
trains (bench/README.md states the rules): the torchvision model, channels_last, synthetic inputs
already on the GPU (fp32, as a data loader delivers them; autocast casts them in the first
layer), autocast fp16 with GradScaler (bf16: autocast, no scaler; fp32: neither, TF32 off as
kiln's fp32 is), SGD momentum 0.9 Nesterov weight decay 1e-4 with the fused implementation
(foreach under GradScaler, see torch_training.nesterov_sgd), gradients set to None every step, cudnn.benchmark on. Modes: eager,
torch.compile (default), max-autotune (max-autotune-no-cudagraphs), each a fresh model compiled
for this shape. A step is forward + loss + backward + optimizer; timed as `kiln bench` times
(host clock from the first launch to a full device synchronize, per step), median of the timed
steps after warm-up (compilation happens in the warm-up). Prints one JSON object per mode."""
import argparse
import contextlib
import json
import math
import statistics
import time

import torch
import torchvision

from torch_training import backward_and_update, nesterov_sgd
from torch_zoo import VggCifar, resnet_cifar, torchvision_model

# kiln's 32x32 zoo variants (torch_zoo.py) with their 10 classes; every other name is torchvision's
# model of that name (kiln's zoo uses torchvision's names).
MODELS = {"resnet18_cifar": lambda: resnet_cifar("resnet18"), "vgg16_bn_cifar": VggCifar}


def build(name):
    if name in MODELS:
        return MODELS[name]()
    return torchvision_model(name)
COMPILE_MODES = {"compile": "default", "max-autotune": "max-autotune-no-cudagraphs"}
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def make_step(model, optimizer, scaler, x, y, dtype):
    loss_fn = torch.nn.CrossEntropyLoss()
    autocast = dtype != torch.float32

    def step():
        # fp32 takes no autocast context (PyTorch 1.13's CPU autocast refuses even a disabled float32 one)
        with torch.autocast(x.device.type, dtype=dtype) if autocast else contextlib.nullcontext():
            loss = loss_fn(model(x), y)
        backward_and_update(loss, optimizer, scaler)
        return loss.detach()

    return step


def cpu_conv_math():
    """fp32 or bf16: the products of the CPU's fp32 convolutions (PyTorch before 2.9 has only fp32)."""
    conv = getattr(torch.backends.mkldnn, "conv", None)
    return "bf16" if getattr(conv, "fp32_precision", "ieee") == "bf16" else "fp32"


def run(name, mode, batch, precision, warmup, steps, size, device="cuda"):
    torch.manual_seed(1)
    dtype = DTYPES[precision]
    cuda = device == "cuda"
    synchronize = torch.cuda.synchronize if cuda else (lambda: None)  # the CPU runs synchronously
    start = time.perf_counter()
    free_before = torch.cuda.mem_get_info()[0] if cuda else 0
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    model = build(name).to(device).to(memory_format=torch.channels_last).train()
    scaler = torch.amp.GradScaler("cuda") if dtype == torch.float16 and cuda else None
    optimizer, implementation = nesterov_sgd(model.parameters(), lr=0.01, weight_decay=1e-4,
                                             grad_scaler=scaler is not None)
    x = torch.randn(batch, 3, size, size, device=device).to(memory_format=torch.channels_last)
    y = torch.randint(0, 10 if name.endswith("_cifar") else 1000, (batch,), device=device)
    if mode != "eager":
        torch._dynamo.reset()
        model = torch.compile(model, mode=COMPILE_MODES[mode])
    step = make_step(model, optimizer, scaler, x, y, dtype)
    first_loss = float(step())
    synchronize()
    first_step_seconds = time.perf_counter() - start
    for _ in range(warmup):
        step()
    synchronize()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    median = statistics.median(times)
    if not math.isfinite(float(loss)):
        # A diverged run is not the work kiln's side does; its time would not count.
        raise SystemExit(f"{name} {mode} {precision}: the loss is {float(loss)} after {warmup + steps + 1} steps; "
                         "this PyTorch run diverged, its time does not count")
    return {"framework": "pytorch", "mode": mode, "model": name, "precision": precision, "batch": batch,
            "optimizer": implementation, "images_per_second": batch / (median * 1e-3), "median_step_ms": median,
            "step_ms": times, "first_step_seconds": first_step_seconds,
            "max_memory_allocated": torch.cuda.max_memory_allocated() if cuda else None,
            "device_bytes": free_before - torch.cuda.mem_get_info()[0] if cuda else None,
            "first_loss": first_loss, "last_loss": float(loss), "device": device,
            "threads": torch.get_num_threads(), "torch": torch.__version__,
            "cpu_conv_math": None if cuda else cpu_conv_math(),
            "cudnn": torch.backends.cudnn.version() if cuda else None}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a torchvision model name, or resnet18_cifar / vgg16_bn_cifar")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--precision", choices=sorted(DTYPES), default="fp16")
    parser.add_argument("--modes", default="eager,compile", help="eager, compile, max-autotune (comma-separated)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (torch.set_num_threads); 0: the default")
    parser.add_argument("--cpu-conv-math", choices=["fp32", "bf16"], default="fp32",
                        help="bf16: fp32 convolutions on the CPU with bf16 products "
                             "(torch.backends.mkldnn.conv.fp32_precision = 'bf16', PyTorch 2.9+), as kiln's "
                             "--cpu-kernels onednn-bf16")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.cpu_conv_math == "bf16":
        torch.backends.mkldnn.conv.fp32_precision = "bf16"
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for mode in args.modes.split(","):
        if mode != "eager" and mode not in COMPILE_MODES:
            parser.error(f"unknown mode {mode!r}: use eager, compile or max-autotune")
        result = run(args.model, mode, args.batch, args.precision, args.warmup, args.steps, args.size, args.device)
        print(json.dumps(result), flush=True)
        if args.device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
