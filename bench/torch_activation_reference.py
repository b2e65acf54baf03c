#!/usr/bin/env python3
"""PyTorch's side of kiln's activation GPU test (src/ops/activation/activation_gpu_test.cpp):
reads a safetensors file with x and dy (fp32 values already rounded to the test's precision) and
metadata `precision` (fp16, bf16 or fp32) and `functions`, a JSON list of {name, alpha, torch}:
each activation of kiln's list (src/ops/activation/activation_list.def) with the PyTorch
expression of x and a that computes it there. Evaluates each on x in the compute dtype on the
GPU, backpropagates dy, and writes y_<name> and dx_<name> (fp32) to the output file.

usage: torch_activation_reference.py IN OUT"""
import json
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file


def function_of(expression):
    """The expression as a function of x and a, with torch and F in scope (the list's expressions
    are kiln's own source, not user input)."""
    code = compile(expression, "<activation_list.def>", "eval")
    return lambda x, a: eval(code, {"torch": torch, "F": F}, {"x": x, "a": a})


def main(src, dst):
    with safe_open(src, "pt") as f:
        meta = f.metadata()
        x32, dy32 = f.get_tensor("x").cuda(), f.get_tensor("dy").cuda()
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[meta["precision"]]
    out = {}
    for item in json.loads(meta["functions"]):
        name = item["name"]
        x = x32.to(dtype).detach().clone().requires_grad_(True)  # a fresh leaf: no gradient carried over
        y = function_of(item["torch"])(x, float(item["alpha"]))
        y.backward(dy32.to(dtype))
        out["y_" + name] = y.detach().float().cpu().contiguous()
        out["dx_" + name] = x.grad.float().cpu().contiguous()
    save_file(out, dst)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
