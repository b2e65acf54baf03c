"""What the PyTorch sides of kiln's training benchmarks (torch_models.py, torch_digits.py) do the
same way, as an expert user does it: SGD with Nesterov momentum in its fused implementation (the
foreach one where fused is unavailable), and the update after a forward: backward through
GradScaler for fp16, gradients set to None after the step."""
import torch


def nesterov_sgd(params, lr, weight_decay, momentum=0.9):
    """The optimizer and which implementation it got ("fused" or "foreach")."""
    params = list(params)
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
