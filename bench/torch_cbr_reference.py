#!/usr/bin/env python3
"""Writes PyTorch's Conv2d(bias=False) + BatchNorm2d + ReLU results for the GPU test
tests/gpu/cbr_torch_gpu_test.cpp to compare with kiln's fused CBR.

Usage: torch_cbr_reference.py IN OUT

IN is a safetensors file of fp32 tensors in kiln's layouts (activations NHWC, weights KRSC):
  x0 .. x{steps-1}, dy0 .. dy{steps-1}   each training step's input and output gradient
  x_inf                                  the input of the inference pass after the last step
  w, gamma, beta                         the conv weight and BN's affine parameters
and string metadata: stride, padding, eps, momentum, precision (fp16, bf16 or fp32), steps, and
input_grad ("1": x requires grad and dx is written; "0": a first layer, x needs no grad).

One module (channels_last, fp32 parameters) runs `steps` training steps in train mode, each a
forward of x{i} and a backward of dy{i}, with no optimizer update and the parameter gradients
set to None before each backward (never accumulated); then one eval-mode forward of x_inf with
the running statistics of the last step. fp16/bf16 run under autocast with every input already
in the compute dtype (as a layer inside an AMP network sees them); fp32 runs without autocast
and without TF32.

OUT gets fp32 tensors in kiln's layouts: for each step i, y{i}, running_mean{i} and
running_var{i} (after step i's forward), dw{i}, dgamma{i}, dbeta{i} and, with input_grad, dx{i};
and y_inf."""
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def nchw(a, dtype):
    """An NHWC tensor as a fresh NCHW tensor of `dtype` stored channels_last."""
    return a.permute(0, 3, 1, 2).to(dtype=dtype, memory_format=torch.channels_last, copy=True)


def nhwc(a):
    """An NCHW (or KCRS) tensor as a host fp32 NHWC (KRSC) copy."""
    return a.detach().permute(0, 2, 3, 1).to("cpu", torch.float32, copy=True).contiguous()


def host(a):
    """A host fp32 copy (running statistics change in place at the next step)."""
    return a.detach().to("cpu", torch.float32, copy=True).contiguous()


def make_block(t, meta):
    w = t["w"].permute(0, 3, 1, 2)  # KRSC -> KCRS
    k, c, r, s = w.shape
    conv = torch.nn.Conv2d(c, k, (r, s), int(meta["stride"]), int(meta["padding"]), bias=False)
    bn = torch.nn.BatchNorm2d(k, eps=float(meta["eps"]), momentum=float(meta["momentum"]))
    block = torch.nn.Sequential(conv, bn, torch.nn.ReLU()).cuda().to(memory_format=torch.channels_last)
    with torch.no_grad():
        conv.weight.copy_(w)
        bn.weight.copy_(t["gamma"])
        bn.bias.copy_(t["beta"])
    return block, conv, bn


def main(src, dst):
    with safe_open(src, "pt") as f:
        meta = f.metadata()
        t = {name: f.get_tensor(name).cuda() for name in f.keys()}
    precision, steps, input_grad = meta["precision"], int(meta["steps"]), meta["input_grad"] == "1"
    dtype = DTYPES[precision]
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    block, conv, bn = make_block(t, meta)

    def autocast():
        return torch.autocast("cuda", dtype=dtype, enabled=precision != "fp32")

    out = {}
    block.train()
    for i in range(steps):
        x = nchw(t[f"x{i}"], dtype).requires_grad_(input_grad)
        with autocast():
            y = block(x)
        out[f"y{i}"] = nhwc(y)
        out[f"running_mean{i}"] = host(bn.running_mean)
        out[f"running_var{i}"] = host(bn.running_var)
        block.zero_grad(set_to_none=True)
        y.backward(nchw(t[f"dy{i}"], y.dtype))
        if input_grad:
            out[f"dx{i}"] = nhwc(x.grad)
        else:
            assert x.grad is None
        out[f"dw{i}"] = nhwc(conv.weight.grad)
        out[f"dgamma{i}"] = host(bn.weight.grad)
        out[f"dbeta{i}"] = host(bn.bias.grad)

    block.eval()
    with torch.no_grad(), autocast():
        out["y_inf"] = nhwc(block(nchw(t["x_inf"], dtype)))
    save_file(out, dst)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
