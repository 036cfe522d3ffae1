"""What the Hub-client tests share (test_hub_clients.py: the `hf` command
line; test_hub_transformers.py: transformers' from_pretrained): the repos
(hubrepos.py's, plus org/tiny from hubtiny.py and org/odd with names a URL
must percent-encode), a daemon serving them, and clients run in a child
interpreter with HF_ENDPOINT at it and an empty cache.

The fixtures `hub`, `run` and `runpy` live here, not in conftest.py, because
test_hub.py and test_hub_http.py have `hub` fixtures of their own; the two
modules import them, and each gets its own module-scoped daemon.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

import hubrepos
import tdutil

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = "org/tiny"
ODD = "org/odd"
SENTENCE = "the daemon serves model weights to every worker over http fast"


def child_env(port, cache):
    env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HUB_CACHE=str(cache),
               HF_HOME=os.path.join(str(cache), "home"), HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_XET="1", NO_COLOR="1", TRANSFORMERS_VERBOSITY="error",
               PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("HF_TOKEN", None)
    return env


@pytest.fixture(scope="module")
def hub():
    base = tempfile.mkdtemp(prefix="tensord-hubc-")
    root = os.path.join(base, "models")
    files = hubrepos.make_repos(root)
    tiny = os.path.join(root, TINY)
    p = subprocess.run([sys.executable, "-c", f"import hubtiny; hubtiny.make_repo({tiny!r})"],
                       env=dict(child_env(1, os.path.join(base, "gen-cache")), HF_HUB_OFFLINE="1"),
                       capture_output=True,
                       text=True, timeout=120, cwd=base)
    assert p.returncode == 0, f"generating {TINY} failed:\n{p.stderr}"
    # Names a URL must carry percent-encoded: space, non-ASCII, & # % + ; = , ' " [ ].
    odd = {"ü b&c#%20+.txt": b"hello\n", "sub dir/a=b;c,d.json": b'{"a": 1}',
           "quote'q\"uote.txt": b"q\n", "plus+name[1].md": b"# odd\n"}
    for path, data in odd.items():
        os.makedirs(os.path.dirname(os.path.join(root, ODD, path)), exist_ok=True)
        with open(os.path.join(root, ODD, path), "wb") as f:
            f.write(data)
    files[ODD] = odd
    files[TINY] = {}
    for name in os.listdir(tiny):
        with open(os.path.join(tiny, name), "rb") as f:
            files[TINY][name] = f.read()
    d = tdutil.Daemon(root, base)
    d.start()
    d.files, d.root = files, root
    try:
        yield d
        d.stop_checked()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def run(hub, tmp_path):
    """run(argv) -> CompletedProcess of a client with HF_ENDPOINT at the
    daemon and an empty cache; runpy(code) -> the JSON its last line prints."""
    env = child_env(hub.port, tmp_path / "cache")

    def _run(argv, timeout=120, env_extra=None):
        return subprocess.run(argv, env=dict(env, **(env_extra or {})), capture_output=True,
                              text=True, timeout=timeout, cwd=str(tmp_path))
    return _run


@pytest.fixture
def runpy(run):
    def _runpy(code):
        p = run([sys.executable, "-c", code])
        assert p.returncode == 0, f"client failed:\n{p.stdout}\n{p.stderr}"
        return json.loads(p.stdout.strip().splitlines()[-1])
    return _runpy


def want_ids(hub):
    """SENTENCE's token ids, read from the tokenizer.json written to disk."""
    vocab = json.loads(hub.files[TINY]["tokenizer.json"])["model"]["vocab"]
    return [vocab[w] for w in SENTENCE.split()]
