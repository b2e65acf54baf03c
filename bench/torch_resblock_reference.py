#!/usr/bin/env python3
"""Writes PyTorch's results for torchvision's Bottleneck block, for the GPU test
tests/gpu/resblock_torch_gpu_test.cpp to compare with kiln's fused block ends.

Usage: torch_resblock_reference.py IN OUT

IN is a safetensors file of fp32 tensors in kiln's layouts (activations NHWC, weights KRSC), named
as torchvision's Bottleneck names its parameters: x, dy (one training step's input and output
gradient), x_inf (the inference input after it), conv1.weight, bn1.weight, bn1.bias, ... bn3.bias
and, with a projection shortcut, downsample.0.weight, downsample.1.weight, downsample.1.bias; and
string metadata: inplanes, planes, stride, precision (fp16, bf16 or fp32), downsample ("1"/"0").

The block runs twice: in the precision asked (channels_last; fp16/bf16 under autocast with the
inputs already in the compute dtype, as a layer inside an AMP network sees them; fp32 without
TF32), and in float64 as the reference both sides are measured against. Each run: one
training-mode forward of x and backward of dy (parameter gradients set to None before it), then
an eval-mode forward of x_inf with the running statistics. OUT gets, for each run (suffix "" and
"_ref"), fp32 tensors in kiln's layouts: y, dx, every parameter's gradient as "<name>.grad", every
BN's running_mean / running_var, and y_inf."""
import sys

import torch
import torchvision
from safetensors import safe_open
from safetensors.torch import save_file

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def nchw(a, dtype):
    """An NHWC tensor as a fresh NCHW tensor of `dtype` stored channels_last."""
    return a.permute(0, 3, 1, 2).to(dtype=dtype, memory_format=torch.channels_last, copy=True)


def to_kiln(name, a):
    """A host fp32 copy in kiln's layout (NCHW / KCRS -> NHWC / KRSC)."""
    a = a.detach()
    if a.dim() == 4:
        a = a.permute(0, 2, 3, 1)
    return a.to("cpu", torch.float32, copy=True).contiguous()


def make_block(t, meta, dtype):
    inplanes, planes, stride = int(meta["inplanes"]), int(meta["planes"]), int(meta["stride"])
    downsample = None
    if meta["downsample"] == "1":
        downsample = torch.nn.Sequential(
            torch.nn.Conv2d(inplanes, planes * 4, 1, stride, bias=False), torch.nn.BatchNorm2d(planes * 4))
    block = torchvision.models.resnet.Bottleneck(inplanes, planes, stride, downsample)
    block = block.cuda().to(memory_format=torch.channels_last)
    if dtype == torch.float64:
        block = block.double()
    with torch.no_grad():
        for name, p in block.named_parameters():
            src = t[name]
            p.copy_(src.permute(0, 3, 1, 2) if src.dim() == 4 else src)
    return block


def run(t, meta, dtype, autocast, suffix, out):
    block = make_block(t, meta, dtype)
    block.train()
    x = nchw(t["x"], dtype).requires_grad_(True)
    with torch.autocast("cuda", dtype=dtype, enabled=autocast):
        y = block(x)
    block.zero_grad(set_to_none=True)
    y.backward(nchw(t["dy"], y.dtype))
    out["y" + suffix] = to_kiln("y", y)
    out["dx" + suffix] = to_kiln("dx", x.grad)
    for name, p in block.named_parameters():
        out[name + ".grad" + suffix] = to_kiln(name, p.grad)
    for name, b in block.named_buffers():
        if name.endswith("running_mean") or name.endswith("running_var"):
            out[name + suffix] = to_kiln(name, b)
    block.eval()
    with torch.no_grad(), torch.autocast("cuda", dtype=dtype, enabled=autocast):
        out["y_inf" + suffix] = to_kiln("y_inf", block(nchw(t["x_inf"], dtype)))


def main(src, dst):
    with safe_open(src, "pt") as f:
        meta = f.metadata()
        t = {name: f.get_tensor(name).cuda() for name in f.keys()}
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    precision = meta["precision"]
    out = {}
    run(t, meta, DTYPES[precision], precision != "fp32", "", out)
    run(t, meta, torch.float64, False, "_ref", out)
    save_file(out, dst)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
