"""Errors of the remote API.

SafetensorError is the error safetensors.safe_open raises; when the
safetensors package is installed, ours derives from its class, so code that
catches safetensors.SafetensorError catches ours too."""
try:
    from safetensors import SafetensorError as _Base
except ImportError:  # pragma: no cover - safetensors is optional
    _Base = Exception


class SafetensorError(_Base):
    """What safetensors would raise: an unknown tensor, framework or device, a
    dtype the framework lacks."""


class RemoteError(SafetensorError):
    """The daemon refused a request. `status` is the HTTP status, `code` the
    daemon's error code (e.g. "bad_slice"), `message` its text."""

    def __init__(self, status, code, message, text=None):
        super().__init__(text or f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class TensorNotFound(RemoteError, KeyError):
    """404 tensor_not_found."""

    def __str__(self):
        return self.args[0]


class ModelNotFound(RemoteError, FileNotFoundError):
    """404 model_not_found: as safetensors raises FileNotFoundError for a
    file that does not exist."""

    def __str__(self):
        return self.args[0]
