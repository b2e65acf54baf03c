#!/usr/bin/env python3
"""PyTorch's side of kiln's activation GPU test (src/ops/activation/activation_gpu_test.cpp):
reads a safetensors file with x and dy (fp32 values already rounded to the test's precision) and
metadata `precision` (fp16, bf16 or fp32) and `functions` ("name:alpha,..." with kiln's names),
applies torch.nn.functional's function of the same name to x in the compute dtype on the GPU,
backpropagates dy, and writes y_<name> and dx_<name> (fp32) to the output file.

usage: torch_activation_reference.py IN OUT"""
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

FUNCTIONS = {
    "relu6": lambda x, a: F.relu6(x),
    "leaky_relu": lambda x, a: F.leaky_relu(x, negative_slope=a),
    "elu": lambda x, a: F.elu(x, alpha=a),
    "silu": lambda x, a: F.silu(x),
    "hardswish": lambda x, a: F.hardswish(x),
    "gelu": lambda x, a: F.gelu(x, approximate="none"),
    "gelu_tanh": lambda x, a: F.gelu(x, approximate="tanh"),
    "sigmoid": lambda x, a: torch.sigmoid(x),
    "tanh": lambda x, a: torch.tanh(x),
}


def main(src, dst):
    with safe_open(src, "pt") as f:
        meta = f.metadata()
        x32, dy32 = f.get_tensor("x").cuda(), f.get_tensor("dy").cuda()
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[meta["precision"]]
    out = {}
    for item in meta["functions"].split(","):
        name, alpha = item.split(":")
        x = x32.to(dtype).detach().clone().requires_grad_(True)  # a fresh leaf: no gradient carried over
        y = FUNCTIONS[name](x, float(alpha))
        y.backward(dy32.to(dtype))
        out["y_" + name] = y.detach().float().cpu().contiguous()
        out["dx_" + name] = x.grad.float().cpu().contiguous()
    save_file(out, dst)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
