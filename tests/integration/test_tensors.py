"""Every tensor of every model, byte for byte, with its headers."""
import os

import pytest

from tdutil import (MANIFEST, all_tensors, parse_shape_header, read_tensor_from_file,
                    tensor_url)

TENSORS = all_tensors()


def _id(mt):
    return f"{mt[0]}:{mt[1]}"


def tensor_path(root, model, t):
    info = MANIFEST.models[model]
    path = os.path.join(root, info.path)
    return path if info.is_root_file else os.path.join(path, t.file)


@pytest.mark.parametrize("mt", TENSORS, ids=_id)
def test_tensor_bytes(daemon, models_root, mt):
    model, name = mt
    t = MANIFEST[model][name]
    r = daemon.get(tensor_url(model, name))
    assert r.status == 200, r
    assert len(r.body) == len(t.data)
    assert r.body == t.data, "bytes differ from the manifest"
    from_file = read_tensor_from_file(tensor_path(models_root[0], model, t), t.dtype, t.shape,
                                      *t.offsets)
    assert r.body == from_file, "bytes differ from what NumPy reads from the file"
    assert r.header("X-Tensor-Dtype") == t.dtype
    assert parse_shape_header(r.header("X-Tensor-Shape")) == t.shape
    assert r.header("X-Tensor-Shape") == ",".join(str(s) for s in t.shape)
    assert r.header("ETag"), "no ETag"
    assert int(r.header("Content-Length")) == len(t.data)
    assert r.ctype == "application/octet-stream"


@pytest.mark.parametrize("mt", [mt for mt in TENSORS if mt[0] in ("sharded", "dtype-f32")],
                         ids=_id)
def test_tensor_head(daemon, mt):
    model, name = mt
    t = MANIFEST[model][name]
    g = daemon.get(tensor_url(model, name))
    h = daemon.head(tensor_url(model, name))
    assert h.status == 200 and h.body == b""
    assert int(h.header("Content-Length")) == len(t.data)
    for k in ("X-Tensor-Dtype", "X-Tensor-Shape", "ETag", "Content-Type", "Last-Modified"):
        assert h.header(k) == g.header(k), k


def test_scalar_shape_header_is_empty(daemon):
    r = daemon.get(tensor_url("dtype-f32", "scalar"))
    assert r.status == 200
    assert r.header("X-Tensor-Shape") == ""
    assert len(r.body) == 4


def test_zero_sized_tensor(daemon):
    r = daemon.get(tensor_url("dtype-i64", "empty"))
    assert r.status == 200
    assert r.body == b""
    assert r.header("X-Tensor-Shape") == "0,5"
    assert r.header("Content-Length") == "0"


def test_etags_differ_between_tensors(daemon):
    a = daemon.get(tensor_url("sharded", "model.embed_tokens.weight")).header("ETag")
    b = daemon.get(tensor_url("sharded", "lm_head.weight")).header("ETag")
    c = daemon.get(tensor_url("sharded", "model.embed_tokens.weight")).header("ETag")
    assert a and b and a != b
    assert a == c, "ETag is not stable"


def test_format_raw_is_default(daemon):
    a = daemon.get(tensor_url("dtype-f32", "block.4d"))
    b = daemon.get(tensor_url("dtype-f32", "block.4d", "format=raw"))
    assert a.status == b.status == 200 and a.body == b.body
