"""Model and tensor names in URLs: '/', spaces, non-ASCII, percent-encoding."""
import urllib.parse

import pytest

from tdutil import MANIFEST, q, tensor_url


@pytest.mark.parametrize("form", ["org%2Fname", "org%2fname", "org/name"])
def test_nested_model_name_forms(daemon, form):
    j = daemon.json(f"/v1/models/{form}")
    assert j["name"] == "org/name"
    assert set(j["tensors"]) == set(MANIFEST["org/name"])
    h = daemon.json(f"/v1/models/{form}/header")
    assert set(h) - {"__metadata__"} == set(MANIFEST["org/name"])
    r = daemon.get(f"/v1/models/{form}/files/model.safetensors")
    assert r.status == 200 and r.body == MANIFEST.models["org/name"].files["model.safetensors"]


@pytest.mark.parametrize("form", ["org%2Fname", "org/name"])
@pytest.mark.parametrize("tensor", list(MANIFEST["org/name"]))
def test_nested_model_tensors(daemon, form, tensor):
    r = daemon.get(f"/v1/models/{form}/tensors/{q(tensor)}")
    assert r.status == 200, r
    assert r.body == MANIFEST["org/name"][tensor].data


def test_nested_model_listed(daemon):
    names = [m["name"] for m in daemon.json("/v1/models")["models"]]
    assert "org/name" in names
    assert "org" not in names


ODD = ["layers.0/attn q", "größe", "name with spaces", "block.4d"]


@pytest.mark.parametrize("name", ODD)
@pytest.mark.parametrize("model", ["dtype-f32", "dtype-i16", "dtype-f4"])
def test_odd_tensor_names_encoded(daemon, model, name):
    r = daemon.get(f"/v1/models/{model}/tensors/{urllib.parse.quote(name, safe='')}")
    assert r.status == 200, r
    assert r.body == MANIFEST[model][name].data


def test_tensor_name_with_unencoded_slash(daemon):
    # Everything after /tensors/ is the tensor name, '/' included.
    r = daemon.get("/v1/models/dtype-f32/tensors/layers.0/attn%20q")
    assert r.status == 200, r
    assert r.body == MANIFEST["dtype-f32"]["layers.0/attn q"].data


def test_sharded_odd_name(daemon):
    name = "model.layers.0/odd name"
    r = daemon.get(tensor_url("sharded", name))
    assert r.status == 200 and r.body == MANIFEST["sharded"][name].data


def test_non_ascii_names_in_json(daemon):
    j = daemon.json("/v1/models/dtype-f32")
    assert "größe" in j["tensors"]
    j = daemon.json("/v1/models/dtype-i16/header")  # header stored with \\u escapes
    assert "größe" in j
    j = daemon.json(f"/v1/models/{q('org/name')}")
    assert "ü.bias" in j["tensors"]


def test_name_is_not_decoded_twice(daemon):
    # "%2520" decodes once to "%20", which is not a space.
    r = daemon.get("/v1/models/dtype-f32/tensors/name%2520with%2520spaces")
    assert r.status == 404, r
