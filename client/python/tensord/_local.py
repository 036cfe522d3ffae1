"""safetensors' load(data): a whole safetensors file held in memory as
bytes, checked as safetensors checks it (its header length, the header
JSON, __metadata__ of strings, known dtypes, each tensor's size from its
dtype and shape, offsets sorted and contiguous from 0 to the end of the
data), then every tensor copied out into the framework's own array, so
`tensord.numpy.load` and `tensord.torch.load` are drop-ins for
`safetensors.numpy.load` and `safetensors.torch.load`."""
import json
import struct

import numpy as np

from . import _dtypes, _frameworks
from ._errors import SafetensorError, SafetensorTypeError, builtin_like
from ._validate import MAX_HEADER


def _fail(why):
    return SafetensorError(f"Error while deserializing header: {why}")


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _entries(data):
    """The checked header of data: [(begin, end, name, dtype, shape)] in
    offset order, and the data's start."""
    if len(data) < 8:
        raise _fail("header too small")
    (hlen,) = struct.unpack_from("<Q", data)
    if hlen > MAX_HEADER:
        raise _fail("header too large")
    if 8 + hlen > len(data):
        raise _fail("invalid header length")
    try:
        header = json.loads(data[8:8 + hlen].decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _fail(f"invalid header deserialization ({e})") from None
    if not isinstance(header, dict):
        raise _fail("the header is not a JSON object")
    meta = header.pop("__metadata__", None)
    if meta is not None and (not isinstance(meta, dict) or
                             not all(isinstance(v, str) for v in meta.values())):
        raise _fail("__metadata__ is not an object of strings")
    entries = []
    for name, e in header.items():
        if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
            raise _fail(f"tensor {name!r} needs exactly dtype, shape and data_offsets")
        dtype, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
        if not isinstance(dtype, str) or not _dtypes.known(dtype):
            raise _fail(f"tensor {name!r}: unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
            raise _fail(f"tensor {name!r}: malformed shape")
        if not isinstance(offs, list) or len(offs) != 2 or \
                not all(type(o) is int and o >= 0 for o in offs) or offs[0] > offs[1]:
            raise _fail(f"tensor {name!r}: malformed data_offsets")
        bits = _dtypes.BITS[dtype]
        for s in shape:
            bits *= s
        if bits % 8 or bits // 8 != offs[1] - offs[0]:
            raise _fail(f"tensor {name!r}: {dtype} {shape} does not make "
                        f"{offs[1] - offs[0]} bytes")
        entries.append((offs[0], offs[1], name, dtype, shape))
    entries.sort(key=lambda x: (x[0], x[1]))
    end = 0
    for begin, stop, name, _, _ in entries:
        if begin != end:
            raise _fail(f"tensor {name!r} starts at {begin}, not {end}: offsets overlap or "
                        "leave a gap")
        end = stop
    if end != len(data) - 8 - hlen:
        raise SafetensorError("Error while deserializing: incomplete metadata, file not fully "
                              "covered")
    return entries, 8 + hlen


def load(data, framework):
    """{name: tensor} of the safetensors file `data` (bytes), each tensor a
    copy in the framework ("numpy" or "pt"), in storage order (as
    safetensors gives them)."""
    if not isinstance(data, bytes):
        raise SafetensorTypeError(f"argument 'bytes': '{type(data).__name__}' object is not "
                                  "an instance of 'bytes'")
    framework, _ = _frameworks.framework_device(framework, "cpu")
    entries, start = _entries(data)
    out = {}
    for begin, stop, name, dtype, shape in entries:
        raw = np.frombuffer(data, np.uint8, stop - begin, start + begin).copy()
        try:
            out[name] = _frameworks.output(dtype, shape, raw, framework)
        except AttributeError as e:
            # a dtype this torch lacks (U16/U32/U64 before 2.3): safetensors'
            # load looks it up in a table (KeyError), its get_tensor in torch
            # (AttributeError); this is both
            raise builtin_like(KeyError, AttributeError)(str(e)) from None
    return out
