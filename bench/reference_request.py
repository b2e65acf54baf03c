"""What every PyTorch reference script reads first: the request a kiln test wrote (a safetensors
file of tensors and string metadata). One reader, so the scripts agree on its format."""
from safetensors import safe_open


def read_request(path):
    """The request's tensors by name (CPU) and its metadata (a dict of strings)."""
    with safe_open(path, "pt") as f:
        return {name: f.get_tensor(name) for name in f.keys()}, f.metadata()
