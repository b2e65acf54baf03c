#!/usr/bin/env python3
"""PyTorch's side of tests/gpu/onnx_timm_export_gpu_test.cpp, the held-out set of the ONNX import: a
timm model (one the project never names, drawn by the test) with random weights and random BatchNorm
statistics, written to an ONNX file by torch.onnx.export as README tells a user to (as
torch_onnx_export_reference.py does for torchvision's models, whose export and weight reading this
reuses), its eval-mode logits, and one float64 training step of the model itself: there is no zoo
model to compare the imported one with, so PyTorch's own step is the reference. As in
torch_onnx_export_reference.py the reference is the model as the file holds it: its weights and
BatchNorm statistics read back from the file. Its epsilons stay PyTorch's: the file stores them as
float32 (1e-5 as 9.99999975e-06), and kiln's import reads back the shortest decimal that rounds to
it, PyTorch's 1e-5 (with float32 epsilons on one side, rexnet_100's float64 gradients differed by
4.9e-5 of the largest: its two-value squeeze-and-excitation BatchNorm makes them a cancellation).

Usage: timm_onnx_export_reference.py IN OUT

IN: the fp32 tensor x (the batch, NCHW), the int32 tensor labels, and string metadata: model (a timm
model name), classes, seed, exporter (torchscript or dynamo, as torch_onnx_export_reference.py),
onnx (the path of the ONNX file to write), grads (a path stem). OUT: logits (fp32 eval-mode logits
on the CPU), logits64 (the same in float64), logits_cuda (fp32 on the GPU, TF32 off, where CUDA is available), step_logits and
step_loss (float64: the training-mode forward of model.double() on x and the mean cross-entropy
against labels). The step's gradients go to two state_dicts, <grads>.safetensors and
<grads>.lo.safetensors: every parameter's float64 gradient as float32(g) and float32(g - float32(g))
(kiln's loader reads float32 and converts PyTorch's layouts to kiln's; the two halves add back to g
to float64 precision), BatchNorm's running statistics as the file holds them (the loader wants every
tensor; the test reads only the parameters).

The model is built with drop_rate=0 and drop_path_rate=0 (models that take neither keyword are built
without it) and refused if a dropout or stochastic depth of nonzero probability remains: the step
then draws no random masks, so kiln's masks need not match PyTorch's."""
import copy
import os
import sys
import warnings

import numpy as np
import onnx
import onnx.numpy_helper
import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

from torch_onnx_export_reference import export, load_file_weights  # bench/ is on sys.path (the script's own directory)
from torch_zoo import randomize_batch_norms


def build(name, classes):
    """timm's model `name` with random weights, `classes` outputs and no random masks."""
    options = {"pretrained": False, "num_classes": classes}
    for rates in ({"drop_rate": 0.0, "drop_path_rate": 0.0}, {"drop_rate": 0.0}, {}):
        try:
            model = timm.create_model(name, **options, **rates)
            break
        except TypeError:  # a model whose constructor lacks the keyword (GhostNet, DenseNet, DLA: drop_path_rate)
            continue
    for module_name, m in model.named_modules():
        p = getattr(m, "p", None) if isinstance(m, nn.modules.dropout._DropoutNd) else getattr(m, "drop_prob", None)
        if p:
            raise SystemExit(f"{name}: {module_name} still drops with probability {p}: build it without")
    return model


def load_weights_from(model, path):
    """load_file_weights (the file's initializers into the model by state_dict name), where the file
    may hold parameters under names of its own: the TorchScript exporter writes GroupNorm as
    InstanceNormalization, then Mul and Add by the affine parameters unsqueezed into anonymous
    initializers ('onnx::Mul_123'). An export moves BatchNorm's running statistics, never the
    parameters, so such a parameter keeps the model's values, once the file is seen to hold them."""
    try:
        load_file_weights(model, path)
        return
    except SystemExit:
        pass
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    params = dict(model.named_parameters())
    found = {}
    for name, v in model.state_dict().items():
        if name in inits:
            found[name] = torch.from_numpy(inits[name].copy()).reshape(v.shape).to(v.dtype)
        elif name not in params and v.is_floating_point():
            raise SystemExit(f"the ONNX file lacks the buffer {name}")
        elif name in params:
            want = v.detach().numpy().ravel()
            if not any(a.size == want.size and np.array_equal(a.ravel(), want) for a in inits.values()):
                raise SystemExit(f"the ONNX file holds the parameter {name} under no name and no initializer with its values")
    model.load_state_dict(found, strict=False)


def float64_step(model, x, labels):
    """A copy of `model` in float64, training mode: its logits, mean cross-entropy loss and every
    parameter's gradient (zeros for a parameter the forward does not reach)."""
    m = copy.deepcopy(model).double().train()
    logits = m(x.double())
    loss = F.cross_entropy(logits, labels.long())
    loss.backward()
    grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)).detach() for n, p in m.named_parameters()}
    return logits.detach(), loss.detach(), grads


def save_gradients(model, grads, stem):
    """The state_dict with every parameter replaced by its gradient, as two float32 halves."""
    hi, lo = {}, {}
    for name, t in model.state_dict().items():
        if not t.is_floating_point():
            continue  # num_batches_tracked: kiln's loader leaves it out
        if name in grads:
            g = grads[name].double()
            hi[name] = g.float().contiguous()
            lo[name] = (g - hi[name].double()).float().contiguous()
        else:
            hi[name] = lo[name] = t.float().contiguous()
    save_file(hi, stem + ".safetensors")
    save_file(lo, stem + ".lo.safetensors")


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with safe_open(src, "pt") as f:
        x = f.get_tensor("x")
        labels = f.get_tensor("labels")
        meta = f.metadata()
    torch.manual_seed(int(meta["seed"]))
    model = build(meta["model"], int(meta["classes"]))
    randomize_batch_norms(model)
    export(model, x, meta["onnx"], meta["exporter"])
    load_weights_from(model, meta["onnx"])  # the file's weights, BatchNorm statistics as the export moved them

    out = {}
    step_logits, step_loss, grads = float64_step(model, x, labels)
    out["step_logits"] = step_logits.contiguous()
    out["step_loss"] = step_loss.reshape(1).contiguous()
    save_gradients(model, grads, meta["grads"])

    model.eval()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    with torch.no_grad():
        out["logits"] = model(x).float().contiguous()
        out["logits64"] = copy.deepcopy(model).double()(x.double()).contiguous()  # PyTorch's own fp32 spread
        if torch.cuda.is_available():
            out["logits_cuda"] = model.cuda()(x.cuda()).float().cpu().contiguous()
    save_file(out, dst)


if __name__ == "__main__":
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        main()
