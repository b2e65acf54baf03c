#!/usr/bin/env python3
"""PyTorch side of the data-parallel whole-network benchmark (`kiln bench` on several GPUs), one
process per GPU under torchrun, written as an expert PyTorch user trains (bench/README.md states
the rules); everything a rank does is torch_models.py's step: the torchvision model, channels_last,
synthetic inputs already on the GPU (fp32 by default, as `kiln bench` writes them and a data loader
delivers them; --input-dtype compute makes them fp16/bf16), random labels, autocast fp16 with
GradScaler (bf16: autocast, no scaler), SGD momentum 0.9 Nesterov weight decay 1e-4 fused (foreach
under GradScaler, torch_training.nesterov_sgd), gradients set to None every step, cudnn.benchmark on.
Data parallel: DistributedDataParallel over NCCL (device LOCAL_RANK, gradient_as_bucket_view,
static_graph in eager, BatchNorm buffers not broadcast every step unless --broadcast-buffers: kiln
keeps each rank's running statistics after the starting state from rank 0), every rank its own
batch of --batch images. Modes: eager, torch.compile (default), max-autotune
(max-autotune-no-cudagraphs), each a fresh model whose DDP wrapper is compiled (DDPOptimizer splits
the graph at the gradient buckets). Each rank times every step as `kiln bench` does (host clock
from the first launch to a full device synchronize); rank 0's median after warm-up gives
images/s = batch * world / median, and rank 0 prints one JSON object per model and mode.

Run: torchrun --standalone --nproc-per-node 2 bench/torch_ddp.py --models resnet50,vgg16_bn --precision fp16"""
import os

# NVLink multicast (NVLS) stays off on the shared machines; set before NCCL reads its environment.
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")

import argparse  # noqa: E402
import datetime  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # torch_models, torch_training beside this file

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torchvision  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from torch_models import COMPILE_MODES, DTYPES, MODELS, make_step  # noqa: E402
from torch_training import nesterov_sgd  # noqa: E402


def nccl_version():
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # a build without NCCL: init_process_group("nccl") has failed before this
        return None
    return ".".join(str(p) for p in v) if isinstance(v, tuple) else str(v)


def gather(obj):
    """Every rank's `obj`, in rank order (outside the timed steps)."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def run(name, mode, args, rank, world, device):
    torch.manual_seed(1)  # the same initial weights everywhere (DDP broadcasts rank 0's all the same)
    dtype = DTYPES[args.precision]
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    free_before = torch.cuda.mem_get_info(device)[0]
    model = MODELS[name]().to(device).to(memory_format=torch.channels_last).train()
    static_graph = args.static_graph == "on" or (args.static_graph == "auto" and mode == "eager")
    # channels_last before wrapping: the gradient buckets take each parameter's strides at construction.
    ddp = DistributedDataParallel(model, device_ids=[device.index], output_device=device.index,
                                  broadcast_buffers=args.broadcast_buffers, bucket_cap_mb=args.bucket_cap_mb,
                                  gradient_as_bucket_view=True, static_graph=static_graph)
    scaler = torch.amp.GradScaler("cuda") if dtype == torch.float16 else None
    optimizer, implementation = nesterov_sgd(ddp.parameters(), lr=0.01, weight_decay=1e-4,
                                             grad_scaler=scaler is not None)
    # Every rank its own batch (kiln: seed + rank), drawn on the GPU.
    g = torch.Generator(device=device).manual_seed(1 + rank)
    input_dtype = dtype if args.input_dtype == "compute" else torch.float32
    x = torch.randn(args.batch, 3, args.size, args.size, device=device, generator=g, dtype=input_dtype)
    x = x.contiguous(memory_format=torch.channels_last)
    classes = 10 if name.endswith("_cifar") else 1000
    y = torch.randint(0, classes, (args.batch,), device=device, generator=g)
    net = ddp
    if mode != "eager":
        torch._dynamo.reset()
        net = torch.compile(ddp, mode=COMPILE_MODES[mode])  # the DDP-wrapped model, as PyTorch recommends
    step = make_step(net, optimizer, scaler, x, y, dtype)
    first_loss = float(step())  # float() waits for the step
    torch.cuda.synchronize(device)
    first_step_seconds = time.perf_counter() - start
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize(device)
    dist.barrier(device_ids=[device.index])  # the ranks start the timed steps together
    torch.cuda.synchronize(device)
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize(device)
        times.append((time.perf_counter() - t0) * 1e3)
    median = statistics.median(times)
    mine = {"rank": rank, "median_step_ms": median, "first_loss": first_loss, "last_loss": float(loss),
            "max_memory_allocated": torch.cuda.max_memory_allocated(device),
            "max_memory_reserved": torch.cuda.max_memory_reserved(device),
            "device_bytes": free_before - torch.cuda.mem_get_info(device)[0],
            "gpu": torch.cuda.get_device_name(device)}
    ranks = gather(mine)
    bad = [r for r in ranks if not math.isfinite(r["last_loss"])]
    if bad:
        # A diverged run is not the work kiln's side does; its time would not count (every rank stops).
        raise SystemExit(f"{name} {mode} {args.precision}: the loss is {bad[0]['last_loss']} on rank {bad[0]['rank']} "
                         f"after {args.warmup + args.steps + 1} steps; this PyTorch run diverged, its time does not count")
    result = {"framework": "pytorch", "mode": mode, "model": name, "precision": args.precision,
              "batch": args.batch, "per_gpu_batch": args.batch, "world": world, "global_batch": args.batch * world,
              "size": args.size, "input_dtype": str(input_dtype).replace("torch.", ""),
              "optimizer": implementation, "ddp": {
                  "static_graph": static_graph, "gradient_as_bucket_view": True,
                  "broadcast_buffers": args.broadcast_buffers,
                  "bucket_cap_mb": args.bucket_cap_mb if args.bucket_cap_mb is not None else 25,
                  "optimize_ddp": torch._dynamo.utils.get_optimize_ddp_mode() if mode != "eager" else None},
              # rank 0's steps, as `kiln bench` reports its own; images_per_second is the global
              # batch's, as kiln's data-parallel `images_per_second` is (batch * ranks / median)
              "images_per_second": args.batch * world / (median * 1e-3),
              "global_images_per_second": args.batch * world / (median * 1e-3),
              "per_gpu_images_per_second": args.batch / (median * 1e-3),
              "median_step_ms": median, "step_ms": times,
              "rank_median_step_ms": [r["median_step_ms"] for r in ranks],
              "first_step_seconds": first_step_seconds,
              "max_memory_allocated": mine["max_memory_allocated"],
              "max_memory_reserved": mine["max_memory_reserved"],
              "device_bytes": mine["device_bytes"],
              "max_memory_allocated_per_rank": [r["max_memory_allocated"] for r in ranks],
              "max_memory_reserved_per_rank": [r["max_memory_reserved"] for r in ranks],
              "device_bytes_per_rank": [r["device_bytes"] for r in ranks],
              "first_loss": first_loss, "last_loss": float(loss),
              "last_loss_per_rank": [r["last_loss"] for r in ranks],
              "device": "cuda", "gpu": mine["gpu"], "gpus": [r["gpu"] for r in ranks],
              "torch": torch.__version__, "torchvision": torchvision.__version__, "cuda": torch.version.cuda,
              "cudnn": torch.backends.cudnn.version(), "nccl": nccl_version(),
              "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE")}
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="resnet50,vgg16_bn", help="comma-separated: " + ", ".join(sorted(MODELS)))
    parser.add_argument("--batch", type=int, default=256, help="images per GPU (the global batch is batch * world)")
    parser.add_argument("--precision", choices=sorted(DTYPES), default="fp16")
    parser.add_argument("--modes", default="eager,compile", help="eager, compile, max-autotune (comma-separated)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--input-dtype", choices=["fp32", "compute"], default="fp32",
                        help="fp32: inputs as `kiln bench` writes them and a loader delivers them, cast by autocast "
                             "in the first layer (default); compute: already in the --precision dtype")
    parser.add_argument("--static-graph", choices=["auto", "on", "off"], default="auto",
                        help="DDP static_graph: auto = on in eager, off under torch.compile (DDPOptimizer already "
                             "splits the graph at the buckets; static_graph is not needed there)")
    parser.add_argument("--broadcast-buffers", action="store_true",
                        help="DDP broadcasts rank 0's BatchNorm buffers before every forward (PyTorch's default); "
                             "off by default, as kiln keeps each rank's running statistics")
    parser.add_argument("--bucket-cap-mb", type=int, default=None, help="DDP bucket size in MiB (default: DDP's 25)")
    parser.add_argument("--output", default=None, help="also append rank 0's JSON lines to this file")
    args = parser.parse_args()
    modes = args.modes.split(",")
    models = args.models.split(",")
    for mode in modes:
        if mode != "eager" and mode not in COMPILE_MODES:
            parser.error(f"unknown mode {mode!r}: use eager, compile or max-autotune")
    for name in models:
        if name not in MODELS:
            parser.error(f"unknown model {name!r}: use {', '.join(sorted(MODELS))}")
    if args.steps < 1 or args.warmup < 0 or args.batch < 1:
        parser.error("--steps and --batch must be >= 1 and --warmup >= 0")
    if "LOCAL_RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        parser.error("run it under torchrun, one process per GPU: "
                     "torchrun --standalone --nproc-per-node 2 bench/torch_ddp.py [options]")
    if not torch.cuda.is_available():
        raise SystemExit("torch_ddp.py: no CUDA device; data-parallel training here needs one GPU per rank")

    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device, timeout=datetime.timedelta(minutes=30))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 as kiln's (torch_models.py does the same)
    torch.backends.cudnn.allow_tf32 = False
    try:
        for name in models:
            for mode in modes:
                result = run(name, mode, args, rank, world, device)
                if rank == 0:
                    line = json.dumps(result)
                    print(line, flush=True)
                    if args.output:
                        with open(args.output, "a") as f:
                            f.write(line + "\n")
                # The next run starts from a clean device: drop the compiled graphs (they hold the
                # model) and the cached blocks, so its memory peak is its own.
                torch._dynamo.reset()
                gc.collect()
                torch.cuda.empty_cache()
                dist.barrier(device_ids=[local_rank])
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
