#!/usr/bin/env python3
"""PyTorch side of the digits recipe (scripts/demo.sh, `gpu_check.sh digits`), written as an expert
PyTorch user trains a tiny data set (bench/README.md states the rules): the four IDX files parsed
with numpy, all 4,000 train and 1,000 test images resident on the GPU, normalized with the training
set's per-channel mean/std as kiln does, channels_last. Every epoch draws a fresh permutation and
the crops (±1, padded with pixel value 0 before normalization, as kiln's loader and torchvision
pad) on the GPU in one gather, then runs 62 steps of 64 (the last partial batch dropped, as kiln
does). The model is zoo.cpp's digits_cnn: 4 Conv(bias=False)+BN+ReLU (32, 32, pool, 64, 64, pool),
FC 128 + ReLU + dropout 0.25, FC 10; convs Kaiming normal (fan_out, ReLU), linears PyTorch's
default (kiln's uniform fan-in). SGD lr 0.05 momentum 0.9 Nesterov weight decay 5e-4, fused
(else foreach), cosine per step to 0 over all epochs, cross-entropy with label smoothing 0.1,
gradients set to None, cudnn.benchmark on; fp16: autocast + GradScaler, bf16: autocast, fp32:
neither, TF32 off as kiln's fp32 is. Modes: eager, compile (torch.compile default mode),
reduce-overhead (CUDA Graphs), max-autotune (max-autotune-no-cudagraphs); each a fresh model
after torch._dynamo.reset(), compiled with dynamic=False (two fixed shapes: train 64, test 1000).
An epoch is the training steps then the test-set evaluation (eval mode, 1000 images at once),
timed by the host clock up to a full synchronize; epochs per second over epochs 2..E (the first
holds compilation and cuDNN tuning). Prints one JSON object per mode on stdout, progress on
stderr."""
import argparse
import contextlib
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
from torch import nn

from torch_training import backward_and_update, nesterov_sgd

COMPILE_MODES = {"compile": "default", "reduce-overhead": "reduce-overhead",
                 "max-autotune": "max-autotune-no-cudagraphs"}
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
BATCH, CROP_PAD, LR, MOMENTUM, WEIGHT_DECAY, LABEL_SMOOTHING = 64, 1, 0.05, 0.9, 5e-4, 0.1


def log(message):
    print(message, file=sys.stderr, flush=True)


def read_idx(path, magic):
    """One IDX file (big-endian magic 0x000008nn, nn dimension sizes, raw uint8) as a numpy array."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or struct.unpack(">I", data[:4])[0] != magic:
        sys.exit(f"{path}: not an IDX file with magic 0x{magic:08x} (gzipped, or images and labels swapped?)")
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    dims = struct.unpack(f">{ndim}I", data[4:header])
    if len(data) != header + math.prod(dims):
        sys.exit(f"{path}: {len(data)} bytes, its header {dims} promises {header + math.prod(dims)}")
    return np.frombuffer(data, dtype=np.uint8, offset=header).reshape(dims)


def load_split(directory, prefix):
    images = read_idx(os.path.join(directory, f"{prefix}-images-idx3-ubyte"), 0x00000803)
    labels = read_idx(os.path.join(directory, f"{prefix}-labels-idx1-ubyte"), 0x00000801)
    if len(images) != len(labels):
        sys.exit(f"{directory}: {prefix} holds {len(images)} images but {len(labels)} labels")
    return images[..., None], labels  # NHWC, one channel


class Data:
    """Both sets resident on the device, normalized as kiln does: (pixel/255 - mean[c]) / std[c]
    with the training set's mean and population std. The training images are kept padded by
    CROP_PAD with pixel value 0 (normalized: -mean/std), NHWC, so an epoch's crops are one gather."""

    def __init__(self, directory, device):
        train_x, train_y = load_split(directory, "train")
        test_x, test_y = load_split(directory, "t10k")
        pixels = train_x.reshape(-1, train_x.shape[-1]).astype(np.float64) / 255.0
        mean, std = pixels.mean(axis=0), pixels.std(axis=0)
        self.mean, self.std = mean.tolist(), std.tolist()

        def normalize(x):
            return torch.from_numpy(((x / 255.0 - mean) / std).astype(np.float32))

        p = CROP_PAD
        padded = np.zeros((len(train_x), train_x.shape[1] + 2 * p, train_x.shape[2] + 2 * p, train_x.shape[3]),
                          dtype=np.uint8)
        padded[:, p:p + train_x.shape[1], p:p + train_x.shape[2]] = train_x
        self.train_padded = normalize(padded).to(device)  # N, H+2p, W+2p, C contiguous (channels_last)
        self.train_y = torch.from_numpy(train_y.astype(np.int64)).to(device)
        # NCHW view of NHWC memory: channels_last.
        self.test_x = normalize(test_x).to(device).permute(0, 3, 1, 2)
        self.test_y = torch.from_numpy(test_y.astype(np.int64)).to(device)
        self.height, self.width, self.channels = train_x.shape[1:]
        self.rows = torch.arange(self.height, device=device)
        self.cols = torch.arange(self.width, device=device)

    def epoch(self, steps, generator):
        """Shuffled, cropped images of one epoch (steps * BATCH of them, channels_last NCHW) and labels."""
        n = steps * BATCH
        index = torch.randperm(len(self.train_y), device=self.train_y.device, generator=generator)[:n]
        offset = torch.randint(0, 2 * CROP_PAD + 1, (2, n), device=index.device, generator=generator)
        rows = (offset[0, :, None] + self.rows)[:, :, None]  # n, H, 1
        cols = (offset[1, :, None] + self.cols)[:, None, :]  # n, 1, W
        x = self.train_padded[index[:, None, None], rows, cols]  # n, H, W, C
        return x.permute(0, 3, 1, 2), self.train_y[index]


def digits_cnn(channels=1, height=20, width=20, classes=10):
    """zoo.cpp's digits_cnn."""
    def cbr(cin, cout):
        return [nn.Conv2d(cin, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

    model = nn.Sequential(*cbr(channels, 32), *cbr(32, 32), nn.MaxPool2d(2, 2),
                          *cbr(32, 64), *cbr(64, 64), nn.MaxPool2d(2, 2),
                          nn.Flatten(), nn.Linear(64 * (height // 4) * (width // 4), 128), nn.ReLU(inplace=True),
                          nn.Dropout(0.25), nn.Linear(128, classes))
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return model


def run(data, mode, precision, epochs, seed, device):
    dtype = DTYPES[precision]
    cuda = device.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()

    if mode != "eager":  # eager needs no reset (and PyTorch before 2.0 has no dynamo)
        torch._dynamo.reset()
    torch.manual_seed(seed)
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    model = digits_cnn(data.channels, data.height, data.width).to(device).to(memory_format=torch.channels_last)
    scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None
    optimizer, implementation = nesterov_sgd(model.parameters(), LR, WEIGHT_DECAY, MOMENTUM,
                                             grad_scaler=scaler is not None)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=LABEL_SMOOTHING)
    autocast = dtype != torch.float32

    def cast_context():  # fp32 takes none (PyTorch 1.13's CPU autocast refuses even a disabled float32 one)
        return torch.autocast(device.type, dtype=dtype) if autocast else contextlib.nullcontext()
    graphs = mode == "reduce-overhead"
    if mode != "eager":
        model = torch.compile(model, mode=COMPILE_MODES[mode], dynamic=False)
    steps = len(data.train_y) // BATCH  # drop_last, as kiln's loader
    total = steps * epochs
    # kiln's cosine: lr at optimizer step s (from 0) is lr/2 (1 + cos(pi s / total)).
    lrs = [0.5 * LR * (1.0 + math.cos(math.pi * s / total)) for s in range(total)]
    group = optimizer.param_groups[0]

    epoch_seconds, train_seconds, accuracies, losses = [], [], [], []
    step = 0
    for epoch in range(epochs):
        t0 = time.perf_counter()
        model.train()
        x_epoch, y_epoch = data.epoch(steps, generator)
        loss_sum = torch.zeros((), device=device)
        for i in range(steps):
            x, y = x_epoch[i * BATCH:(i + 1) * BATCH], y_epoch[i * BATCH:(i + 1) * BATCH]
            group["lr"] = lrs[step]
            step += 1
            if graphs:
                torch.compiler.cudagraph_mark_step_begin()
            with cast_context():
                loss = loss_fn(model(x), y)
            backward_and_update(loss, optimizer, scaler)
            loss_sum += loss.detach()
        sync()
        t1 = time.perf_counter()
        model.eval()
        with torch.no_grad(), cast_context():
            if graphs:
                torch.compiler.cudagraph_mark_step_begin()
            correct = (model(data.test_x).argmax(1) == data.test_y).sum()
        sync()
        t2 = time.perf_counter()
        epoch_seconds.append(t2 - t0)
        train_seconds.append(t1 - t0)
        accuracies.append(correct.item() / len(data.test_y))
        losses.append(loss_sum.item() / steps)
        log(f"[{mode} {precision}] epoch {epoch + 1}/{epochs}: loss {losses[-1]:.4f}, test accuracy "
            f"{accuracies[-1]:.4f}, {epoch_seconds[-1]:.3f} s (training {train_seconds[-1]:.3f} s)")
        if not math.isfinite(losses[-1]):
            sys.exit(f"[{mode} {precision}] the loss of epoch {epoch + 1} is {losses[-1]}: diverged")

    timed, timed_train = sum(epoch_seconds[1:]), sum(train_seconds[1:])
    return {"framework": "pytorch", "mode": mode, "model": "digits_cnn", "precision": precision, "batch": BATCH,
            "epochs": epochs, "steps_per_epoch": steps, "optimizer": implementation,
            "epochs_per_second": (epochs - 1) / timed if epochs > 1 else None,
            "images_per_second": (epochs - 1) * steps * BATCH / timed_train if epochs > 1 else None,
            "first_epoch_seconds": epoch_seconds[0], "epoch_seconds": epoch_seconds, "train_seconds": train_seconds,
            "test_accuracy": accuracies[-1], "test_accuracy_per_epoch": accuracies, "final_loss": losses[-1],
            "seed": seed, "conv_tf32": torch.backends.cudnn.allow_tf32, "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "threads": torch.get_num_threads(), "torch": torch.__version__, "cudnn": torch.backends.cudnn.version() if cuda else None}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", required=True, help="directory with the four IDX files (data/digits)")
    parser.add_argument("--precision", choices=sorted(DTYPES), default="fp32")
    parser.add_argument("--modes", default="eager,compile",
                        help="eager, compile, reduce-overhead, max-autotune (comma-separated)")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads (torch.set_num_threads); 0: PyTorch's default")
    parser.add_argument("--conv-tf32", action="store_true",
                        help="let cuDNN's fp32 convolutions use TF32 (PyTorch's default; kiln's --conv-tf32 1); "
                             "matmuls stay fp32 on both sides")
    args = parser.parse_args()
    modes = args.modes.split(",")
    for mode in modes:
        if mode != "eager" and mode not in COMPILE_MODES:
            parser.error(f"unknown mode {mode!r}: use eager, compile, reduce-overhead or max-autotune")
    if args.epochs < 1:
        parser.error(f"--epochs must be positive, got {args.epochs}")
    device = torch.device(args.device)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = args.conv_tf32
    data = Data(args.data, device)
    log(f"{len(data.train_y)} train / {len(data.test_y)} test images {data.height}x{data.width}x{data.channels}, "
        f"mean {data.mean}, std {data.std}, on {device}")
    for mode in modes:
        result = run(data, mode, args.precision, args.epochs, args.seed, device)
        print(json.dumps(result), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
