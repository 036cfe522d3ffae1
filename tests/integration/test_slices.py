"""?slice=SPEC against NumPy basic indexing."""
import re
import urllib.parse

import numpy as np
import pytest

from tdutil import (MANIFEST, all_tensors, assert_error, expected_slice, gen_models,
                    parse_shape_header, random_index, render_index, slice_query, tensor_url)

N_RANDOM = 400

# Tensors of 8+ bit dtypes with at least one dimension, in a fixed order.
CANDIDATES = sorted((m, n) for m, n in all_tensors()
                    if MANIFEST[m][n].shape and MANIFEST[m][n].dtype not in gen_models.SUB_BYTE)


def random_case(i):
    rng = np.random.default_rng(9000 + i)
    model, name = CANDIDATES[int(rng.integers(len(CANDIDATES)))]
    t = MANIFEST[model][name]
    idx = random_index(rng, t.shape)
    return model, name, idx


def check_slice(daemon, model, name, spec, idx, fmt=None):
    t = MANIFEST[model][name]
    want, shape = expected_slice(t.dtype, t.shape, t.data, idx)
    r = daemon.get(tensor_url(model, name, slice_query(spec, fmt)))
    assert r.status == 200, f"slice={spec} of {model}:{name}{list(t.shape)}: {r!r}"
    assert parse_shape_header(r.header("X-Tensor-Shape")) == shape, \
        f"slice={spec}: shape {r.header('X-Tensor-Shape')!r}, NumPy {shape}"
    assert r.header("X-Tensor-Dtype") == t.dtype
    assert r.header("ETag")
    assert len(r.body) == len(want), f"slice={spec}: {len(r.body)} bytes, NumPy {len(want)}"
    assert r.body == want, f"slice={spec}: bytes differ from NumPy"
    return r


@pytest.mark.parametrize("i", range(N_RANDOM))
def test_random_slice(daemon, i):
    model, name, idx = random_case(i)
    check_slice(daemon, model, name, render_index(idx), idx)


@pytest.mark.parametrize("spec,idx", [
    ("1", (1,)),
    ("-1", (-1,)),
    ("0,2", (0, 2)),
    (":", (slice(None),)),
    (":,:,:", (slice(None),) * 3),
    ("1:3", (slice(1, 3),)),
    ("::2", (slice(None, None, 2),)),
    ("-2:", (slice(-2, None),)),
    ("0:100", (slice(0, 100),)),
    ("-100:2", (slice(-100, 2),)),
    ("1,-100:100:3", (1, slice(-100, 100, 3))),
    (":,1,2:4", (slice(None), 1, slice(2, 4))),
    ("2,3,4", (2, 3, 4)),
    ("-3,-4,-5", (-3, -4, -5)),
    # negative steps, with Python's clamping of the bounds
    ("::-1", (slice(None, None, -1),)),
    (":,::-2", (slice(None), slice(None, None, -2))),
    ("1,3:0:-1,::-3", (1, slice(3, 0, -1), slice(None, None, -3))),
    ("100:-100:-2", (slice(100, -100, -2),)),
    ("-1:-3:-1,-1::-1", (slice(-1, -3, -1), slice(-1, None, -1))),
    (":0:-1", (slice(None, 0, -1),)),
    ("0:2:-1", (slice(0, 2, -1),)),
    ("::-9223372036854775808", (slice(None, None, -9223372036854775808),)),
])
def test_slice_cases(daemon, spec, idx):
    check_slice(daemon, "dtype-f32", "größe", spec, idx)


@pytest.mark.parametrize("spec,idx,shape", [
    ("2:2", (slice(2, 2),), (0, 6)),
    ("3:1", (slice(3, 1),), (0, 6)),
    (":,6:", (slice(None), slice(6, None)), (5, 0)),
    ("100:", (slice(100, None),), (0, 6)),
])
def test_empty_slice(daemon, spec, idx, shape):
    r = check_slice(daemon, "dtype-i32", "layers.0/attn q", spec, idx)
    assert r.body == b""
    assert parse_shape_header(r.header("X-Tensor-Shape")) == shape


def test_slice_of_zero_sized_tensor(daemon):
    check_slice(daemon, "dtype-f32", "empty", ":,1:3", (slice(None), slice(1, 3)))


def test_slice_fully_percent_encoded(daemon):
    t = MANIFEST["dtype-f32"]["block.4d"]
    spec = "1,0:2,::2"
    want, shape = expected_slice(t.dtype, t.shape, t.data, (1, slice(0, 2), slice(None, None, 2)))
    url = tensor_url("dtype-f32", "block.4d", "slice=" + urllib.parse.quote(spec, safe=""))
    r = daemon.get(url)
    assert r.status == 200, r
    assert r.body == want
    assert parse_shape_header(r.header("X-Tensor-Shape")) == shape


def test_slice_sharded_tensor(daemon):
    check_slice(daemon, "sharded", "model.layers.0/odd name", "1:,::2,3",
                (slice(1, None), slice(None, None, 2), 3))
    check_slice(daemon, "sharded", "lm_head.weight", "-1,1", (-1, 1))


def test_slice_head(daemon):
    url = tensor_url("dtype-f32", "block.4d", slice_query("1,:,2"))
    g = daemon.get(url)
    h = daemon.head(url)
    assert g.status == h.status == 200
    assert h.body == b""
    assert int(h.header("Content-Length")) == len(g.body) == 3 * 5 * 4
    assert h.header("X-Tensor-Shape") == g.header("X-Tensor-Shape") == "3,5"


# (tensor, spec, dimension named in the message or None)
BAD = [
    ("layers.0/attn q", "5", 0),          # shape (5, 6): out of range
    ("layers.0/attn q", "-6", 0),
    ("layers.0/attn q", "0,6", 1),
    ("layers.0/attn q", "0,-7", 1),
    ("layers.0/attn q", "::0", 0),        # step 0
    ("layers.0/attn q", ":,1:4:0", 1),
    ("layers.0/attn q", "0,0,0", None),   # too many indices
    ("scalar", "0", None),
    ("vec", ":,:", None),
    ("layers.0/attn q", "x", 0),          # garbage
    ("layers.0/attn q", "0,abc", 1),
    ("layers.0/attn q", "1:2:3:4", 0),
    ("layers.0/attn q", "1.5", 0),
    ("layers.0/attn q", "0,1-2", 1),
    ("layers.0/attn q", "0,,1", None),
    ("layers.0/attn q", "--1", 0),
    ("layers.0/attn q", "99999999999999999999999", 0),
    ("empty", "0", 0),                    # index into a zero-length dimension
]


@pytest.mark.parametrize("tensor,spec,dim", BAD)
def test_bad_slice(daemon, tensor, spec, dim):
    r = daemon.get(tensor_url("dtype-f32", tensor, "slice=" + urllib.parse.quote(spec, safe=":,")))
    err = assert_error(r, 400, "bad_slice", f"slice={spec}")
    if dim is not None:
        msg = err["message"]
        assert re.search(r"(dim|axis)", msg, re.I) and re.search(rf"\b{dim}\b", msg), \
            f"slice={spec}: message does not name dimension {dim}: {msg!r}"


# Sub-byte dtypes: the cuts must fall on byte boundaries.
# F4: 2 elements per byte; F6: 4 elements per 3 bytes.
SUB_OK = [
    ("F4", "rows", "1:3"),          # whole rows of 8 elements (4 bytes)
    ("F4", "rows", "2"),
    ("F4", "rows", ":,0:4"),        # 2-byte runs
    ("F4", "rows", ":,4:"),
    ("F4", "rows", "::2,2:6"),
    ("F4", "vec", "2:6"),
    ("F4", "block.4d", "1,:,2:4"),  # (2,3,4,5): 3 runs of 10 elements at 70+20j
    ("F4", "block.4d", "1,2"),      # 20 elements at element 100
    ("F6_E2M3", "rows", "1:3"),     # 8 elements = 6 bytes per row
    ("F6_E2M3", "rows", ":,4:8"),   # 3-byte runs
    ("F6_E3M2", "vec", "4:"),
    ("F6_E3M2", "größe", "1"),      # 20 elements at element 20
    ("F4", "rows", "::-1"),         # whole rows, reversed
    ("F4", "rows", "::-2,4:8"),     # 2-byte runs of rows 3 and 1
]
SUB_BAD = [
    ("F4", "rows", ":,1:3"),        # starts mid-byte
    ("F4", "rows", ":,0:3"),        # ends mid-byte
    ("F4", "rows", ":,0"),
    ("F4", "vec", "::2"),
    ("F4", "vec", "1"),
    ("F4", "block.4d", "1,:,2"),    # 3 runs of 5 elements (20 bits)
    ("F4", "name with spaces", "1"),  # shape (2, 3): row 1 starts at bit 12
    ("F6_E2M3", "rows", ":,0:2"),   # 12 bits
    ("F6_E2M3", "vec", "1:5"),
    ("F6_E3M2", "rows", ":,::2"),
    ("F4", "vec", "::-1"),          # single elements, reversed
]


def _sub_case(case):
    dtype, name, spec = case
    model = "dtype-" + dtype.lower()
    t = MANIFEST[model][name]
    idx = tuple(int(p) if ":" not in p else slice(*[int(x) if x else None for x in p.split(":")])
                for p in spec.split(","))
    return model, t, idx


@pytest.mark.parametrize("case", SUB_OK, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}")
def test_subbyte_slice_on_byte_boundary(daemon, case):
    model, t, idx = _sub_case(case)
    want, shape = expected_slice(t.dtype, t.shape, t.data, idx)
    assert want is not None, "test case is not byte aligned"
    check_slice(daemon, model, case[1], case[2], idx)


@pytest.mark.parametrize("case", SUB_BAD, ids=lambda c: f"{c[0]}-{c[1]}-{c[2]}")
def test_subbyte_slice_off_byte_boundary(daemon, case):
    model, t, idx = _sub_case(case)
    want, shape = expected_slice(t.dtype, t.shape, t.data, idx)
    assert want is None, "test case is byte aligned"
    r = daemon.get(tensor_url(model, case[1], slice_query(case[2])))
    assert_error(r, 400, None, f"{case}")
