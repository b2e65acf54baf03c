#!/usr/bin/env python3
"""PyTorch's side of tests/gpu/onnx_torch_export_gpu_test.cpp: a torchvision (or timm) model with
random weights and random BatchNorm statistics, written to an ONNX file by torch.onnx.export the way
README tells a user to ("Your own model, from PyTorch through ONNX"), its state_dict as
tools/torch_to_safetensors.py writes it (for kiln's zoo model of the same name), and its eval-mode
logits for a batch.

Usage: torch_onnx_export_reference.py IN OUT

IN: the fp32 tensor x (the batch, NCHW) and string metadata: model (a torchvision model name, or
timm:NAME), seed, exporter (torchscript: dynamo=False, training=TrainingMode.TRAINING; dynamo:
dynamo=True, optimize=False), onnx (the path of the ONNX file to write), weights (the path of the
state_dict). OUT: logits (fp32 on the CPU) and, where CUDA is available, logits_cuda (fp32 on the
GPU, TF32 off).

A training-mode export runs the model in training mode while it traces, which moves BatchNorm's
running statistics; the file holds the moved ones. So the logits are computed, and the state_dict
written, from the file's initializers loaded back into the model: the reference is exactly the file."""
import importlib.util
import os
import sys
import warnings

from collections import OrderedDict

import onnx
import torchvision
import onnx.numpy_helper
import torch
from safetensors.torch import save_file

from torch_zoo import randomize_batch_norms, torchvision_model  # bench/ is on sys.path (the script's own directory)
from reference_request import read_request  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("convert", os.path.join(HERE, "..", "tools", "torch_to_safetensors.py"))
convert = importlib.util.module_from_spec(spec)
spec.loader.exec_module(convert)


def build(name):
    if name.startswith("timm:"):
        import timm

        return timm.create_model(name[len("timm:"):], pretrained=False)
    return torchvision_model(name)


def export(model, x, path, exporter):
    # A batch of 2: torch.export specializes a batch dimension of 1 (it then could not be symbolic).
    example = x[:2].clone()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            torch.onnx.export(model, (example,), path, dynamo=False, input_names=["input"],
                              dynamic_axes={"input": {0: "N"}}, training=torch.onnx.TrainingMode.TRAINING)
        elif exporter == "dynamo":
            # The dynamo exporter's optimizer folds BatchNorm into the convolutions in eval mode and
            # drops it in training mode (PyTorch 2.9): optimize=False keeps the layers. The batch from
            # 2 on: a training-mode BatchNorm over a 1x1 map needs more than one value a channel, so
            # torch.export refuses a range holding N = 1 (ShuffleNetV2, Inception v3 at their test
            # sides: "Not all values of N ... satisfy the generated guard ... != 1").
            model.train()
            torch.onnx.export(model, (example,), path, dynamo=True, optimize=False, input_names=["input"],
                              dynamic_shapes={"x": {0: torch.export.Dim("N", min=2)}})
        else:
            raise SystemExit(f"unknown exporter {exporter!r}: torchscript or dynamo")


def transposed_linear_weights(graph, inits):
    """The TorchScript exporter stores an nn.Linear applied to a map's last axis (ConvNeXt's) as
    MatMul(x, W^T) under a name of its own ("onnx::MatMul_780"), then Add(bias): W by the bias's
    module name."""
    readers = {}
    for n in graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    out = {}
    for n in graph.node:
        if n.op_type != "MatMul" or len(n.input) != 2 or n.input[1] not in inits:
            continue
        for add in readers.get(n.output[0], []):
            bias = [i for i in add.input if i != n.output[0] and i.endswith(".bias")]
            if add.op_type == "Add" and bias:
                out[bias[0][:-len("bias")] + "weight"] = inits[n.input[1]].t()
    return out


def load_file_weights(model, path):
    """The file's initializers into the model, by state_dict name (the exporters keep the names)."""
    state = model.state_dict()
    graph = onnx.load(path).graph
    inits = {t.name: torch.from_numpy(onnx.numpy_helper.to_array(t).copy()) for t in graph.initializer}
    inits.update({k: v for k, v in transposed_linear_weights(graph, inits).items() if k not in inits})
    found = {k: inits[k].reshape(v.shape).to(v.dtype) for k, v in state.items() if k in inits}
    missing = [k for k, v in state.items() if k not in found and v.is_floating_point()]
    if missing:
        raise SystemExit(f"the ONNX file lacks the initializers {missing[:5]} (of {len(missing)})")
    if isinstance(model, torchvision.models.MNASNet):  # it refuses a state_dict without its version
        found = OrderedDict(found)
        found._metadata = {"": {"version": 2}}
    model.load_state_dict(found, strict=False)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    tensors, meta = read_request(src)
    x = tensors["x"]
    torch.manual_seed(int(meta["seed"]))
    model = build(meta["model"])
    randomize_batch_norms(model)
    export(model, x, meta["onnx"], meta["exporter"])
    load_file_weights(model, meta["onnx"])
    model.eval()
    save_file(convert.kiln_tensors(convert.torchvision_names(model.state_dict())), meta["weights"])
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    out = {}
    with torch.no_grad():
        out["logits"] = model(x).float().contiguous()
        if torch.cuda.is_available():
            out["logits_cuda"] = model.cuda()(x.cuda()).float().cpu().contiguous()
    save_file(out, dst)


if __name__ == "__main__":
    main()
