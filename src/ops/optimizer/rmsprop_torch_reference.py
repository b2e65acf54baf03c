#!/usr/bin/env python3
"""torch.optim.RMSprop's side of rmsprop_torch_test.cpp.

Usage: rmsprop_torch_reference.py IN.json OUT.json

IN holds the hyper-parameters (lr, alpha, eps, weight_decay, momentum, centered, as kiln's op
carries them), the dtype ("float64" or "float32"), a kiln program's parameters before its first
step (name -> flat values) and, for each step, the gradients its backward wrote. The parameters
become torch tensors of that dtype, one torch.optim.RMSprop steps them on those gradients, and OUT
gets the parameters after each step: {"torch": version, "steps": [{name: values}, ...]}.
"""
import json
import sys

import torch


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        run = json.load(f)
    dtype = {"float64": torch.float64, "float32": torch.float32}[run["dtype"]]
    params = {name: torch.tensor(values, dtype=dtype, requires_grad=True) for name, values in run["params"].items()}
    h = run["hyper"]
    opt = torch.optim.RMSprop(list(params.values()), lr=h["lr"], alpha=h["alpha"], eps=h["eps"],
                              weight_decay=h["weight_decay"], momentum=h["momentum"], centered=h["centered"])
    steps = []
    for step in run["steps"]:
        for name, p in params.items():
            p.grad = torch.tensor(step["grads"][name], dtype=dtype)
        opt.step()
        steps.append({name: p.detach().tolist() for name, p in params.items()})
    with open(dst, "w") as f:
        json.dump({"torch": torch.__version__, "steps": steps}, f)


if __name__ == "__main__":
    main()
