"""Errors of the remote API.

SafetensorError is the error safetensors.safe_open raises; when the
safetensors package is installed, ours derives from its class, so code that
catches safetensors.SafetensorError catches ours too. Where safetensors
raises a builtin exception (TypeError for a name that is no string,
torch's IndexError or ValueError for a bad key with framework="pt"), the
client raises a class that derives from both that builtin and
SafetensorError (`builtin_like`), so the `except` clauses written for
safetensors catch it and so does `except tensord.SafetensorError`."""
try:
    from safetensors import SafetensorError as _Base
except ImportError:  # pragma: no cover - safetensors is optional
    _Base = Exception


class SafetensorError(_Base):
    """What safetensors would raise: an unknown tensor, framework or device, a
    dtype the framework lacks, a file (here: a handle) used after close."""


class RemoteError(SafetensorError):
    """The daemon refused a request. `status` is the HTTP status, `code` the
    daemon's error code (e.g. "bad_slice"), `message` its text."""

    def __init__(self, status, code, message, text=None):
        super().__init__(text or f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class TensorNotFound(RemoteError, KeyError):
    """404 tensor_not_found, or a name the model does not have."""

    def __str__(self):
        return self.args[0]


class ModelNotFound(RemoteError, FileNotFoundError):
    """404 model_not_found: as safetensors raises FileNotFoundError for a
    file that does not exist."""

    def __str__(self):
        return self.args[0]


class BadAnswer(SafetensorError):
    """An answer the client refuses before using it: a document or body over
    its size limit, a model description or fetch answer that is not well
    formed, a range other than the one asked for."""


class DeadlineExceeded(SafetensorError, TimeoutError):
    """The call's `timeout` passed (connecting, waiting, retrying, reading)."""


class RemoteConnectionError(SafetensorError, ConnectionError):
    """The daemon could not be reached, or an answer broke off."""


_LIKE = {}


def builtin_like(*classes):
    """The class that derives from SafetensorError and the builtin exception
    classes given (made once per set): `SafetensorIndexError` for
    IndexError. Classes that are not builtins are left out; SafetensorError
    itself when none is left."""
    bases = tuple(dict.fromkeys(c for c in classes if c.__module__ == "builtins" and
                                issubclass(c, Exception) and
                                not issubclass(c, SafetensorError)))
    if not bases:
        return SafetensorError
    like = _LIKE.get(bases)
    if like is None:
        names = "".join(c.__name__ for c in bases)
        like = type(f"Safetensor{names}", (SafetensorError,) + bases,
                    {"__module__": __name__,
                     "__doc__": f"{' and '.join(c.__name__ for c in bases)} as safetensors "
                                "raises it, and a SafetensorError"})
        _LIKE[bases] = like
    return like


def reraise_like(exc):
    """An exception of builtin_like(type(exc)) with exc's message, for
    `raise reraise_like(e) from None`."""
    return builtin_like(type(exc))(*exc.args)


SafetensorTypeError = builtin_like(TypeError)
SafetensorIndexError = builtin_like(IndexError)
SafetensorValueError = builtin_like(ValueError)
SafetensorRuntimeError = builtin_like(RuntimeError)
SafetensorAttributeError = builtin_like(AttributeError)
