"""safetensors.numpy's API for models served by tensord.

    from tensord.numpy import load_file, load
    state = load_file("http://127.0.0.1:8077/v1/models/llama")  # {name: np.ndarray}
    state = load(data)                                         # safetensors bytes
    data = save(state)                                         # safetensors' own save

`save` and `save_file` are safetensors.numpy's (there when safetensors is
installed), so this module stands in for safetensors.numpy whole.
"""
from . import _local, _saving
from .remote import load_file as _load_file

__all__ = ["load_file", "load", "save", "save_file"]


def load_file(url, *, backend=None, **kwargs):
    """safetensors.numpy.load_file(filename) for a model URL: every tensor
    as a NumPy array, in storage order. backend is accepted and unused; the
    other keyword arguments are tensord.load_file's (token, timeout,
    connections, tensors, split, ...)."""
    return _load_file(url, "numpy", backend=backend, **kwargs)


def load(data):
    """safetensors.numpy.load(data): the safetensors file in `data` (bytes)
    as {name: np.ndarray}, checked as safetensors checks it; the arrays are
    copies (writable), and BF16/FP8/FP6/FP4 come as the Dtypes table of the
    README says."""
    return _local.load(data, "numpy")


def __getattr__(name):
    return _saving.attribute("safetensors.numpy", name, __name__)
