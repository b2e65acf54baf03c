#!/usr/bin/env python3
"""PyTorch's side of tests/gpu/torch_export_gpu_test.cpp: the weights kiln exported
(kiln::export_torch_weights, `kiln export --torch`) loaded into the torchvision model of the same name
with strict=True, and its eval-mode logits for a batch.

Usage: torch_load_kiln_export.py IN OUT

IN: the fp32 tensor x (the batch, NCHW) and string metadata: model (a torchvision model name) and
weights (the path of kiln's export). OUT: logits (fp32, from float32 on the CPU) and logits_cuda
(float32 on the GPU, TF32 off).

strict=True fails listing every key missing from the file or unknown to the model, and every shape
that does not fit. kiln writes no num_batches_tracked counters: BatchNorm fills in a missing one
itself for a state_dict without PyTorch's version metadata, which a dict read from safetensors has
none of, so those are the only keys strict loading lets through."""
import sys

import torch
from safetensors.torch import load_file, save_file

from torch_zoo import torchvision_model  # bench/ is on sys.path (the script's own directory)
from reference_request import read_request  # noqa: E402


def main():
    src, dst = sys.argv[1], sys.argv[2]
    tensors, meta = read_request(src)
    x = tensors["x"]
    model = torchvision_model(meta["model"])
    state = load_file(meta["weights"])
    expected = {k for k in model.state_dict() if not k.endswith("num_batches_tracked")}
    if set(state) != expected:  # strict=True would say it too; this names kiln's side of it
        sys.exit(f"kiln's export of {meta['model']}: missing {sorted(expected - set(state))[:10]}, "
                 f"unexpected {sorted(set(state) - expected)[:10]}")
    model.load_state_dict(state, strict=True)
    model.eval()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    with torch.no_grad():
        logits = model(x).float()
        logits_cuda = model.cuda()(x.cuda()).float().cpu()
    save_file({"logits": logits.contiguous(), "logits_cuda": logits_cuda.contiguous()}, dst)


if __name__ == "__main__":
    main()
