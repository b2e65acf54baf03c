#!/usr/bin/env python3
"""Writes a PyTorch model's state_dict as a safetensors file that kiln loads
(`kiln train --init-from FILE`, kiln::load_torch_weights): torchvision's ResNet-18/50 and
VGG16-BN for kiln's zoo models of the same names, timm's models of those names (their tensors
renamed as torchvision names them), or any model whose kiln Blueprint names its layers as the
PyTorch modules are named.

Usage:
  torch_to_safetensors.py --model resnet50 --weights DEFAULT -o resnet50.safetensors
  torch_to_safetensors.py --timm vgg16_bn --pretrained -o vgg16_bn.safetensors
  torch_to_safetensors.py --state-dict my_model.pth -o my_model.safetensors

timm's ResNets use torchvision's names already. timm's VGG ends in a ConvMlp (pre_logits.fc1, a 7x7
convolution over the 7x7 feature map, and pre_logits.fc2, a 1x1 one) and head.fc: the same three
linear layers as torchvision's classifier.0/3/6, the 7x7 filter flattened in C,H,W order as
torchvision's flatten is, so they are reshaped and renamed. A state_dict saved from a
DistributedDataParallel model ("module." before every name) loses that prefix.

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


# timm's VGG classifier -> torchvision's (see the module's docstring).
TIMM_VGG_NAMES = {"pre_logits.fc1": "classifier.0", "pre_logits.fc2": "classifier.3", "head.fc": "classifier.6"}


def torchvision_names(state):
    """The state_dict with torchvision's names where timm's or DDP's differ."""
    if all(name.startswith("module.") for name in state):
        state = {name[len("module."):]: t for name, t in state.items()}
    if "pre_logits.fc1.weight" not in state:
        return dict(state)
    out = {}
    for name, t in state.items():
        module, _, field = name.rpartition(".")
        if module in TIMM_VGG_NAMES:
            name = f"{TIMM_VGG_NAMES[module]}.{field}"
            if t.dim() == 4:  # a convolution over the whole map is a linear layer over its C,H,W
                t = t.reshape(t.shape[0], -1)
        out[name] = t
    return out


def timm_state(model, pretrained, seed):
    import timm

    torch.manual_seed(seed)
    return timm.create_model(model, pretrained=pretrained).state_dict()


def torchvision_state(model, weights, seed):
    import torchvision

    torch.manual_seed(seed)
    w = None if weights == "none" else weights
    return getattr(torchvision.models, model)(weights=w).state_dict()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a torchvision model: resnet18, resnet50, vgg16_bn, ...")
    src.add_argument("--timm", help="a timm model: resnet18, resnet50, vgg16_bn (needs timm)")
    src.add_argument("--state-dict", help="a file torch.save wrote of a state_dict (or of {'state_dict': ...})")
    p.add_argument("--weights", default="DEFAULT", help="torchvision weights name, or none (default DEFAULT)")
    p.add_argument("--pretrained", action="store_true", help="with --timm: timm's pretrained weights (downloaded by timm)")
    p.add_argument("--seed", type=int, default=0, help="seed of a random initialization (--weights none)")
    p.add_argument("-o", "--output", required=True, help="the safetensors file to write")
    a = p.parse_args()
    if a.model:
        state = torchvision_state(a.model, a.weights, a.seed)
        source = f"torchvision.models.{a.model}(weights={a.weights})"
    elif a.timm:
        state = timm_state(a.timm, a.pretrained, a.seed)
        source = f"timm.create_model({a.timm}, pretrained={a.pretrained})"
    else:
        state = torch.load(a.state_dict, map_location="cpu", weights_only=True)
        state = state.get("state_dict", state)
        source = a.state_dict
    tensors = kiln_tensors(torchvision_names(state))
    save_file(tensors, a.output, metadata={"source": source})
    print(f"{a.output}: {len(tensors)} tensors from {source}")


if __name__ == "__main__":
    main()
