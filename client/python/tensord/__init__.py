"""tensord: map models that a tensord daemon preloaded, without copying.

    import tensord
    with tensord.connect("/run/tensord/tensord.sock") as c:
        m = c.open("llama")            # the lease lasts while c (or m, or any tensor) lives
        w = m["embed.weight"]          # NumPy array (host backend) / torch.Tensor (cuda)

A thin ctypes layer over libtensord-client.so (no compiled extension). Host
models come back as read-only NumPy arrays over the daemon's sealed memfds;
CUDA models as PyTorch tensors built from DLPack capsules over the imported
device memory (torch is imported only then). Either way every array keeps the
model mapped until it is garbage-collected.

The library is found through $TENSORD_CLIENT_LIB, then the repository's
build/ directory (for a source checkout), then the system's library path.
"""
import collections.abc
import ctypes
import ctypes.util
import json
import os

__all__ = ["connect", "Client", "Model", "TensordError"]


class TensordError(RuntimeError):
    """A request the daemon refused, or a mapping that failed."""


class _Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p), ("ndim", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("alloc", ctypes.c_uint32),
                ("offset", ctypes.c_uint64), ("nbytes", ctypes.c_uint64),
                ("data", ctypes.c_void_p), ("device_ptr", ctypes.c_uint64)]


class _Alloc(ctypes.Structure):
    _fields_ = [("byte_size", ctypes.c_uint64), ("alloc_size", ctypes.c_uint64),
                ("checksum", ctypes.c_uint64), ("host_ptr", ctypes.c_void_p),
                ("device_ptr", ctypes.c_uint64), ("file", ctypes.c_char_p)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", ctypes.CFUNCTYPE(None, ctypes.c_void_p))]

_ERRLEN = 1024
_lib = None


def _load():
    global _lib
    if _lib is not None:
        return _lib
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.environ.get("TENSORD_CLIENT_LIB"),
                  os.path.join(here, "..", "..", "..", "build", "libtensord-client.so"),
                  ctypes.util.find_library("tensord-client"), "libtensord-client.so.0"]
    last = None
    for path in candidates:
        if not path:
            continue
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            last = e
    else:
        raise TensordError(f"cannot load libtensord-client.so ({last}); set TENSORD_CLIENT_LIB")
    vp, cp, sz, u64 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64
    sigs = {
        "tensord_connect": (vp, [cp, cp, sz]),
        "tensord_open": (vp, [vp, cp, cp, cp, sz]),
        "tensord_list": (vp, [vp, cp, sz]),
        "tensord_close": (None, [vp]),
        "tensord_model_close": (None, [vp]),
        "tensord_model_name": (cp, [vp]),
        "tensord_model_backend": (cp, [vp]),
        "tensord_model_device": (cp, [vp]),
        "tensord_model_device_uuid": (cp, [vp]),
        "tensord_model_device_index": (ctypes.c_int, [vp]),
        "tensord_model_generation": (u64, [vp]),
        "tensord_model_tensor_count": (sz, [vp]),
        "tensord_model_tensor": (ctypes.POINTER(_Tensor), [vp, sz]),
        "tensord_model_alloc_count": (sz, [vp]),
        "tensord_model_alloc": (ctypes.POINTER(_Alloc), [vp, sz]),
        "tensord_model_verify": (ctypes.c_int, [vp, cp, sz]),
        "tensord_tensor_read": (ctypes.c_int, [vp, sz, vp, cp, sz]),
        "tensord_tensor_dlpack": (ctypes.POINTER(_DLManagedTensor), [vp, sz]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    _lib = lib
    return lib


def _err():
    return ctypes.create_string_buffer(_ERRLEN)


def _text(buf):
    return buf.value.decode("utf-8", "replace")


# NumPy dtypes by safetensors name (BF16 and the F8/F6/F4 types have none:
# their raw bits come back as unsigned integers of the same width).
_NUMPY = {"BOOL": "bool", "U8": "u1", "I8": "i1", "U16": "<u2", "I16": "<i2", "F16": "<f2",
          "BF16": "<u2", "U32": "<u4", "I32": "<i4", "F32": "<f4", "U64": "<u8", "I64": "<i8",
          "F64": "<f8", "C64": "<c8", "F8_E4M3": "u1", "F8_E5M2": "u1", "F8_E4M3FNUZ": "u1",
          "F8_E5M2FNUZ": "u1", "F8_E8M0": "u1"}


# PyCapsule plumbing for DLPack: a capsule nobody consumed deletes its tensor.
_pyapi = ctypes.pythonapi
_pyapi.PyCapsule_New.restype = ctypes.py_object
_pyapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_pyapi.PyCapsule_IsValid.restype = ctypes.c_int
_pyapi.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
_pyapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
_pyapi.PyCapsule_GetPointer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor(capsule):
    if _pyapi.PyCapsule_IsValid(capsule, b"dltensor"):  # never handed to a consumer
        ptr = _pyapi.PyCapsule_GetPointer(capsule, b"dltensor")
        mt = ctypes.cast(ptr, ctypes.POINTER(_DLManagedTensor)).contents
        mt.deleter(ptr)


class Model(collections.abc.Mapping):
    """A mapped model: tensor name -> array, zero-copy. Closing it (or
    dropping every reference to it and its arrays) unmaps it."""

    def __init__(self, client, handle, framework):
        self._lib = _load()
        self._client = client          # keeps the connection (the lease) open
        self._h = handle
        lib, h = self._lib, handle
        self.name = lib.tensord_model_name(h).decode()
        self.backend = lib.tensord_model_backend(h).decode()
        self.device = lib.tensord_model_device(h).decode()
        self.device_uuid = lib.tensord_model_device_uuid(h).decode()
        self.device_index = lib.tensord_model_device_index(h)
        self.generation = lib.tensord_model_generation(h)
        self.framework = framework or ("torch" if self.backend == "cuda" else "numpy")
        self._index = {}
        self._info = []
        for i in range(lib.tensord_model_tensor_count(h)):
            t = lib.tensord_model_tensor(h, i).contents
            info = {"name": t.name.decode("utf-8", "surrogateescape"), "dtype": t.dtype.decode(),
                    "shape": tuple(t.shape[d] for d in range(t.ndim)), "alloc": t.alloc,
                    "offset": t.offset, "nbytes": t.nbytes, "data": t.data or 0,
                    "device_ptr": t.device_ptr}
            self._index[info["name"]] = i
            self._info.append(info)

    def __del__(self):
        self.close()

    def close(self):
        """Drops this object's hold; arrays already handed out keep the memory."""
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._lib.tensord_model_close(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        if not self._h:
            raise TensordError(f"model {self.name} is closed")
        return self._h

    # Mapping interface
    def __len__(self):
        return len(self._info)

    def __iter__(self):
        return iter(self._index)

    def __getitem__(self, name):
        if name not in self._index:
            raise KeyError(name)
        # A new zero-copy view each time: caching it here would make a
        # reference cycle (array -> model) that only the cyclic GC breaks.
        i = self._index[name]
        return self._numpy(i) if self.framework == "numpy" else self._torch(i)

    def info(self, name):
        """{"name","dtype","shape","alloc","offset","nbytes","data","device_ptr"}."""
        return dict(self._info[self._index[name]])

    def verify(self):
        """Recomputes every allocation's checksum from the mapped memory."""
        err = _err()
        if self._lib.tensord_model_verify(self._handle(), err, _ERRLEN) != 0:
            raise TensordError(_text(err))
        return True

    def read(self, name):
        """The tensor's bytes, copied to host memory (works for both backends)."""
        info = self._info[self._index[name]]
        buf = ctypes.create_string_buffer(max(info["nbytes"], 1))
        err = _err()
        if self._lib.tensord_tensor_read(self._handle(), self._index[name], buf, err, _ERRLEN):
            raise TensordError(_text(err))
        return buf.raw[:info["nbytes"]]

    def _numpy(self, i):
        import numpy as np
        info = self._info[i]
        if self.backend != "host":
            raise TensordError("NumPy arrays need the host backend; use framework='torch'")
        if info["dtype"] not in _NUMPY:
            raise TensordError(f"no NumPy dtype for {info['dtype']}")
        # A ctypes view of the mapping that holds this Model: the arrays keep
        # it (and through it the mapping and the lease) alive.
        raw = (ctypes.c_char * info["nbytes"]).from_address(info["data"]) if info["nbytes"] \
            else (ctypes.c_char * 0)()
        raw._tensord_model = self
        arr = np.frombuffer(memoryview(raw).toreadonly(), dtype=np.dtype(_NUMPY[info["dtype"]]))
        return arr.reshape(info["shape"])

    def _torch(self, i):
        import torch
        mt = self._lib.tensord_tensor_dlpack(self._handle(), i)
        if not mt:
            raise TensordError(f"DLPack has no dtype for {self._info[i]['dtype']}")
        capsule = _pyapi.PyCapsule_New(ctypes.cast(mt, ctypes.c_void_p), b"dltensor",
                                       ctypes.cast(_capsule_destructor, ctypes.c_void_p))
        return torch.utils.dlpack.from_dlpack(capsule)


class Client:
    """A connection to the daemon's lease socket."""

    def __init__(self, socket=None):
        self._lib = _load()
        err = _err()
        path = socket.encode() if isinstance(socket, str) else socket
        self._h = self._lib.tensord_connect(path, err, _ERRLEN)
        if not self._h:
            raise TensordError(_text(err))

    def __del__(self):
        self.close()

    def close(self):
        """Ends this object's hold; open models keep the connection until closed."""
        h, self._h = getattr(self, "_h", None), None
        if h:
            self._lib.tensord_close(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def list(self):
        """[{"name","state","device","generation"}] of the preloaded models."""
        err = _err()
        p = self._lib.tensord_list(self._h, err, _ERRLEN)
        if not p:
            raise TensordError(_text(err))
        try:
            return json.loads(ctypes.string_at(p).decode())["models"]
        finally:
            ctypes.CDLL(None).free(ctypes.c_void_p(p))

    def open(self, model, device=None, framework=None):
        """Maps model (on device, when given). framework: "numpy" (host
        default) or "torch" (cuda default; also works for host models)."""
        err = _err()
        h = self._lib.tensord_open(self._h, model.encode(), device.encode() if device else None,
                                   err, _ERRLEN)
        if not h:
            raise TensordError(_text(err))
        return Model(self, h, framework)


def connect(socket=None):
    """Connects to the lease socket (None: $TENSORD_SOCKET or /run/tensord/tensord.sock)."""
    return Client(socket)


# Remote tensors over HTTP: the safetensors API against a daemon (remote.py).
from ._errors import RemoteError, SafetensorError  # noqa: E402
from .remote import RemoteSlice, load_file, safe_open  # noqa: E402

__all__ += ["safe_open", "load_file", "RemoteSlice", "RemoteError", "SafetensorError"]
