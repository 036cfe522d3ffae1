"""GET /v1/models, /v1/models/{model}, /header, /files/{file}, /files/{file}/header."""
import json
import os

import pytest

from tdutil import (MANIFEST, OUTSIDE_DIR_LINK, OUTSIDE_FILE_LINK, EVIL_FILE_LINK, EVIL_REL_LINK,
                    assert_error, q, valid_models)

VALID = valid_models()
INVALID = list(MANIFEST.invalid)
ALL_FILES = [(m, f) for m in MANIFEST.models for f in MANIFEST.models[m].files
             if m not in MANIFEST.invalid]
ST_FILES = [(m, f) for m, f in ALL_FILES if f in MANIFEST.models[m].header_length]


@pytest.fixture(scope="module")
def listing(daemon):
    j = daemon.json("/v1/models")
    assert isinstance(j.get("models"), list)
    return {e["name"]: e for e in j["models"]}


def tensor_bytes(model):
    return sum(len(t.data) for t in MANIFEST[model].values())


@pytest.mark.parametrize("model", VALID)
def test_list_valid_model(listing, model):
    info = MANIFEST.models[model]
    assert model in listing, f"{model} not listed; listed: {sorted(listing)}"
    e = listing[model]
    assert e["state"] == "ready", e
    assert e["sharded"] is info.sharded, e
    assert e["tensors"] == len(MANIFEST[model]), e
    assert e["files"] == len(info.files), e
    assert e["bytes"] == tensor_bytes(model), e
    assert "error" not in e or e["error"] is None, e


@pytest.mark.parametrize("model", INVALID)
def test_list_invalid_model(listing, model):
    assert model in listing, f"{model} not listed; listed: {sorted(listing)}"
    e = listing[model]
    assert e["state"] == "invalid", e
    err = e.get("error")
    assert isinstance(err, dict), e
    assert isinstance(err.get("code"), str) and err["code"], e
    assert isinstance(err.get("message"), str) and err["message"], e


def test_list_has_nothing_else(listing):
    extra = set(listing) - set(MANIFEST.models)
    assert not extra, f"unexpected models listed: {sorted(extra)}"
    assert OUTSIDE_DIR_LINK not in listing
    assert OUTSIDE_FILE_LINK.rsplit(".", 1)[0] not in listing


def test_list_is_json_with_content_type(daemon):
    r = daemon.get("/v1/models")
    assert r.status == 200
    assert r.ctype == "application/json"
    json.loads(r.body.decode("utf-8"))


@pytest.mark.parametrize("model", VALID)
def test_model_detail(daemon, model):
    info = MANIFEST.models[model]
    j = daemon.json(f"/v1/models/{q(model)}")
    assert j["name"] == model
    assert j["state"] == "ready"
    assert j["sharded"] is info.sharded
    files = {f["name"]: f for f in j["files"]}
    assert set(files) == set(info.files), f"files {sorted(files)} != {sorted(info.files)}"
    for name, blob in info.files.items():
        f = files[name]
        assert f["size"] == len(blob), f
        assert isinstance(f["etag"], str) and len(f["etag"]) > 2, f
        assert f["header_length"] == info.header_length.get(name), f
    meta = j.get("metadata") or {}
    for name in info.files:
        want = info.metadata.get(name)
        if want:
            assert meta.get(name) == want, f"metadata of {name}: {meta.get(name)} != {want}"
        else:
            assert meta.get(name) in (None, {}), f"metadata of {name}: {meta.get(name)}"
    tensors = j["tensors"]
    assert set(tensors) == set(MANIFEST[model])
    for name, t in MANIFEST[model].items():
        e = tensors[name]
        assert e["dtype"] == t.dtype, (name, e)
        assert tuple(e["shape"]) == t.shape, (name, e)
        assert e["file"] == t.file, (name, e)
        assert tuple(e["data_offsets"]) == t.offsets, (name, e)
        assert e["nbytes"] == len(t.data), (name, e)


@pytest.mark.parametrize("model", INVALID)
def test_model_detail_invalid(daemon, model):
    info = MANIFEST.models[model]
    j = daemon.json(f"/v1/models/{q(model)}")
    assert j["name"] == model
    assert j["state"] == "invalid"
    assert isinstance(j.get("error"), dict) and j["error"].get("code") and j["error"].get("message"), j
    names = {f["name"] for f in j.get("files", [])}
    assert names == set(info.files), f"files {sorted(names)} != {sorted(info.files)}"


@pytest.mark.parametrize("model", VALID)
def test_model_header(daemon, model):
    info = MANIFEST.models[model]
    j = daemon.json(f"/v1/models/{q(model)}/header")
    merged = {}
    for name in sorted(info.files):
        for k, v in (info.metadata.get(name) or {}).items():
            merged.setdefault(k, v)
    assert (j.get("__metadata__") or {}) == merged
    assert set(j) - {"__metadata__"} == set(MANIFEST[model])
    for name, t in MANIFEST[model].items():
        e = j[name]
        assert e == {"dtype": t.dtype, "shape": list(t.shape),
                     "data_offsets": list(t.offsets), "file": t.file}, (name, e)


@pytest.mark.parametrize("model,fname", ALL_FILES)
def test_file_bytes(daemon, model, fname):
    blob = MANIFEST.models[model].files[fname]
    r = daemon.get(f"/v1/models/{q(model)}/files/{q(fname)}")
    assert r.status == 200, r
    assert r.body == blob
    assert int(r.header("Content-Length")) == len(blob)
    assert r.header("ETag")
    want = "application/json" if fname.endswith(".json") else "application/octet-stream"
    assert r.ctype == want


@pytest.mark.parametrize("model,fname", ALL_FILES)
def test_file_bytes_equal_disk(daemon, models_root, model, fname):
    info = MANIFEST.models[model]
    path = os.path.join(models_root[0], info.path)
    if not info.is_root_file:
        path = os.path.join(path, fname)
    with open(path, "rb") as f:
        disk = f.read()
    r = daemon.get(f"/v1/models/{q(model)}/files/{q(fname)}")
    assert r.status == 200 and r.body == disk


@pytest.mark.parametrize("model,fname", ST_FILES)
def test_file_header(daemon, model, fname):
    info = MANIFEST.models[model]
    blob = info.files[fname]
    n = info.header_length[fname]
    r = daemon.get(f"/v1/models/{q(model)}/files/{q(fname)}/header")
    assert r.status == 200, r
    assert r.body == blob[8:8 + n]
    assert r.ctype == "application/json"
    json.loads(r.body)


def test_file_header_of_plain_file_is_400(daemon):
    r = daemon.get("/v1/models/with-config/files/config.json/header")
    assert_error(r, 400)


def test_plain_files_listed(daemon):
    j = daemon.json("/v1/models/with-config")
    files = {f["name"]: f for f in j["files"]}
    assert files["config.json"]["header_length"] is None
    assert files["tokenizer.json"]["header_length"] is None
    assert EVIL_FILE_LINK[1] not in files
    assert EVIL_REL_LINK[1] not in files


def test_sharded_index_file_listed(daemon):
    j = daemon.json("/v1/models/sharded")
    names = [f["name"] for f in j["files"]]
    assert "model.safetensors.index.json" in names
    r = daemon.get("/v1/models/sharded/files/model.safetensors.index.json")
    assert r.status == 200
    idx = json.loads(r.body)
    assert set(idx["weight_map"]) == set(MANIFEST["sharded"])


def test_head_model_endpoints(daemon):
    for path in ["/v1/models", "/v1/models/sharded", "/v1/models/sharded/header",
                 "/v1/models/with-config/files/config.json"]:
        g = daemon.get(path)
        h = daemon.head(path)
        assert h.status == g.status == 200, path
        assert h.body == b""
        assert int(h.header("Content-Length")) == len(g.body), path
        assert h.ctype == g.ctype


def test_healthz_readyz(daemon):
    assert daemon.get("/healthz").status == 200
    assert daemon.get("/readyz").status == 200
