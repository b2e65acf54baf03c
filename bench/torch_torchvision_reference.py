#!/usr/bin/env python3
"""PyTorch's side of tests/gpu/torchvision_weights_gpu_test.cpp: a torchvision model with random
weights and random BatchNorm statistics (so that the running statistics matter), its weights
written as tools/torch_to_safetensors.py writes them, and its eval-mode logits for a batch.

Usage: torch_torchvision_reference.py IN OUT

IN: the fp32 tensor x (the batch, NCHW) and string metadata: model (a torchvision model name, or
timm:NAME for timm's),
seed, weights (the path where the state_dict goes). OUT: logits (fp32, from float32 on the CPU) and
logits_cuda (float32 on the GPU, TF32 off)."""
import importlib.util
import os
import sys

import torch
from safetensors.torch import save_file

from torch_zoo import randomize_batch_norms, torchvision_model  # bench/ is on sys.path (the script's own directory)
from reference_request import read_request  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("convert", os.path.join(HERE, "..", "tools", "torch_to_safetensors.py"))
convert = importlib.util.module_from_spec(spec)
spec.loader.exec_module(convert)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    tensors, meta = read_request(src)
    x = tensors["x"]
    torch.manual_seed(int(meta["seed"]))
    if meta["model"].startswith("timm:"):  # timm's model of that name, its names mapped by the converter
        import timm

        model = timm.create_model(meta["model"][len("timm:"):], pretrained=False)
    else:
        model = torchvision_model(meta["model"])
    randomize_batch_norms(model)
    model.eval()
    save_file(convert.kiln_tensors(convert.torchvision_names(model.state_dict())), meta["weights"])
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    with torch.no_grad():
        logits = model(x).float()
        logits_cuda = model.cuda()(x.cuda()).float().cpu()
    save_file({"logits": logits.contiguous(), "logits_cuda": logits_cuda.contiguous()}, dst)


if __name__ == "__main__":
    main()
