"""?format=npy and ?format=safetensors, whole tensors and slices."""
import io

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
