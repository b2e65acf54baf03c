#!/usr/bin/env python3
"""Writes PyTorch's Conv2d(bias=False) + BatchNorm2d + ReLU results for the GPU tests to compare
with kiln's CBR. Reads a safetensors file of NHWC/KRSC fp32 tensors (x, w, gamma, beta, dy) with
metadata (stride, padding, eps, momentum, precision), runs one training-mode forward and
backward under autocast (fp16/bf16; fp32 without TF32) in channels_last, and writes y, dx, dw,
dgamma, dbeta, running_mean, running_var (fp32, kiln's layouts) to the output file."""
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file


def main(src, dst):
    with safe_open(src, "pt") as f:
        meta = f.metadata()
        t = {name: f.get_tensor(name).cuda() for name in f.keys()}
    stride, padding = int(meta["stride"]), int(meta["padding"])
    precision = meta["precision"]
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    w = t["w"].permute(0, 3, 1, 2).contiguous()  # KRSC -> KCRS
    k, c, r, _ = w.shape
    conv = torch.nn.Conv2d(c, k, r, stride, padding, bias=False).cuda()
    bn = torch.nn.BatchNorm2d(k, eps=float(meta["eps"]), momentum=float(meta["momentum"])).cuda()
    with torch.no_grad():
        conv.weight.copy_(w)
        bn.weight.copy_(t["gamma"])
        bn.bias.copy_(t["beta"])
    block = torch.nn.Sequential(conv, bn, torch.nn.ReLU()).to(memory_format=torch.channels_last).train()
    x = t["x"].permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last).requires_grad_(True)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[precision]
    with torch.autocast("cuda", dtype=dtype, enabled=precision != "fp32"):
        y = block(x)
    dy = t["dy"].permute(0, 3, 1, 2).to(y.dtype).contiguous(memory_format=torch.channels_last)
    y.backward(dy)
    nhwc = lambda a: a.detach().float().permute(0, 2, 3, 1).contiguous().cpu()
    save_file({
        "y": nhwc(y), "dx": nhwc(x.grad),
        "dw": conv.weight.grad.detach().float().permute(0, 2, 3, 1).contiguous().cpu(),
        "dgamma": bn.weight.grad.detach().float().cpu(), "dbeta": bn.bias.grad.detach().float().cpu(),
        "running_mean": bn.running_mean.detach().float().cpu(),
        "running_var": bn.running_var.detach().float().cpu(),
    }, dst)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
