#!/usr/bin/env python3
"""Writes a PyTorch model's state_dict as a safetensors file that kiln loads
(`kiln train --init-from FILE`, kiln::load_torch_weights): torchvision's ResNet-18/50 and
VGG16-BN for kiln's zoo models of the same names, or any model whose kiln Blueprint names its
layers as the PyTorch modules are named.

Usage:
  torch_to_safetensors.py --model resnet50 --weights DEFAULT -o resnet50.safetensors
  torch_to_safetensors.py --state-dict my_model.pth -o my_model.safetensors

--weights takes torchvision's weight names (DEFAULT, IMAGENET1K_V1, ...; downloaded by torchvision
into its cache) or "none" for a random initialization (--seed). Tensors are written as float32;
BatchNorm's num_batches_tracked counters (int64, which kiln's momentum does not use) are left out.
Needs torch, torchvision (for --model) and safetensors."""
import argparse
import sys

import torch
from safetensors.torch import save_file


def kiln_tensors(state):
    """The state_dict's floating-point tensors as contiguous float32, counters left out."""
    out = {}
    for name, t in state.items():
        if name.endswith("num_batches_tracked"):
            continue
        if not torch.is_floating_point(t):
            sys.exit(f"{name} is {t.dtype}: kiln reads float tensors only")
        out[name] = t.detach().to("cpu", torch.float32).contiguous()
    return out


def torchvision_state(model, weights, seed):
    import torchvision

    torch.manual_seed(seed)
    w = None if weights == "none" else weights
    return getattr(torchvision.models, model)(weights=w).state_dict()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a torchvision model: resnet18, resnet50, vgg16_bn, ...")
    src.add_argument("--state-dict", help="a file torch.save wrote of a state_dict (or of {'state_dict': ...})")
    p.add_argument("--weights", default="DEFAULT", help="torchvision weights name, or none (default DEFAULT)")
    p.add_argument("--seed", type=int, default=0, help="seed of a random initialization (--weights none)")
    p.add_argument("-o", "--output", required=True, help="the safetensors file to write")
    a = p.parse_args()
    if a.model:
        state = torchvision_state(a.model, a.weights, a.seed)
        source = f"torchvision.models.{a.model}(weights={a.weights})"
    else:
        state = torch.load(a.state_dict, map_location="cpu", weights_only=True)
        state = state.get("state_dict", state)
        source = a.state_dict
    tensors = kiln_tensors(state)
    save_file(tensors, a.output, metadata={"source": source})
    print(f"{a.output}: {len(tensors)} tensors from {source}")


if __name__ == "__main__":
    main()
