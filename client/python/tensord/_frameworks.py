"""Frameworks and devices, named and checked as safetensors checks them, and
tensors built in them from the bytes the daemon sent."""
import re

import numpy as np

from . import _dtypes
from ._errors import (SafetensorError, SafetensorTypeError, SafetensorValueError,
                      builtin_like)

SafetensorModuleNotFoundError = builtin_like(ModuleNotFoundError)

_FRAMEWORKS = {"numpy": "numpy", "np": "numpy", "pt": "pt", "torch": "pt", "pytorch": "pt"}
# safetensors' other frameworks: tensord gives NumPy arrays and torch tensors only.
# Each with the module safetensors imports for it.
_ELSEWHERE = {"tf": "tensorflow", "tensorflow": "tensorflow", "jax": "jax", "flax": "jax",
              "mlx": "mlx", "paddle": "paddle"}
# safetensors' device names: "cpu", or one of these with an optional ":N".
_DEVICES = ("cuda", "mps", "npu", "xpu", "xla", "hpu", "mlu", "musa")
_DEVICE = re.compile(r"(" + "|".join(_DEVICES) + r")(?::(.*))?$")
_BACKENDS = ("mmap", "pread")


def _not_str(arg, v):
    return SafetensorTypeError(f"argument '{arg}': '{type(v).__name__}' object is not an "
                               "instance of 'str'")


def check_backend(backend):
    """safetensors 0.8's backend=: "mmap", "pread" (or None); no meaning over
    HTTP, so only checked."""
    if backend is None:
        return
    if not isinstance(backend, str):
        raise _not_str("backend", backend)
    if backend not in _BACKENDS:
        raise SafetensorError(f'backend "{backend}" is invalid (expected one of: "mmap", '
                              '"pread")')


def missing_module(name):
    """What safetensors raises for a framework whose module is not
    installed: ModuleNotFoundError (and a SafetensorError)."""
    return SafetensorModuleNotFoundError(f"No module named '{name}'", name=name)


def framework_name(framework):
    """"numpy" or "pt" for a framework name safetensors takes."""
    if not isinstance(framework, str):
        raise _not_str("framework", framework)
    fw = _FRAMEWORKS.get(framework)
    if fw is None and framework in _ELSEWHERE:
        module = _ELSEWHERE[framework]
        try:
            __import__(module)
        except ImportError:
            raise missing_module(module) from None
        raise SafetensorError(f"framework {framework} is not served by tensord: it gives "
                              "\"numpy\" (\"np\") and \"pt\" (\"torch\") tensors")
    if fw is None:
        raise SafetensorError(f"framework {framework} is invalid")
    return fw


def is_framework(name):
    return isinstance(name, str) and (name in _FRAMEWORKS or name in _ELSEWHERE)


def device_spec(device):
    """The device as safetensors reads it: "cpu", "cuda:N", "mps"...; a
    torch.device is taken as it is (safetensors refuses it)."""
    if device is None:
        return "cpu"
    if type(device).__module__ == "torch" and type(device).__name__ == "device":
        return str(device)
    if isinstance(device, int):  # bool included, as safetensors reads it
        if device < 0:
            raise SafetensorError(f"device {device} is invalid")
        return f"cuda:{int(device)}"
    if not isinstance(device, str):
        raise SafetensorError(f"device {device} is invalid")
    if device == "cpu":
        return device
    m = _DEVICE.match(device)
    if not m:
        raise SafetensorError(f"device {device} is invalid")
    if m.group(2) is None:
        return f"{m.group(1)}:0" if m.group(1) == "cuda" else device
    if not m.group(2).isdigit() or not m.group(2).isascii():
        raise SafetensorValueError("invalid digit found in string")
    return device


def framework_device(framework, device):
    """(framework, device): "numpy" and "cpu", or "pt" and a torch.device."""
    fw = framework_name(framework)
    spec = device_spec(device)
    if fw == "numpy":
        if spec != "cpu":
            raise SafetensorError(f"Device {spec} is not supported for framework numpy")
        return fw, "cpu"
    try:
        import torch
    except ImportError:
        raise missing_module("torch") from None
    try:
        return fw, torch.device(spec)
    except (RuntimeError, TypeError, ValueError):
        raise SafetensorError(f"device {device} is invalid") from None


def is_device(value):
    """Whether a value passed where load_file takes a framework is a device
    (safetensors.torch.load_file's second argument)."""
    if is_framework(value):
        return False
    try:
        device_spec(value)
        return value is not None
    except SafetensorError:
        return False


def output(dtype, shape, raw, framework):
    """The framework's tensor (on the CPU) over the stored bytes `raw` (a
    uint8 ndarray), without a copy except to unpack F4/F6."""
    shape = tuple(int(s) for s in shape)
    if framework == "numpy":
        return _dtypes.as_numpy(dtype, raw, shape)
    import torch
    tdt, packed = _dtypes.torch_dtype(dtype)
    if _dtypes.BITS[dtype] < 8:
        if packed and shape and shape[-1] % 2 == 0:
            return torch.from_numpy(raw).view(tdt).reshape(shape[:-1] + (shape[-1] // 2,))
        return torch.from_numpy(_dtypes.unpack(dtype, raw, shape))
    if raw.nbytes == 0:
        return torch.empty(shape, dtype=tdt)  # torch will not view an empty byte array
    return torch.from_numpy(raw).view(tdt).reshape(shape)


def from_codes(dtype, codes, framework):
    """Unpacked F4/F6 codes (uint8 ndarray or tensor) as the framework's
    array, as output() gives the tensor."""
    if framework == "numpy":
        return np.asarray(codes).view(_dtypes.numpy_dtype(dtype))
    import torch
    tdt, packed = _dtypes.torch_dtype(dtype)
    if packed and codes.dim() and codes.shape[-1] % 2 == 0:
        # as output() gives F4: pairs packed, the first in the low nibble
        c = codes.numpy()
        pairs = np.ascontiguousarray(c[..., 0::2] | (c[..., 1::2] << np.uint8(4)))
        return torch.from_numpy(pairs).view(tdt)
    return codes


def to_device(t, device, framework, error=None):
    """t moved to device (torch); what torch raises (no CUDA in this build,
    no such device) as the builtin class `error` (default: torch's own),
    that is a SafetensorError too."""
    if framework == "numpy" or device.type == "cpu":
        return t
    try:
        return t.to(device)
    except Exception as e:
        raise builtin_like(error or type(e))(str(e)) from None
