"""safetensors.numpy's loading API for models served by tensord.

    from tensord.numpy import load_file
    state = load_file("http://127.0.0.1:8077/v1/models/llama")  # {name: np.ndarray}
"""
from .remote import load_file as _load_file

__all__ = ["load_file"]


def load_file(url, *, backend=None, **kwargs):
    """safetensors.numpy.load_file(filename) for a model URL: every tensor
    as a NumPy array, in storage order. backend is accepted and unused; the
    other keyword arguments are tensord.load_file's (token, timeout,
    connections, tensors, split, ...)."""
    return _load_file(url, "numpy", backend=backend, **kwargs)
