"""What the PyTorch sides of kiln's training benchmarks (torch_models.py, torch_digits.py) do the
same way, as an expert user does it: SGD with Nesterov momentum in its fused implementation (the
foreach one where fused is unavailable, and under GradScaler: see nesterov_sgd), and the update
after a forward: backward through GradScaler for fp16, gradients set to None after the step."""
import torch


def nesterov_sgd(params, lr, weight_decay, momentum=0.9, grad_scaler=False):
    """The optimizer and which implementation it got ("fused" or "foreach").

    With a GradScaler (fp16) the foreach implementation: PyTorch 2.11's fused SGD takes over the
    scaler's overflow handling but still advances its momentum on the steps the scaler skips, so
    the first fp16 overflow puts inf into the momentum and the parameters turn NaN a step later
    (our fp16 runs with fused=True ended at loss NaN); an expert user falls back to foreach."""
    params = list(params)
    if grad_scaler:
        return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=True, weight_decay=weight_decay,
                               foreach=True), "foreach"
    try:
        return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=True, weight_decay=weight_decay,
                               fused=True), "fused"
    except (RuntimeError, TypeError):
        return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=True, weight_decay=weight_decay,
                               foreach=True), "foreach"


def backward_and_update(loss, optimizer, scaler):
    """loss.backward() and optimizer.step(), through `scaler` (fp16) when there is one; then every
    gradient is set to None, so the next backward writes fresh ones."""
    if scaler is not None:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    else:
        loss.backward()
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
