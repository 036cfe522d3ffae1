"""?format=npy and ?format=safetensors, whole tensors and slices."""
import io
import re

import numpy as np
import pytest

from tdutil import (MANIFEST, assert_error, expected_slice, gen_models, read_safetensors_bytes,
                    slice_query, tensor_url)

NP_DTYPES = [d for d in gen_models.DTYPES if gen_models.numpy_dtype(d)]
NON_NP_DTYPES = [d for d in gen_models.DTYPES if not gen_models.numpy_dtype(d)]


def model_of(dtype):
    return "dtype-" + dtype.lower()


NPY_CASES = [(d, n) for d in NP_DTYPES for n in MANIFEST[model_of(d)]]


def load_npy(r):
    assert r.status == 200, r
    assert r.ctype == "application/x-npy", r.ctype
    assert r.body[:6] == b"\x93NUMPY"
    return np.load(io.BytesIO(r.body), allow_pickle=False)


@pytest.mark.parametrize("dtype,name", NPY_CASES)
def test_npy_whole_tensor(daemon, dtype, name):
    t = MANIFEST[model_of(dtype)][name]
    r = daemon.get(tensor_url(model_of(dtype), name, "format=npy"))
    a = load_npy(r)
    assert a.dtype == np.dtype(gen_models.numpy_dtype(dtype))
    assert a.shape == t.shape
    assert np.ascontiguousarray(a).tobytes() == t.data
    assert int(r.header("Content-Length")) == len(r.body)


NPY_SLICES = [("F32", "block.4d", "1,:,1:3", (1, slice(None), slice(1, 3))),
              ("I64", "größe", "-1", (-1,)),
              ("C64", "layers.0/attn q", "::2,1::2", (slice(None, None, 2), slice(1, None, 2))),
              ("BOOL", "block.4d", ":,2", (slice(None), 2)),
              ("F16", "vec", "2:5", (slice(2, 5),)),
              ("U16", "layers.0/attn q", "3,4", (3, 4)),          # 0-d result
              ("U8", "layers.0/attn q", "3:3", (slice(3, 3),))]   # empty result


@pytest.mark.parametrize("dtype,name,spec,idx", NPY_SLICES)
def test_npy_slice(daemon, dtype, name, spec, idx):
    t = MANIFEST[model_of(dtype)][name]
    want, shape = expected_slice(t.dtype, t.shape, t.data, idx)
    r = daemon.get(tensor_url(model_of(dtype), name, slice_query(spec, "npy")))
    a = load_npy(r)
    assert a.dtype == np.dtype(gen_models.numpy_dtype(dtype))
    assert a.shape == shape
    assert np.ascontiguousarray(a).tobytes() == want
    arr = np.frombuffer(t.data, gen_models.numpy_dtype(dtype)).reshape(t.shape)
    assert np.array_equal(a, arr[idx])


@pytest.mark.parametrize("dtype", NON_NP_DTYPES)
def test_npy_unsupported_dtype(daemon, dtype):
    name = "rows" if dtype in gen_models.SUB_BYTE else "block.4d"
    r = daemon.get(tensor_url(model_of(dtype), name, "format=npy"))
    assert_error(r, 400, "bad_format", f"{dtype} as npy")


def test_npy_unsupported_dtype_slice(daemon):
    r = daemon.get(tensor_url("sharded", "model.layers.0.self_attn.q_proj.weight",
                              slice_query("0:2", "npy")))
    assert_error(r, 400, "bad_format")


RAW_CASES = [(d, n) for d in NON_NP_DTYPES for n in MANIFEST[model_of(d)]]


def raw_comment(body):
    """The dtype and shape the npy header's comment carries."""
    line = body[: body.index(b"\n") + 1].decode("latin-1")
    m = re.search(r"\} # tensord: dtype=(\S+) shape=(\S*) *\n$", line)
    assert m, f"no tensord comment in {line!r}"
    shape = tuple(int(x) for x in m.group(2).split(",")) if m.group(2) else ()
    return m.group(1), shape


@pytest.mark.parametrize("dtype,name", RAW_CASES)
def test_npy_raw_bits(daemon, dtype, name):
    """npy_dtype=raw: the bits as unsigned integers, the real dtype in a comment."""
    t = MANIFEST[model_of(dtype)][name]
    r = daemon.get(tensor_url(model_of(dtype), name, "format=npy&npy_dtype=raw"))
    a = load_npy(r)
    assert raw_comment(r.body) == (dtype, t.shape)
    assert a.tobytes() == t.data
    bits = gen_models.dtype_bits(dtype)
    if bits >= 8:
        assert a.dtype == np.dtype({8: "u1", 16: "<u2"}[bits]) and a.shape == t.shape
    else:
        assert a.dtype == np.uint8
        last = t.shape[-1] * bits
        want = t.shape[:-1] + (last // 8,) if last % 8 == 0 else (len(t.data),)
        assert a.shape == want
    if dtype == "BF16" or dtype.startswith("F8"):
        import ml_dtypes
        real = {"BF16": ml_dtypes.bfloat16, "F8_E4M3": ml_dtypes.float8_e4m3fn,
                "F8_E5M2": ml_dtypes.float8_e5m2, "F8_E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
                "F8_E5M2FNUZ": ml_dtypes.float8_e5m2fnuz,
                "F8_E8M0": ml_dtypes.float8_e8m0fnu}[dtype]
        assert a.view(real).shape == t.shape


def test_npy_raw_slice_and_native(daemon):
    t = MANIFEST["sharded"]["model.layers.0.self_attn.q_proj.weight"]
    idx = (slice(None, None, -2), slice(1, 3))
    want, shape = expected_slice(t.dtype, t.shape, t.data, idx)
    r = daemon.get(tensor_url("sharded", "model.layers.0.self_attn.q_proj.weight",
                              slice_query("::-2,1:3", "npy") + "&npy_dtype=raw"))
    a = load_npy(r)
    assert (a.dtype, a.shape, a.tobytes()) == (np.dtype("<u2"), shape, want)
    assert raw_comment(r.body) == ("BF16", shape)
    # a dtype NumPy has: the plain file, raw changes nothing
    t = MANIFEST["dtype-f32"]["vec"]
    r = daemon.get(tensor_url("dtype-f32", "vec", "format=npy&npy_dtype=raw"))
    assert load_npy(r).tobytes() == t.data and b"tensord" not in r.body[:128]
    r2 = daemon.get(tensor_url("dtype-f32", "vec", "format=npy&npy_dtype=native"))
    assert r2.body == r.body
    # the ETag tells the two representations of a BF16 tensor apart
    a = daemon.get(tensor_url("dtype-bf16", "vec", "format=npy&npy_dtype=raw"))
    b = daemon.get(tensor_url("dtype-bf16", "vec", "format=raw"))
    assert a.header("ETag") != b.header("ETag")


@pytest.mark.parametrize("query", ["format=npy&npy_dtype=bits", "npy_dtype=raw",
                                   "format=safetensors&npy_dtype=raw"])
def test_npy_dtype_bad(daemon, query):
    r = daemon.get(tensor_url("dtype-bf16", "vec", query))
    assert_error(r, 400, "bad_parameter", query)


def check_safetensors(r, name, dtype, shape, want):
    assert r.status == 200, r
    hdr, n, tensors = read_safetensors_bytes(r.body)
    assert n % 8 == 0, f"header length {n} not a multiple of 8"
    assert list(tensors) == [name], f"tensors {list(tensors)}"
    got_dtype, got_shape, data = tensors[name]
    assert got_dtype == dtype
    assert got_shape == shape
    assert data == want
    assert hdr[name]["data_offsets"] == [0, len(want)]
    assert len(r.body) == 8 + n + len(want), "trailing bytes after the data"
    assert int(r.header("Content-Length")) == len(r.body)


@pytest.mark.parametrize("dtype", list(gen_models.DTYPES))
def test_safetensors_whole_tensor(daemon, dtype):
    t = MANIFEST[model_of(dtype)]["block.4d"]
    r = daemon.get(tensor_url(model_of(dtype), "block.4d", "format=safetensors"))
    check_safetensors(r, "block.4d", dtype, t.shape, t.data)


@pytest.mark.parametrize("dtype", list(gen_models.DTYPES))
def test_safetensors_slice(daemon, dtype):
    name = "rows" if dtype in gen_models.SUB_BYTE else "größe"
    spec, idx = ("1:3", (slice(1, 3),)) if dtype in gen_models.SUB_BYTE else \
        ("1:,::2,2:4", (slice(1, None), slice(None, None, 2), slice(2, 4)))
    t = MANIFEST[model_of(dtype)][name]
    want, shape = expected_slice(t.dtype, t.shape, t.data, idx)
    r = daemon.get(tensor_url(model_of(dtype), name, slice_query(spec, "safetensors")))
    check_safetensors(r, name, dtype, shape, want)


def test_safetensors_scalar_and_odd_name(daemon):
    t = MANIFEST["sharded"]["model.norm.eps"]
    r = daemon.get(tensor_url("sharded", "model.norm.eps", "format=safetensors"))
    check_safetensors(r, "model.norm.eps", "F64", (), t.data)
    t = MANIFEST["sharded"]["model.layers.0/odd name"]
    r = daemon.get(tensor_url("sharded", "model.layers.0/odd name", "format=safetensors"))
    check_safetensors(r, "model.layers.0/odd name", "U8", t.shape, t.data)


@pytest.mark.parametrize("fmt", ["xml", "NPY2", "npy,raw", "safetensors%00"])
def test_bad_format_value(daemon, fmt):
    r = daemon.get(tensor_url("dtype-f32", "vec", "format=" + fmt))
    assert_error(r, 400, None, f"format={fmt!r}")


def test_unknown_format_code(daemon):
    r = daemon.get(tensor_url("dtype-f32", "vec", "format=xml"))
    assert_error(r, 400, "bad_format")
