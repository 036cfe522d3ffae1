"""list_models(filter=...) and the entries' last commit (issue 34, item 6),
read with huggingface_hub itself: the Hub's filters applied to what tensord
knows of each repo (the tags its files give it, its model card's tags,
library, pipeline, license, languages, datasets, base model), several
filters together, pipeline_tag= and gated=; a filter the Hub derives from
data tensord lacks is a 400 naming it, never ignored; list_repo_tree and
get_paths_info with expand=True give each entry the revision's commit."""
import os
import shutil
import tempfile

import pytest

import gen_models
import tdutil

hf = pytest.importorskip("huggingface_hub")

CARD = """---
license: apache-2.0
language: [en, fr]
library_name: transformers
pipeline_tag: text-generation
tags:
- llama
- chat
datasets: wikitext
base_model: org/base
---
# A card
"""


@pytest.fixture(scope="module")
def api():
    base = tempfile.mkdtemp(prefix="tensord-filters-")
    root = os.path.join(base, "models")
    st = [("w", "F32", [2], b"\0" * 8)]
    gen_models.write_safetensors(os.path.join(root, "org", "chat", "model.safetensors"), st)
    with open(os.path.join(root, "org", "chat", "README.md"), "w") as f:
        f.write(CARD)
    os.makedirs(os.path.join(root, "org", "chat", "sub"))
    with open(os.path.join(root, "org", "chat", "sub", "notes.txt"), "w") as f:
        f.write("notes\n")
    gen_models.write_safetensors(os.path.join(root, "plain", "model.safetensors"), st)
    os.makedirs(os.path.join(root, "quant"))
    for name, data in (("model.gguf", b"GGUF" + b"\0" * 60), ("pytorch_model.bin", b"\0" * 64),
                       ("README.md", b"---\ntags: quantized\nlicense: mit\n---\n")):
        with open(os.path.join(root, "quant", name), "wb") as f:
            f.write(data)
    os.makedirs(os.path.join(base, "work"))
    d = tdutil.Daemon(root, os.path.join(base, "work"), []).start()
    d.wait_hashed(60)
    yield hf.HfApi(endpoint=f"http://127.0.0.1:{d.port}", token=False), d
    d.stop_checked()
    shutil.rmtree(base, ignore_errors=True)


def ids(api, **kw):
    return sorted(m.id for m in api.list_models(**kw))


@pytest.mark.parametrize("filters, want", [
    (None, ["org/chat", "plain", "quant"]),
    ("safetensors", ["org/chat", "plain"]),
    ("gguf", ["quant"]),
    ("pytorch", ["quant"]),
    ("onnx", []),
    ("llama", ["org/chat"]),
    ("transformers", ["org/chat"]),
    ("text-generation", ["org/chat"]),
    ("license:apache-2.0", ["org/chat"]),
    ("license:mit", ["quant"]),
    ("fr", ["org/chat"]),
    ("dataset:wikitext", ["org/chat"]),
    ("base_model:org/base", ["org/chat"]),
    ("quantized", ["quant"]),
    (["safetensors", "chat"], ["org/chat"]),      # every filter must hold
    (["gguf", "safetensors"], []),
    ("safetensors,llama", ["org/chat"]),          # comma-separated, as the Hub reads it
])
def test_filters(api, filters, want):
    assert ids(api[0], filter=filters) == want


def test_trained_dataset_pipeline_and_gated(api):
    assert ids(api[0], trained_dataset="wikitext") == ["org/chat"]
    assert ids(api[0], pipeline_tag="text-generation") == ["org/chat"]
    assert ids(api[0], pipeline_tag="fill-mask") == []
    assert ids(api[0], gated=True) == []
    assert ids(api[0], gated=False) == ["org/chat", "plain", "quant"]
    assert ids(api[0], filter="safetensors", author="org") == ["org/chat"]


@pytest.mark.parametrize("kw, named", [
    ({"filter": "region:us"}, "region:us"),
    ({"filter": ["safetensors", "endpoints_compatible"]}, "endpoints_compatible"),
    ({"filter": "arxiv:1706.03762"}, "arxiv:1706.03762"),
    ({"apps": "ollama"}, "apps="),
    ({"inference_provider": "all"}, "inference_provider="),
])
def test_filters_tensord_cannot_apply(api, kw, named):
    with pytest.raises(hf.errors.HfHubHTTPError) as e:
        list(api[0].list_models(**kw))
    assert e.value.response.status_code == 400
    assert named in str(e.value) and "tensord cannot apply" in str(e.value)


def test_last_commit_with_expand(api):
    client, d = api
    sha = client.model_info("org/chat").sha
    for entries in (list(client.list_repo_tree("org/chat", expand=True)),
                    list(client.list_repo_tree("org/chat", recursive=True, expand=True)),
                    client.get_paths_info("org/chat", ["README.md", "sub"], expand=True)):
        assert entries
        for e in entries:
            assert e.last_commit is not None, e
            assert e.last_commit.oid == sha and e.last_commit.title
            assert e.last_commit.date.year == 1970
    # without expand, as before
    assert all(getattr(e, "last_commit", None) is None
               for e in client.list_repo_tree("org/chat"))
    r = d.request("POST", f"/api/models/org/chat/paths-info/{sha}",
                  {"Content-Type": "application/json"},
                  b'{"paths": ["README.md"], "expand": true}')
    assert b'"lastCommit":{"id":"' + sha.encode() in r.body
