#!/usr/bin/env python3
"""PyTorch's side of tests/gpu/whole_network_equivalence_gpu_test.cpp and
tests/gpu/digits_curve_gpu_test.cpp: kiln's zoo models as PyTorch modules (torchvision's own for
resnet18, resnet50 and vgg16_bn; twins built here from src/model/zoo.cpp's layer lists for
digits_cnn and the *_cifar variants, their modules named as kiln::torch_names maps kiln's tensors),
one training step of each, and a training curve.

Usage: torch_training_reference.py IN OUT

IN holds tensors and string metadata; `mode` says what to do. `model` names the zoo model and
`side` its input's height and width (the digits CNN's first linear layer depends on it).

mode=init: model, side, seed, weights (a path). Builds the model with torch.manual_seed(seed), moves
  every BatchNorm's statistics and affine parameters away from their defaults (so that the running
  statistics and gamma/beta matter) and writes its state_dict as tools/torch_to_safetensors.py does
  to `weights`. OUT: a marker tensor.

mode=step: model, side, weights (the init file), device (cpu|cuda), precision (fp64|fp32|fp16|bf16),
  loss_scale (fp16: the fixed scale the loss is multiplied by), sgd_lr, sgd_momentum,
  sgd_weight_decay, adamw_lr, adamw_beta1, adamw_beta2, adamw_eps, adamw_weight_decay (kiln's float
  hyper-parameters, written exactly; each BatchNorm keeps the model's own momentum, a double as
  kiln holds it), out_dir; tensors x (NCHW), y (int32 labels) and mask/<module>
  (0/1, the masks kiln drew, by module name: for each nn.Dropout one value an element, for each
  torchvision.ops.StochasticDepth of p > 0 one value a sample, [N] or [N, 1]). One training-mode
  forward (under autocast for fp16/bf16), mean cross-entropy, backward; then, from the starting
  weights, one SGD step (torch.optim.SGD) and one AdamW step (torch.optim.AdamW) on those gradients.
  Writes <out_dir>/<variant>.<group>.safetensors, each a whole state_dict in PyTorch's names and
  layouts, so that kiln::load_torch_weights reads it into kiln's (float64 results also as
  <variant>.<group>.lo.safetensors: what float32 rounded off):
    grad:  every parameter's gradient (unscaled) and the BN running statistics after the step
    sgd:   the parameters after the SGD step, and the running statistics
    adamw: the parameters after the AdamW step, and the running statistics; in fp16/bf16 from the
           gradients as kiln holds them (those of convolutions and linear layers rounded to the
           compute dtype at the loss scale: what the test writes into kiln for the same step)
  and OUT: <variant>/logits, <variant>/loss and <variant>/grads_finite (float64; 0 where a gradient
  overflowed at the loss scale, a step a GradScaler would skip). Variants: `main` (the precision asked
  for); `ref`, the same step one precision up (float64 for fp32, fp32 for fp16/bf16: the spread
  rounding alone makes; none for float64), groups grad and sgd; and two deliberately wrong
  references the test must tell apart from kiln: `biased_var` (grad only: running_var updated with
  the biased batch variance) and `no_weight_decay` (adamw only: AdamW without its weight decay).

mode=curve: model, side, weights, device, lr, momentum, weight_decay, seeds (comma-separated),
  wrong_lr; tensors x [S, N, C, H, W] and y [S, N]: S steps of SGD on those batches in that order,
  from the init weights, once per seed (the seed draws the dropout masks). OUT: losses [seeds, S]
  and losses_wrong [S] (the first seed with lr = wrong_lr, a recipe the test must tell apart).

Convolutions the BN follows carry no bias in kiln; torchvision's VGG convolutions have one (zero at
initialization): it is frozen here (BN's batch statistics cancel it in training) and left out of
the state_dicts written after the step. TF32 is off; cuDNN runs deterministically."""
import importlib.util
import os
import sys
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from safetensors.torch import load_file, save_file

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("convert", os.path.join(HERE, "..", "tools", "torch_to_safetensors.py"))
convert = importlib.util.module_from_spec(spec)
spec.loader.exec_module(convert)


# --- The models ---------------------------------------------------------------------------------

from torch_zoo import DigitsCnn, VggCifar, randomize_batch_norms, resnet_cifar, torchvision_model  # noqa: E402 (bench/ is on sys.path)
from reference_request import read_request  # noqa: E402


def build(name, side):
    if name == "digits_cnn":
        return DigitsCnn(side)
    if name == "vgg16_bn_cifar":
        return VggCifar()
    if name in ("resnet18_cifar", "resnet50_cifar"):
        return resnet_cifar(name.replace("_cifar", ""))
    # Every other zoo model is torchvision's model of the same name.
    if callable(getattr(torchvision.models, name, None)):
        return torchvision_model(name)
    sys.exit(f"unknown model {name}: neither kiln's own (digits_cnn, the _cifar variants) nor torchvision's")


def versioned(model, state):
    """The state_dict as torch.save would give it: torchvision's MNASNet refuses one without its
    version (safetensors keeps no _metadata); 2 is the current layout, which kiln's zoo follows."""
    if isinstance(model, torchvision.models.MNASNet):
        state = OrderedDict(state)
        state._metadata = {"": {"version": 2}}
    return state


def load_model(name, side, weights, device):
    model = build(name, side)
    missing, unexpected = model.load_state_dict(versioned(model, load_file(weights)), strict=False)
    if unexpected or any(not k.endswith("num_batches_tracked") for k in missing):
        sys.exit(f"{weights} does not fit {name}: missing {missing}, unexpected {unexpected}")
    # A convolution's bias just before a BatchNorm does nothing in training (the batch mean takes it
    # away), and kiln folds it into the BatchNorm (no parameter); every other bias trains.
    listed = list(model.modules())
    for m, after in zip(listed, listed[1:]):
        if (isinstance(m, nn.Conv2d) and m.bias is not None and isinstance(after, nn.BatchNorm2d)
                and after.num_features == m.out_channels):
            m.bias.requires_grad_(False)
    return model.to(device).train()


def kiln_scale(p):
    """1 / (1 - p) as kiln computes it: kiln holds p as a double (DropoutAttrs, StochasticDepthAttrs),
    PyTorch's own value (a float32 p was 3.7e-9 off for 0.2, above the float64 cases' bound of 1e-9)."""
    return 1.0 / (1.0 - p)


class MaskedDropout(nn.Module):
    """nn.Dropout with the mask given (kiln's): x * mask / (1 - p)."""

    def __init__(self, mask, p):
        super().__init__()
        self.mask, self.scale = mask, kiln_scale(p)

    def forward(self, x):
        # The mask comes as (N, features) in PyTorch's order: one over a feature map (SqueezeNet's
        # classifier.0) takes the map's shape.
        return x * self.mask.to(x.dtype).reshape(x.shape) * self.scale


class MaskedStochasticDepth(nn.Module):
    """torchvision.ops.StochasticDepth(p, "row") with the mask given (kiln's, one value a sample):
    x * mask[n] / (1 - p)."""

    def __init__(self, name, mask, p):
        super().__init__()
        self.name, self.mask, self.scale = name, mask.reshape(-1), kiln_scale(p)

    def forward(self, x):
        if x.shape[0] != self.mask.numel():
            sys.exit(f"the mask of {self.name} holds {self.mask.numel()} values for a batch of {x.shape[0]}")
        per_sample = self.mask.to(x.dtype).reshape((-1,) + (1,) * (x.dim() - 1))
        return x * per_sample * self.scale


def masked(name, module, mask):
    """The module that applies kiln's mask in place of `module`; None for a module that draws none."""
    if isinstance(module, nn.Dropout):
        return MaskedDropout(mask, module.p)
    if isinstance(module, torchvision.ops.StochasticDepth):
        if module.mode != "row":
            sys.exit(f"{name} is a StochasticDepth in mode '{module.mode}'; kiln's drops samples ('row')")
        return MaskedStochasticDepth(name, mask, module.p)
    return None


class Unmasked(nn.Module):
    """A dropout or stochastic depth kiln drew no mask for: an error if the forward reaches it."""

    def __init__(self, name):
        super().__init__()
        self.name = name

    def forward(self, x):
        sys.exit(f"no mask given for the dropout or stochastic depth module {self.name}, which the forward runs")


def draws_a_mask(module):
    """Whether kiln draws a mask for the module: every dropout; a stochastic depth of p > 0 (with p = 0
    both sides' are the identity in training too, and kiln draws none)."""
    return isinstance(module, nn.Dropout) or (isinstance(module, torchvision.ops.StochasticDepth) and module.p > 0)


def use_masks(model, masks):
    modules = dict(model.named_modules())
    for name, mask in masks.items():
        replacement = masked(name, modules.get(name), mask)
        if replacement is None:
            sys.exit(f"mask for {name}, which is neither an nn.Dropout nor a torchvision StochasticDepth of the model")
        parent, _, child = name.rpartition(".")
        setattr(modules[parent] if parent else model, child, replacement)
    # A module kiln gave no mask for must not run: torchvision's MBConv holds a StochasticDepth in
    # every block but applies it only where the block adds its input back, as kiln's zoo has it.
    for name in [n for n, m in model.named_modules() if draws_a_mask(m)]:
        parent, _, child = name.rpartition(".")
        setattr(modules[parent] if parent else model, child, Unmasked(name))


# --- One step ------------------------------------------------------------------------------------

def trained(model):
    """The (name, parameter) pairs the optimizers update: kiln's parameters."""
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def running_stats(model):
    return {n: b.detach().cpu().clone() for n, b in model.named_buffers() if "running_" in n}


def forward_backward(model, x, y, precision, loss_scale):
    """Logits, loss, gradients by name (fp32, unscaled) and the BN layers' element counts per
    channel (for the biased-variance variant)."""
    counts = {}
    hooks = [m.register_forward_hook(lambda m, i, o, name=n: counts.__setitem__(name, i[0].numel() // i[0].shape[1]))
             for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)]
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    with torch.autocast(x.device.type, dtype=dtype, enabled=dtype is not None):
        logits = model(x)
        loss = F.cross_entropy(logits.float() if dtype else logits, y)
    (loss * loss_scale).backward()
    for h in hooks:
        h.remove()
    grads = {n: (p.grad / loss_scale).cpu() for n, p in trained(model)}
    return logits.detach().cpu(), loss.detach().cpu().reshape(1), grads, counts


def optimizer_step(start, grads, make_optimizer):
    """The parameters after one step of make_optimizer(params) from `start` with `grads`."""
    params = {n: p.detach().clone().requires_grad_(True) for n, p in start.items()}
    for n, p in params.items():
        p.grad = grads[n].to(p.device, p.dtype)
    opt = make_optimizer(list(params.values()))
    opt.step()
    return {n: p.detach().cpu() for n, p in params.items()}


def biased_running_var(before, after, counts, momenta):
    """running_var as a BN using the biased batch variance would leave it: the batch's variance
    (after - (1 - momentum) before) / momentum is unbiased (m / (m - 1) times the biased one)."""
    wrong = dict(after)
    for name, m in counts.items():
        key, momentum = f"{name}.running_var", momenta[name]
        batch_var = (after[key] - (1 - momentum) * before[key]) / momentum
        wrong[key] = (1 - momentum) * before[key] + momentum * batch_var * (m - 1) / m
    return wrong


def as_kiln_holds(model, grads, precision, loss_scale):
    """The gradients as kiln's mixed-precision program holds them: those of convolution and linear
    layers (which have fp16/bf16 compute copies in kiln) rounded to the compute dtype at the loss
    scale. PyTorch's autocast gradients of those layers already are such values (the casts'
    backward widens them), so this changes nothing there; it makes the AdamW reference take exactly
    the gradients the test writes into kiln."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    if dtype is None:
        return grads
    modules = dict(model.named_modules())
    held = {}
    for name, g in grads.items():
        module = modules[name.rpartition(".")[0]]
        rounded = isinstance(module, (nn.Conv2d, nn.Linear))
        held[name] = (g * loss_scale).to(dtype).to(g.dtype) / loss_scale if rounded else g
    return held


def step(meta, x, y, masks, out):
    device, precision = meta["device"], meta["precision"]
    x, y = x.to(device), y.to(device).long()
    masks = {k: v.to(device) for k, v in masks.items()}
    sgd = lambda params, wd: torch.optim.SGD(params, lr=float(meta["sgd_lr"]), momentum=float(meta["sgd_momentum"]),
                                             weight_decay=wd, foreach=False)
    adamw = lambda params, wd: torch.optim.AdamW(params, lr=float(meta["adamw_lr"]), eps=float(meta["adamw_eps"]),
                                                 betas=(float(meta["adamw_beta1"]), float(meta["adamw_beta2"])),
                                                 weight_decay=wd, foreach=False)
    sgd_wd, adamw_wd = float(meta["sgd_weight_decay"]), float(meta["adamw_weight_decay"])
    results, files = {}, {}

    def run(variant, run_precision, loss_scale):
        model = load_model(meta["model"], int(meta["side"]), meta["weights"], device)
        dtype = torch.float64 if run_precision == "fp64" else torch.float32
        model = model.to(dtype)
        # kiln holds each BN's momentum as a double (BatchNormAttrs): the model's own (MNASNet's
        # 1 - 0.9997 is 0.0003 there, 1.1e-13 relatively apart).
        use_masks(model, masks)
        start = {n: p.detach().clone() for n, p in trained(model)}
        before = running_stats(model)
        logits, loss, grads, counts = forward_backward(model, x.to(dtype), y, run_precision, loss_scale)
        after = running_stats(model)
        results[f"{variant}/logits"], results[f"{variant}/loss"] = logits.double().contiguous(), loss.double()
        # 0 where a gradient overflowed at the loss scale (a GradScaler would skip the step).
        finite = all(bool(torch.isfinite(g).all()) for g in grads.values())
        results[f"{variant}/grads_finite"] = torch.tensor([float(finite)], dtype=torch.float64)
        files[f"{variant}.grad"] = {**grads, **after}
        files[f"{variant}.sgd"] = {**optimizer_step(start, grads, lambda p: sgd(p, sgd_wd)), **after}
        return model, start, grads, before, after, counts

    # The reference one precision up: float64 for fp32 runs, float32 for fp16/bf16 (autocast); none
    # for float64 runs.
    scale = float(meta["loss_scale"]) if precision == "fp16" else 1.0
    if precision != "fp64":
        run("ref", "fp64" if precision == "fp32" else "fp32", 1.0)
    model, start, grads, before, after, counts = run("main", precision, scale)
    held = as_kiln_holds(model, grads, precision, scale)
    files["main.adamw"] = {**optimizer_step(start, held, lambda p: adamw(p, adamw_wd)), **after}
    momenta = {n: m.momentum for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)}
    files["biased_var.grad"] = {**grads, **biased_running_var(before, after, counts, momenta)}
    files["no_weight_decay.adamw"] = {**optimizer_step(start, held, lambda p: adamw(p, 0.0)), **after}
    for name, tensors in files.items():
        save_state(tensors, os.path.join(meta["out_dir"], name), precision == "fp64")
    save_file(results, out)


def save_state(tensors, stem, exact):
    """A state_dict as <stem>.safetensors in float32, which kiln::load_torch_weights reads; `exact`
    (float64 results) adds <stem>.lo.safetensors with what float32 rounded off (v - float32(v), in
    float32): the two read through the same layout conversion add up to the float64 value to about
    1e-14."""
    hi = {k: v.float().contiguous() for k, v in tensors.items()}
    save_file(hi, f"{stem}.safetensors")
    if exact:
        save_file({k: (v.double() - hi[k].double()).float().contiguous() for k, v in tensors.items()},
                  f"{stem}.lo.safetensors")


# --- A training curve ----------------------------------------------------------------------------

def curve(meta, x, y, out):
    device = meta["device"]
    x, y = x.to(device), y.to(device).long()

    def losses(seed, lr):
        torch.manual_seed(seed)  # the dropout masks
        model = load_model(meta["model"], int(meta["side"]), meta["weights"], device)
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=float(meta["momentum"]),
                              weight_decay=float(meta["weight_decay"]), foreach=False)
        out = []
        for s in range(x.shape[0]):
            loss = F.cross_entropy(model(x[s]), y[s])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            out.append(loss.item())
        return torch.tensor(out, dtype=torch.float32)

    seeds = [int(s) for s in meta["seeds"].split(",")]
    save_file({"losses": torch.stack([losses(s, float(meta["lr"])) for s in seeds]).contiguous(),
               "losses_wrong": losses(seeds[0], float(meta["wrong_lr"])).contiguous()}, out)


def init(meta, out):
    torch.manual_seed(int(meta["seed"]))
    model = build(meta["model"], int(meta["side"]))
    randomize_batch_norms(model)
    save_file(convert.kiln_tensors(model.state_dict()), meta["weights"])
    save_file({"done": torch.ones(1)}, out)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    tensors, meta = read_request(src)
    mode = meta["mode"]
    if mode == "init":
        init(meta, dst)
    elif mode == "step":
        masks = {k[len("mask/"):]: v for k, v in tensors.items() if k.startswith("mask/")}
        step(meta, tensors["x"], tensors["y"], masks, dst)
    elif mode == "curve":
        curve(meta, tensors["x"], tensors["y"], dst)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
