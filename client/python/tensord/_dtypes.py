"""safetensors dtypes as NumPy and PyTorch dtypes.

NumPy has most dtypes natively. BF16 and the FP8 types come back as
ml_dtypes arrays when ml_dtypes is installed, else as their raw bits with the
unsigned integer dtype of their width (BF16 as uint16, FP8 as uint8). The
sub-byte F4 and F6 types are stored packed (element i in bits [i*b, i*b + b),
counting from the least significant bit of the first byte: for F4 the first
element is the low nibble, as PyTorch's float4_e2m1fn_x2 stores it); NumPy
gets them unpacked, one element per byte: ml_dtypes' float4_e2m1fn,
float6_e2m3fn and float6_e3m2fn, or the raw codes as uint8.

PyTorch gets its own dtype where it has one (bfloat16 always; the float8
types from torch 2.1-2.7 on; F4 packed as float4_e2m1fn_x2, as safetensors
gives it), else the raw bits as torch.uint8 (FP8, and F4/F6 unpacked one
code per byte). Unsigned integers wider than 8 bits need torch >= 2.3.
"""
import numpy as np

BITS = {"BOOL": 8, "U8": 8, "I8": 8, "U16": 16, "I16": 16, "F16": 16, "BF16": 16, "U32": 32,
        "I32": 32, "F32": 32, "U64": 64, "I64": 64, "F64": 64, "C64": 64, "F8_E4M3": 8,
        "F8_E5M2": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F8_E8M0": 8, "F6_E2M3": 6,
        "F6_E3M2": 6, "F4": 4}

_NUMPY = {"BOOL": "?", "U8": "u1", "I8": "i1", "U16": "<u2", "I16": "<i2", "F16": "<f2",
          "U32": "<u4", "I32": "<i4", "F32": "<f4", "U64": "<u8", "I64": "<i8", "F64": "<f8",
          "C64": "<c8"}
_ML_DTYPES = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
              "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
              "F8_E8M0": "float8_e8m0fnu", "F6_E2M3": "float6_e2m3fn",
              "F6_E3M2": "float6_e3m2fn", "F4": "float4_e2m1fn"}
_TORCH = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "U16": "uint16", "I16": "int16",
          "F16": "float16", "BF16": "bfloat16", "U32": "uint32", "I32": "int32",
          "F32": "float32", "U64": "uint64", "I64": "int64", "F64": "float64",
          "C64": "complex64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
          "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
          "F8_E8M0": "float8_e8m0fnu", "F4": "float4_e2m1fn_x2"}

_ml = None


def _ml_dtypes():
    global _ml
    if _ml is None:
        try:
            import ml_dtypes
            _ml = ml_dtypes
        except ImportError:
            _ml = False
    return _ml or None


def known(dtype):
    return dtype in BITS


def nbytes(dtype, shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n * BITS[dtype] // 8


def numpy_dtype(dtype):
    """The NumPy dtype a tensor of this safetensors dtype comes back as (for
    F4/F6: of the unpacked elements)."""
    if dtype in _NUMPY:
        return np.dtype(_NUMPY[dtype])
    ml = _ml_dtypes()
    if ml is not None and hasattr(ml, _ML_DTYPES[dtype]):
        return np.dtype(getattr(ml, _ML_DTYPES[dtype]))
    return np.dtype("<u2" if BITS[dtype] == 16 else "u1")


def storage_dtype(dtype):
    """A NumPy dtype of the element width for the stored bytes (uint8 codes
    for the packed sub-byte types, which need unpack())."""
    if BITS[dtype] < 8:
        return np.dtype("u1")
    if dtype in _NUMPY:
        return np.dtype(_NUMPY[dtype])
    return numpy_dtype(dtype)


def unpack(dtype, raw, shape):
    """The elements of a packed F4/F6 buffer (uint8, whole tensor or slice of
    whole bytes) as one uint8 code per element, shaped."""
    b = BITS[dtype]
    n = 1
    for s in shape:
        n *= int(s)
    bits = np.unpackbits(np.asarray(raw, np.uint8), bitorder="little")[: n * b].reshape(n, b)
    codes = np.zeros(n, np.uint8)
    for k in range(b):
        codes |= bits[:, k] << np.uint8(k)
    return codes.reshape(tuple(shape))


def as_numpy(dtype, raw, shape):
    """The array for the stored bytes `raw` (a uint8 ndarray of exactly the
    tensor's bytes), without copying except to unpack sub-byte types."""
    if BITS[dtype] < 8:
        return unpack(dtype, raw, shape).view(numpy_dtype(dtype))
    return raw.view(numpy_dtype(dtype)).reshape(tuple(shape))


def torch_dtype(dtype):
    """(torch dtype, packed) for a safetensors dtype: packed is True for F4
    as float4_e2m1fn_x2; torch.uint8 carries the raw codes where torch has no
    such type. Raises an AttributeError (as safetensors does: it looks the
    dtype up on the torch module) that is a SafetensorError too, for the
    unsigned ints torch lacks."""
    import torch
    from ._errors import SafetensorAttributeError
    name = _TORCH.get(dtype)
    t = getattr(torch, name, None) if name else None
    if t is not None:
        return t, dtype == "F4"
    if dtype in ("U16", "U32", "U64"):
        raise SafetensorAttributeError(f"torch {torch.__version__} has no {name} for {dtype} "
                                       "tensors (torch >= 2.3 has); use framework=\"numpy\"")
    return torch.uint8, False
