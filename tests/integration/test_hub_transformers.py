"""transformers' from_pretrained run unchanged against tensord with
HF_ENDPOINT: config and tokenizer, a sharded checkpoint resolved and loaded
into torch, errors that must be transformers' own messages, and the full
AutoModel where transformers enables PyTorch. The repos, the daemon and the
fixtures are in hubclients.py; the `hf` command line is in
test_hub_clients.py.

transformers (tests/requirements.txt) is 5.23.0: the first release that
accepts huggingface_hub 2.x is 5.18.0, and every such release needs
torch >= 2.5 (>= 2.6 from 5.20; with the version check forced off, 5.23.0
fails building a model class on `import torch.distributed.tensor`, which
torch 1.13 lacks), while Debian 12 has torch 1.13, PyTorch's own wheel
index is not reachable from the machines this was built on, and the
index's torch wheels (CUDA builds, with their nvidia-* dependencies) are
far too big for `make deps`. transformers then turns PyTorch off ("Disabling PyTorch because
PyTorch >= 2.6 is required") and AutoModel is an ImportError. So here
transformers resolves and downloads everything from_pretrained does
(AutoConfig, AutoTokenizer, the sharded checkpoint through its own
cached_file / get_checkpoint_shard_files) and the weights are loaded into a
GPT-2 written in torch 1.13 (hubtiny.TinyGPT2); the full
AutoModel.from_pretrained test runs where transformers enables PyTorch and is
skipped, saying why, where it does not."""
import os

import pytest

import hubrepos
from hubclients import SENTENCE, TINY, want_ids
from hubclients import hub, run, runpy  # noqa: F401  (fixtures)

pytestmark = pytest.mark.filterwarnings("ignore")


# ---------------------------------------------------------------------------
# transformers


def test_transformers_config_and_tokenizer_from_pretrained(hub, runpy):
    commit = hubrepos.commit_of(hub.files[TINY])
    local = os.path.join(hub.root, TINY)
    out = runpy(f"""
import json
from transformers import AutoConfig, AutoTokenizer
res = {{}}
for name, src, rev in (("hub", {TINY!r}, None), ("commit", {TINY!r}, {commit!r}),
                       ("local", {local!r}, None)):
    c = AutoConfig.from_pretrained(src, revision=rev)
    t = AutoTokenizer.from_pretrained(src, revision=rev)
    d = c.to_dict()
    d.pop("_name_or_path", None)
    res[name] = {{"config_class": type(c).__name__, "config": d,
                 "tok_class": type(t).__name__, "ids": t({SENTENCE!r})["input_ids"],
                 "files": sorted(getattr(t, "vocab_files_names", {{}})), "pad": t.pad_token}}
print(json.dumps(res))
""")
    assert out["local"]["ids"] == want_ids(hub)
    assert out["local"]["config_class"] == "GPT2Config" and out["local"]["pad"] == "[PAD]"
    for name in ("hub", "commit"):
        assert out[name] == out["local"], name


def test_transformers_resolves_a_sharded_checkpoint_and_the_weights_load_into_torch(hub, runpy):
    """What from_pretrained does before it builds the model, with
    transformers' own functions: look for model.safetensors (absent: a
    404 the client must take as "no such file"), then the index, then every
    shard. The shards are loaded into hubtiny.TinyGPT2 with torch and give the
    same output as the files on disk."""
    local = os.path.join(hub.root, TINY)
    out = runpy(f"""
import json, os, torch
from safetensors.torch import load_file
from transformers.utils.hub import cached_file, get_checkpoint_shard_files, has_file
import hubtiny
single = cached_file({TINY!r}, "model.safetensors", _raise_exceptions_for_missing_entries=False,
                     _raise_exceptions_for_connection_errors=False)
index = cached_file({TINY!r}, "model.safetensors.index.json")
shards, meta = get_checkpoint_shard_files({TINY!r}, index)
def model_from(paths):
    state = {{}}
    for p in paths:
        state.update(load_file(p))
    m = hubtiny.TinyGPT2(**hubtiny.config_kwargs())
    m.load_state_dict(state, strict=True)
    ids = torch.tensor([[hubtiny.WORDS.index(w) for w in {SENTENCE!r}.split()]])
    with torch.no_grad():
        return state, m(ids)
got_state, got = model_from(shards)
want_state, want = model_from([os.path.join({local!r}, s) for s in sorted(set(meta["weight_map"].values()))])
print(json.dumps({{"single": single, "shards": shards, "keys": meta["all_checkpoint_keys"],
                  "same_weights": sorted(got_state) == sorted(want_state) and
                                  all(torch.equal(got_state[k], want_state[k]) for k in got_state),
                  "same_output": bool(torch.equal(got, want)), "shape": list(got.shape),
                  "finite": bool(torch.isfinite(got).all()),
                  "has": [has_file({TINY!r}, f) for f in ("config.json", "model-00001-of-00002.safetensors",
                                                         "model.safetensors", "pytorch_model.bin")]}}))
""")
    commit = hubrepos.commit_of(hub.files[TINY])
    assert out["single"] is None
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert [os.path.basename(s) for s in out["shards"]] == names
    for s in out["shards"]:
        assert f"/snapshots/{commit}/" in s
        with open(s, "rb") as f:
            assert f.read() == hub.files[TINY][os.path.basename(s)]
    assert out["same_weights"] and out["same_output"] and out["finite"]
    assert out["shape"] == [1, len(SENTENCE.split()), 32]
    assert out["has"] == [True, True, False, False]


def test_transformers_errors_are_its_own_messages(hub, runpy):
    sd = os.path.join(hub.root, "org/sd")
    out = runpy(f"""
import json
from transformers import AutoConfig, AutoTokenizer
res = []
for call in (lambda: AutoConfig.from_pretrained("org/nope"),
             lambda: AutoConfig.from_pretrained({TINY!r}, revision="v2"),
             lambda: AutoConfig.from_pretrained({TINY!r}, revision="0" * 40),
             lambda: AutoConfig.from_pretrained("org/sd"),
             lambda: AutoConfig.from_pretrained({sd!r}),
             lambda: AutoTokenizer.from_pretrained("org/sd"),
             lambda: AutoTokenizer.from_pretrained({sd!r})):
    try:
        call()
        res.append("no error")
    except Exception as e:
        res.append(type(e).__name__ + ": " + str(e))
print(json.dumps(res))
""")
    assert out[0].startswith("OSError: org/nope is not a local folder and is not a valid model identifier"), out[0]
    assert out[1].startswith("OSError: v2 is not a valid git identifier"), out[1]
    assert out[2].startswith("OSError: " + "0" * 40 + " is not a valid git identifier"), out[2]
    # A diffusers repo has no config.json or tokenizer at its top: through
    # tensord (404 EntryNotFound for each file transformers looks for) the
    # error is the one the same directory gives from disk.
    assert out[3] == out[4].replace(sd, "org/sd") and out[3] != "no error", out[3:5]
    assert out[5] == out[6].replace(sd, "org/sd") and out[5] != "no error", out[5:7]
    for o in out:
        assert "JSONDecodeError" not in o and "Expecting value" not in o, o


def test_transformers_automodel_from_pretrained(hub, runpy):
    """The full from_pretrained. Runs only where transformers enables PyTorch
    (torch >= 2.6 for 5.23.0): not with Debian 12's torch 1.13 (see the
    module's docstring); the test above covers everything before the model
    is built."""
    local = os.path.join(hub.root, TINY)
    out = runpy("""
import json, torch
from transformers.utils import is_torch_available
print(json.dumps({"ok": is_torch_available(), "torch": torch.__version__}))
""")
    if not out["ok"]:
        pytest.skip(f"transformers turns PyTorch off with torch {out['torch']} (needs >= 2.6)")
    out = runpy(f"""
import json, torch
from transformers import AutoModel
import hubtiny
ids = torch.tensor([[hubtiny.WORDS.index(w) for w in {SENTENCE!r}.split()]])
res = {{}}
states = []
for name, src in (("hub", {TINY!r}), ("local", {local!r})):
    m = AutoModel.from_pretrained(src).eval()
    with torch.no_grad():
        res[name] = m(ids).last_hidden_state
    states.append(m.state_dict())
mine = hubtiny.TinyGPT2(**hubtiny.config_kwargs())
mine.load_state_dict({{k: v for k, v in states[0].items() if not k.endswith("attn.bias")}})
with torch.no_grad():
    ref = mine(ids)
print(json.dumps({{"class": type(m).__name__,
                  "same_weights": all(torch.equal(states[0][k], states[1][k]) for k in states[1]),
                  "same_output": bool(torch.equal(res["hub"], res["local"])),
                  "close_to_mine": bool(torch.allclose(res["hub"], ref, atol=1e-5))}}))
""")
    assert out == {"class": "GPT2Model", "same_weights": True, "same_output": True, "close_to_mine": True}
