"""tensord: map models that a tensord daemon preloaded, without copying.

    import tensord
    with tensord.connect("/run/tensord/tensord.sock") as c:
        with c.open("llama") as m:     # one lease per open model
            w = m["embed.weight"]      # NumPy array (host backend) / torch.Tensor (cuda)

A thin ctypes layer over libtensord-client.so (no compiled extension). Host
models come back as read-only NumPy arrays over the daemon's sealed memfds;
CUDA models as PyTorch tensors built from DLPack capsules over the imported
device memory (torch is imported only then).

Lifetimes. Every array or tensor keeps the model mapped, and its lease
held, for as long as it lives. `Model.close()` (or leaving `with`) drops the
Model's own hold: the lease is released when the last array or tensor made
from it is gone as well. Using a closed Model raises TensordError.

Writes. NumPy arrays are read-only (writing raises ValueError). Tensors
handed to PyTorch from a host model live in a private copy-on-write view
of the shared memory: in-place operations work and change this process's
copy only (the pages written are copied then), never the daemon's memory or
other workers'. CUDA mappings are read-only on the device where the driver
allows it: see docs/GPU.md before writing to them (clone first).

The library is found through $TENSORD_CLIENT_LIB, then the repository's
build/ directory (for a source checkout), then PREFIX/lib beside the
tensord-client on PATH (`make install`), then the system's library path.
connect() with no path finds the socket where the daemon puts it:
$TENSORD_SOCKET when set (only that one: a socket it names that does not
exist is an error), else the first that exists of
$XDG_RUNTIME_DIR/tensord.sock and /run/tensord/tensord.sock.
"""
import collections.abc
import ctypes
import ctypes.util
import json
import os
import shutil
import threading

__all__ = ["connect", "Client", "Model", "TensordError"]


class TensordError(RuntimeError):
    """A request the daemon refused, a mapping that failed, or a Model or
    Client used after close."""


class _Tensor(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_char_p), ("ndim", ctypes.c_int),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("alloc", ctypes.c_uint32),
                ("offset", ctypes.c_uint64), ("nbytes", ctypes.c_uint64),
                ("data", ctypes.c_void_p), ("device_ptr", ctypes.c_uint64),
                ("part_dim", ctypes.c_int), ("part_start", ctypes.c_int64),
                ("part_stop", ctypes.c_int64), ("part_length", ctypes.c_int64)]


class _OpenOptions(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("device", ctypes.c_char_p), ("rank", ctypes.c_int)]


class _Alloc(ctypes.Structure):
    _fields_ = [("byte_size", ctypes.c_uint64), ("alloc_size", ctypes.c_uint64),
                ("checksum", ctypes.c_uint64), ("host_ptr", ctypes.c_void_p),
                ("device_ptr", ctypes.c_uint64), ("file", ctypes.c_char_p),
                ("has_checksum", ctypes.c_int)]


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


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.CFUNCTYPE(None, ctypes.c_void_p)),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_ERRLEN = 1024
_DLPACK_RAW = 1        # TENSORD_DLPACK_RAW: the bytes as a 1-D uint8 tensor
_kDLCPU, _kDLCUDA = 1, 2
_lib = None
_lib_lock = threading.Lock()


def _beside_cli():
    """PREFIX/lib/libtensord-client.so.0 of the tensord-client on PATH: what
    `make install` put there, found even where the dynamic linker's cache
    does not list PREFIX/lib (no ldconfig run, a PREFIX outside its paths)."""
    cli = shutil.which("tensord-client")
    if not cli:
        return None
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(cli))), "lib",
                        "libtensord-client.so.0")
    return path if os.path.exists(path) else None


def _load():
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        here = os.path.dirname(os.path.abspath(__file__))
        candidates = [os.environ.get("TENSORD_CLIENT_LIB"),
                      os.path.join(here, "..", "..", "..", "build", "libtensord-client.so"),
                      _beside_cli(), ctypes.util.find_library("tensord-client"),
                      "libtensord-client.so.0"]
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
            "tensord_open_ex": (vp, [vp, cp, ctypes.POINTER(_OpenOptions), cp, sz]),
            "tensord_model_world": (ctypes.c_int, [vp]),
            "tensord_model_rank": (ctypes.c_int, [vp]),
            "tensord_model_split": (cp, [vp]),
            "tensord_list": (vp, [vp, cp, sz]),
            "tensord_close": (None, [vp]),
            "tensord_model_ref": (vp, [vp]),
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
            "tensord_tensor_dlpack_ex": (ctypes.POINTER(_DLManagedTensor),
                                         [vp, sz, ctypes.c_uint, cp, sz]),
            "tensord_tensor_dlpack_versioned": (ctypes.POINTER(_DLManagedTensorVersioned),
                                                [vp, sz, ctypes.c_uint, cp, sz]),
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


# NumPy dtypes by safetensors name. BF16 and the F8 types have none: their
# raw bits come back as unsigned integers of the same width. F6 and F4 are
# packed below a byte: Model.raw() gives their bytes.
_NUMPY = {"BOOL": "bool", "U8": "u1", "I8": "i1", "U16": "<u2", "I16": "<i2", "F16": "<f2",
          "BF16": "<u2", "U32": "<u4", "I32": "<i4", "F32": "<f4", "U64": "<u8", "I64": "<i8",
          "F64": "<f8", "C64": "<c8", "F8_E4M3": "u1", "F8_E5M2": "u1", "F8_E4M3FNUZ": "u1",
          "F8_E5M2FNUZ": "u1", "F8_E8M0": "u1"}

# torch dtypes by safetensors name: (torch attribute, through_raw). A dtype
# whose attribute the installed torch lacks (uint16/32/64 before 2.3,
# float8_* before 2.1/2.2/2.7) is refused with the raw-bytes fallback named.
# through_raw: the bytes come over DLPack as uint8 and are viewed as the
# dtype, for the types that older torch's DLPack importers reject (kDLBool,
# unsigned wider than 8 bits, DLPack 1.1's float8 codes).
_TORCH = {"BOOL": ("bool", True), "U8": ("uint8", False), "I8": ("int8", False),
          "U16": ("uint16", True), "I16": ("int16", False), "F16": ("float16", False),
          "BF16": ("bfloat16", False), "U32": ("uint32", True), "I32": ("int32", False),
          "F32": ("float32", False), "U64": ("uint64", True), "I64": ("int64", False),
          "F64": ("float64", False), "C64": ("complex64", False),
          "F8_E4M3": ("float8_e4m3fn", True), "F8_E5M2": ("float8_e5m2", True),
          "F8_E4M3FNUZ": ("float8_e4m3fnuz", True), "F8_E5M2FNUZ": ("float8_e5m2fnuz", True),
          "F8_E8M0": ("float8_e8m0fnu", True)}


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
        ctypes.cast(ptr, ctypes.POINTER(_DLManagedTensor)).contents.deleter(ptr)


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def _capsule_destructor_versioned(capsule):
    if _pyapi.PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        ptr = _pyapi.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        ctypes.cast(ptr, ctypes.POINTER(_DLManagedTensorVersioned)).contents.deleter(ptr)


class _Hold:
    """One reference on the C model, dropped when this object goes: what
    NumPy arrays keep alive (through their buffer) to keep the mapping."""

    def __init__(self, lib, handle):
        self._lib = lib
        self._h = lib.tensord_model_ref(handle)

    def __del__(self):
        h, self._h = self._h, None
        if h:
            try:
                self._lib.tensord_model_close(h)
            except Exception:  # interpreter shutdown
                pass


class DLPackTensor:
    """One tensor of a Model for any DLPack consumer: `np.from_dlpack(x)`,
    `torch.from_dlpack(x)`, ... A consumer that asks for DLPack 1.x
    (`__dlpack__(max_version=(1, ...))`) gets it flagged read-only; older
    ones get an unversioned capsule. Host memory behind either is the
    process's private copy-on-write view, so no consumer can write into
    the shared pages. Each capsule keeps the mapping alive."""

    def __init__(self, model, index, raw=False):
        self._model, self._index, self._flags = model, index, _DLPACK_RAW if raw else 0

    def __dlpack_device__(self):
        m = self._model
        return (_kDLCUDA, m.device_index) if m.backend == "cuda" else (_kDLCPU, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("tensord tensors are shared memory: copy=True is not supported")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"the tensor is on {self.__dlpack_device__()}, not {dl_device}")
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        return self._model._capsule(self._index, self._flags, versioned)


class _Handle:
    """What Model and Client share: a library handle, given back once by
    close() (or `with`, or garbage collection); using it after that raises
    TensordError. Subclasses set _h and _lock, and say how to give the
    handle back (_release) and what a closed one is called (_closed)."""

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass

    def close(self):
        """Gives the handle back (the class says what outlives it)."""
        with self._lock:
            h, self._h = getattr(self, "_h", None), None
        if h:
            self._release(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _handle(self):
        h = self._h
        if not h:
            raise TensordError(f"{self._closed()} is closed")
        return h


class Model(_Handle, collections.abc.Mapping):
    """A mapped model holding one lease: tensor name -> array, zero-copy.

    close() drops this object's hold on the model. Arrays and tensors made
    from it keep the mapping and the lease until the last of them is gone;
    the Model itself cannot be used any more."""

    def __init__(self, client, handle, framework):
        self._lib = _load()
        self._client = client
        self._h = None                  # set last: a failed __init__ leaves it to the caller
        self._lock = threading.RLock()  # close() waits for calls using the handle
        lib, h = self._lib, handle
        self.name = lib.tensord_model_name(h).decode()
        self.backend = lib.tensord_model_backend(h).decode()
        self.device = lib.tensord_model_device(h).decode()
        self.device_uuid = lib.tensord_model_device_uuid(h).decode()
        self.device_index = lib.tensord_model_device_index(h)
        self.generation = lib.tensord_model_generation(h)
        # A tensor-parallel partition's world and rank (1 and 0: the whole
        # model) and the split it was cut by, as POST .../gpu took it.
        self.world = lib.tensord_model_world(h)
        self.rank = lib.tensord_model_rank(h)
        split = lib.tensord_model_split(h)
        self.split = json.loads(split.decode()) if split else None
        self.framework = framework or ("torch" if self.backend == "cuda" else "numpy")
        if self.framework not in ("numpy", "torch"):
            raise TensordError(f"framework must be 'numpy' or 'torch', not {self.framework!r}")
        self._index = {}
        self._info = []
        for i in range(lib.tensord_model_tensor_count(h)):
            t = lib.tensord_model_tensor(h, i).contents
            info = {"name": t.name.decode("utf-8", "surrogateescape"), "dtype": t.dtype.decode(),
                    "shape": tuple(t.shape[d] for d in range(t.ndim)), "alloc": t.alloc,
                    "offset": t.offset, "nbytes": t.nbytes, "data": t.data or 0,
                    "device_ptr": t.device_ptr,
                    "part": None if t.part_dim < 0 else
                    {"dim": t.part_dim, "start": t.part_start, "stop": t.part_stop,
                     "length": t.part_length}}
            self._index[info["name"]] = i
            self._info.append(info)
        self._h = handle

    @property
    def closed(self):
        return self._h is None

    def _release(self, h):
        self._lib.tensord_model_close(h)

    def _closed(self):
        return f"model {self.name}"

    def _i(self, name):
        if name not in self._index:
            raise KeyError(name)
        return self._index[name]

    # Mapping interface
    def __len__(self):
        return len(self._info)

    def __iter__(self):
        return iter(self._index)

    def __getitem__(self, name):
        # A new zero-copy view each time: caching it here would make a
        # reference cycle (array -> model) that only the cyclic GC breaks.
        i = self._i(name)
        return self._numpy(i) if self.framework == "numpy" else self._torch(i)

    def info(self, name):
        """{"name","dtype","shape","alloc","offset","nbytes","data","device_ptr","part"}:
        part is None for a tensor held whole, else the cut a partition's split
        made, {"dim","start","stop","length"} (shape is the part's)."""
        return dict(self._info[self._i(name)])

    def verify(self):
        """Recomputes every allocation's checksum from the mapped memory and
        compares it with the daemon's (which it sums once the preload is
        ready: this waits for them when the open came first)."""
        err = _err()
        with self._lock:
            if self._lib.tensord_model_verify(self._handle(), err, _ERRLEN) != 0:
                raise TensordError(_text(err))
        return True

    def read(self, name):
        """The tensor's bytes, copied to host memory (works for both backends)."""
        i = self._i(name)
        info = self._info[i]
        buf = ctypes.create_string_buffer(max(info["nbytes"], 1))
        err = _err()
        with self._lock:
            if self._lib.tensord_tensor_read(self._handle(), i, buf, err, _ERRLEN):
                raise TensordError(_text(err))
        return buf.raw[:info["nbytes"]]

    def raw(self, name):
        """The tensor's bytes as a 1-D uint8 array (NumPy, read-only) or
        tensor (torch, copy-on-write on the host), zero-copy: the fallback
        for dtypes the framework lacks."""
        i = self._i(name)
        if self.framework == "numpy":
            return self._numpy(i, raw=True)
        import torch
        return torch.utils.dlpack.from_dlpack(self._capsule(i, _DLPACK_RAW, False))

    def dlpack(self, name, raw=False):
        """A DLPack producer for the tensor (see DLPackTensor)."""
        self._handle()
        return DLPackTensor(self, self._i(name), raw)

    def _capsule(self, i, flags, versioned):
        err = _err()
        with self._lock:
            h = self._handle()
            if versioned:
                mt = self._lib.tensord_tensor_dlpack_versioned(h, i, flags, err, _ERRLEN)
                name, dtor = b"dltensor_versioned", _capsule_destructor_versioned
            else:
                mt = self._lib.tensord_tensor_dlpack_ex(h, i, flags, err, _ERRLEN)
                name, dtor = b"dltensor", _capsule_destructor
        if not mt:
            raise TensordError(_text(err))
        return _pyapi.PyCapsule_New(ctypes.cast(mt, ctypes.c_void_p), name,
                                    ctypes.cast(dtor, ctypes.c_void_p))

    def _numpy(self, i, raw=False):
        import numpy as np
        info = self._info[i]
        if self.backend != "host":
            raise TensordError("NumPy arrays need the host backend; use framework='torch'")
        if not raw and info["dtype"] not in _NUMPY:
            raise TensordError(f"tensor {info['name']}: NumPy has no dtype for {info['dtype']}; "
                               f"m.raw({info['name']!r}) gives its bytes as uint8")
        with self._lock:
            hold = _Hold(self._lib, self._handle())
        # A ctypes view of the read-only shared mapping that holds a
        # reference on the C model: the array keeps the mapping (and the
        # lease) alive, whatever happens to this Model.
        n = info["nbytes"]
        buf = (ctypes.c_char * n).from_address(info["data"]) if n else (ctypes.c_char * 0)()
        buf._tensord_hold = hold
        dtype = np.dtype("u1" if raw else _NUMPY[info["dtype"]])
        arr = np.frombuffer(memoryview(buf).toreadonly(), dtype=dtype)
        return arr if raw else arr.reshape(info["shape"])

    def _torch(self, i):
        import torch
        info = self._info[i]
        attr, through_raw = _TORCH.get(info["dtype"], (None, True))
        target = getattr(torch, attr, None) if attr else None
        if not isinstance(target, torch.dtype):
            raise TensordError(f"tensor {info['name']}: torch {torch.__version__} has no dtype "
                               f"for {info['dtype']}; m.raw({info['name']!r}) gives its bytes "
                               "as a uint8 tensor")
        if not through_raw:
            return torch.utils.dlpack.from_dlpack(self._capsule(i, 0, False))
        t = torch.utils.dlpack.from_dlpack(self._capsule(i, _DLPACK_RAW, False))
        return t.view(target).reshape(info["shape"])


class Client(_Handle):
    """A connection to the daemon's lease socket (lease protocol 2).

    close() ends this object's hold; open models keep the connection until
    they are closed."""

    def __init__(self, socket=None):
        self._lib = _load()
        self._lock = threading.RLock()
        err = _err()
        path = socket.encode() if isinstance(socket, str) else socket
        self._h = self._lib.tensord_connect(path, err, _ERRLEN)
        if not self._h:
            raise TensordError(_text(err))

    def _release(self, h):
        self._lib.tensord_close(h)

    def _closed(self):
        return "the client"

    def list(self):
        """[{"name","state","device","generation"}] of the preloaded models."""
        err = _err()
        with self._lock:
            p = self._lib.tensord_list(self._handle(), err, _ERRLEN)
        if not p:
            raise TensordError(_text(err))
        try:
            return json.loads(ctypes.string_at(p).decode())["models"]
        finally:
            ctypes.CDLL(None).free(ctypes.c_void_p(p))

    def open(self, model, device=None, rank=None, framework=None):
        """Maps model under a lease of its own. device ("host", "cuda:N" or a
        GPU UUID) and rank (a tensor-parallel partition's) choose among the
        model's instances; without a device, the one on this thread's
        current CUDA device is preferred where there are several.
        framework: "numpy" (host default) or "torch" (cuda default; also
        works for host models)."""
        if not isinstance(model, str) or (device is not None and not isinstance(device, str)):
            raise TypeError("model and device must be strings")
        if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool) or
                                 not 0 <= rank < 2 ** 31):
            raise TypeError("rank must be an int in [0, 2**31)")
        opts = _OpenOptions(ctypes.sizeof(_OpenOptions), device.encode() if device else None,
                            -1 if rank is None else rank)
        err = _err()
        with self._lock:
            h = self._lib.tensord_open_ex(self._handle(), model.encode(), ctypes.byref(opts),
                                          err, _ERRLEN)
        if not h:
            raise TensordError(_text(err))
        try:
            return Model(self, h, framework)
        except BaseException:
            self._lib.tensord_model_close(h)
            raise


def connect(socket=None):
    """Connects to the lease socket (None: $TENSORD_SOCKET when set, and
    only it; else the first that exists of $XDG_RUNTIME_DIR/tensord.sock and
    /run/tensord/tensord.sock)."""
    return Client(socket)


# Remote tensors over HTTP: the safetensors API against a daemon (remote.py),
# and safetensors.numpy's and safetensors.torch's loaders (tensord.numpy,
# tensord.torch; neither imports torch until it is called).
from ._errors import (BadAnswer, DeadlineExceeded, ModelNotFound,  # noqa: E402
                      RemoteConnectionError, RemoteError, SafetensorError, TensorNotFound)
from .remote import RemoteSlice, load_file, safe_open  # noqa: E402
# (imported for their attributes tensord.numpy and tensord.torch: under
# other names, as functions of this module import the real torch)
from . import numpy as _numpy_loaders, torch as _torch_loaders  # noqa: E402,F401

__all__ += ["safe_open", "load_file", "RemoteSlice", "RemoteError", "SafetensorError",
            "BadAnswer", "DeadlineExceeded", "RemoteConnectionError", "TensorNotFound",
            "ModelNotFound"]
