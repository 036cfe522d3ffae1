"""The Hugging Face endpoint driven by the real clients (huggingface_hub and
safetensors from tests/requirements.txt) with HF_ENDPOINT pointed at a
daemon serving generated repos (hubrepos.py): downloads are byte-exact,
revisions, blob and tree ids are checked against independent computations
(hashlib, and git itself over the same files with LFS pointers), and the
errors come out as the clients' own exception types."""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile

import ml_dtypes  # noqa: F401  (lets safetensors.numpy load BF16)
import numpy as np
import pytest

import hubrepos
import tdutil

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def hub():
    base = tempfile.mkdtemp(prefix="tensord-hub-")
    root = os.path.join(base, "models")
    files = hubrepos.make_repos(root)
    d = tdutil.Daemon(root, base)
    d.start()
    d.files = files
    d.root = root
    d.base = base
    try:
        yield d
        d.stop_checked()
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def hf(hub, tmp_path, monkeypatch):
    """huggingface_hub with HF_ENDPOINT at the daemon and an empty cache.
    The package reads its environment at import: it is imported afresh in a
    child interpreter per call (run_hf), never in the test process."""
    env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{hub.port}",
               HF_HUB_CACHE=str(tmp_path / "cache"), HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_XET="1", HF_TOKEN="")
    env.pop("HF_TOKEN")

    def run(code, **extra):
        e = dict(env, **extra)
        p = subprocess.run([tdutil.sys.executable, "-c", code], env=e, capture_output=True,
                           text=True, timeout=120, cwd=str(tmp_path))
        assert p.returncode == 0, f"client failed:\n{p.stdout}\n{p.stderr}"
        return json.loads(p.stdout.strip().splitlines()[-1])
    return run


def git_blob(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(path, data):
    return path.endswith(".safetensors") or len(data) > 10 * 1024 * 1024


def lfs_pointer(data):
    return (b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n"
            % (hashlib.sha256(data).hexdigest().encode(), len(data)))


def blob_id(path, data):
    return git_blob(lfs_pointer(data)) if is_lfs(path, data) else git_blob(data)


# ---------------------------------------------------------------------------
# Downloads


def test_hf_hub_download_is_byte_exact_and_loads(hub, hf):
    out = hf("""
import json
from huggingface_hub import hf_hub_download
import ml_dtypes
from safetensors.numpy import load_file
p = hf_hub_download("single", "model.safetensors")
q = hf_hub_download("org/sharded", "model-00002-of-00002.safetensors")
c = hf_hub_download("org/sd", "unet/config.json")
big = hf_hub_download("org/sharded", "big.bin")
t = load_file(p)
print(json.dumps({"p": p, "q": q, "c": c, "big": big,
                  "keys": sorted(t), "sum": float(sum(float(v.astype('float64').sum()) for v in t.values()))}))
""")
    files = hub.files
    for key, (repo, path) in {"p": ("single", "model.safetensors"),
                              "q": ("org/sharded", "model-00002-of-00002.safetensors"),
                              "c": ("org/sd", "unet/config.json"),
                              "big": ("org/sharded", "big.bin")}.items():
        with open(out[key], "rb") as f:
            assert f.read() == files[repo][path], f"{repo}/{path} differs"
        # The client's cache layout: snapshots/<commit>/<path>.
        assert f"/snapshots/{hubrepos.commit_of(files[repo])}/{path}" in out[key]
    from safetensors.numpy import load_file
    want = load_file(os.path.join(hub.root, "single", "model.safetensors"))
    assert out["keys"] == sorted(want)
    assert abs(out["sum"] - sum(float(v.astype("float64").sum()) for v in want.values())) < 1e-6


def test_snapshot_download_whole_and_with_patterns(hub, hf):
    out = hf("""
import json, os
from huggingface_hub import snapshot_download
def walk(d):
    return sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs)
a = snapshot_download("org/sd")
b = snapshot_download("org/sharded", allow_patterns=["*.json", "*.safetensors"])
print(json.dumps({"a": a, "fa": walk(a), "b": b, "fb": walk(b)}))
""")
    sd = hub.files["org/sd"]
    assert out["fa"] == sorted(sd), "snapshot of org/sd: files differ (hidden files must stay out)"
    for path, data in sd.items():
        with open(os.path.join(out["a"], path), "rb") as f:
            assert f.read() == data, path
    assert out["fb"] == sorted(p for p in hub.files["org/sharded"] if p != "big.bin")
    from safetensors.numpy import load_file
    for shard in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        got = load_file(os.path.join(out["b"], shard))
        want = load_file(os.path.join(hub.root, "org/sharded", shard))
        assert sorted(got) == sorted(want)
        for k in got:
            assert np.array_equal(got[k], want[k])


def test_model_info_siblings_and_revision(hub, hf):
    out = hf("""
import json
from huggingface_hub import HfApi
api = HfApi()
res = {}
for repo in ("single", "org/sharded", "org/sd", "org/deep"):
    mi = api.model_info(repo, files_metadata=True)
    res[repo] = {"id": mi.id, "sha": mi.sha, "private": mi.private, "gated": mi.gated,
                 "author": mi.author, "last": mi.last_modified.isoformat(),
                 "st": dict(mi.safetensors) if mi.safetensors else None,
                 "siblings": [[s.rfilename, s.size, s.blob_id, s.lfs and s.lfs.sha256,
                               s.lfs and s.lfs.size, s.lfs and s.lfs.pointer_size]
                              for s in mi.siblings]}
rev = api.model_info("org/sd", revision=res["org/sd"]["sha"])
res["rev_sha"] = rev.sha
print(json.dumps(res))
""")
    for repo, files in hub.files.items():
        got = out[repo]
        assert got["id"] == repo and got["private"] is False and got["gated"] is False
        assert got["sha"] == hubrepos.commit_of(files)
        assert got["author"] == (repo.split("/")[0] if "/" in repo else None)
        names = [s[0] for s in got["siblings"]]
        assert names == sorted(files, key=lambda p: p.encode())
        for name, size, blob, sha, lsize, psize in got["siblings"]:
            data = files[name]
            assert size == len(data)
            assert blob == blob_id(name, data), name
            if is_lfs(name, data):
                assert sha == hashlib.sha256(data).hexdigest() and lsize == len(data)
                assert psize == len(lfs_pointer(data))
            else:
                assert sha is None
    assert out["rev_sha"] == out["org/sd"]["sha"]
    # Parameters by dtype of the repo's own model; a diffusers repo has none.
    assert out["org/sharded"]["st"] == {"parameters": {"F32": 32 * 16 + 32, "BF16": 16 * 32},
                                        "total": 32 * 16 + 32 + 16 * 32}
    assert out["single"]["st"]["total"] == 16 * 8 + 8 + 3 * 2
    assert out["org/sd"]["st"] is None


def test_trees_and_blobs_match_git(hub, hf, tmp_path):
    """Blob and tree ids are git's for the same files stored with LFS
    pointers: git itself computes them here."""
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    out = hf("""
import json
from huggingface_hub import HfApi
api = HfApi()
res = {}
for repo in ("org/sd", "org/deep"):
    res[repo] = [[type(e).__name__, e.path, getattr(e, "blob_id", None) or e.tree_id]
                 for e in api.list_repo_tree(repo, recursive=True)]
res["files"] = api.list_repo_files("org/deep")
res["top"] = [e.path for e in api.list_repo_tree("org/deep")]
res["sub"] = [e.path for e in api.list_repo_tree("org/deep", path_in_repo="a")]
res["subrec"] = [e.path for e in api.list_repo_tree("org/deep", path_in_repo="a/b", recursive=True)]
print(json.dumps(res))
""")
    for repo in ("org/sd", "org/deep"):
        g = tmp_path / ("git-" + repo.replace("/", "-"))
        g.mkdir()
        for path, data in hub.files[repo].items():
            p = g / path
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(lfs_pointer(data) if is_lfs(path, data) else data)
        run = lambda *a: subprocess.run(["git", "-C", str(g)] + list(a), check=True,
                                        capture_output=True, text=True).stdout.strip()
        run("init", "-q")
        run("add", "-A")
        tree = run("write-tree")
        for kind, path, oid in out[repo]:
            assert run("rev-parse", f"{tree}:{path}") == oid, f"{repo} {kind} {path}"
        listed = {p for k, p, _ in out[repo] if k == "RepoFile"}
        assert listed == set(hub.files[repo])
    assert out["files"] == sorted(hub.files["org/deep"], key=lambda p: p.encode())
    assert sorted(out["top"]) == ["a", "a.txt", "top.json"]
    assert sorted(out["sub"]) == ["a/b", "a/x.txt"]
    assert sorted(out["subrec"]) == ["a/b/c", "a/b/c/d.txt"]


def test_paths_info_and_safetensors_metadata(hub, hf):
    out = hf("""
import json
from huggingface_hub import HfApi, get_safetensors_metadata
api = HfApi()
pi = api.get_paths_info("org/sd", ["unet", "model_index.json", "no/such", "vae/config.json"])
m1 = get_safetensors_metadata("org/sharded")
m2 = get_safetensors_metadata("single")
print(json.dumps({"pi": [[type(e).__name__, e.path] for e in pi],
                  "m1": [m1.sharded, m1.parameter_count, sorted(m1.weight_map)],
                  "m2": [m2.sharded, m2.parameter_count]}))
""")
    assert out["pi"] == [["RepoFolder", "unet"], ["RepoFile", "model_index.json"],
                         ["RepoFile", "vae/config.json"]]
    assert out["m1"] == [True, {"F32": 544, "BF16": 512}, ["a.bias", "a.weight", "b.weight"]]
    assert out["m2"][0] is False and out["m2"][1] == {"F32": 128 + 6, "F16": 8}


def test_hf_file_system_reads_a_range(hub, hf):
    out = hf("""
import json
from huggingface_hub import HfFileSystem
fs = HfFileSystem()
with fs.open("org/sharded/big.bin", "rb", block_size=65536) as f:
    f.seek(5_000_000)
    part = f.read(4096)
info = fs.info("org/sharded/big.bin")
print(json.dumps({"part": part.hex(), "size": info["size"],
                  "ls": sorted(fs.ls("org/sd", detail=False))}))
""")
    big = hub.files["org/sharded"]["big.bin"]
    assert bytes.fromhex(out["part"]) == big[5_000_000:5_004_096]
    assert out["size"] == len(big)
    assert out["ls"] == ["org/sd/model_index.json", "org/sd/scheduler", "org/sd/text_encoder",
                         "org/sd/unet", "org/sd/vae"]


def test_missing_repo_file_and_revision_raise_the_clients_errors(hub, hf):
    out = hf("""
import json
from huggingface_hub import hf_hub_download, HfApi
from huggingface_hub.errors import (RepositoryNotFoundError, RevisionNotFoundError,
                                    EntryNotFoundError)
res = []
for call in (lambda: HfApi().model_info("org/nope"),
             lambda: HfApi().model_info("nope"),
             lambda: hf_hub_download("org/nope", "config.json"),
             lambda: hf_hub_download("single", "nope.json"),
             lambda: hf_hub_download("single", "config.json", revision="v1.0"),
             lambda: hf_hub_download("single", "config.json", revision="0" * 40),
             lambda: HfApi().list_repo_files("single", revision="dev")):
    try:
        call()
        res.append("no error")
    except RepositoryNotFoundError:
        res.append("repo")
    except RevisionNotFoundError:
        res.append("revision")
    except EntryNotFoundError:
        res.append("entry")
print(json.dumps(res))
""")
    assert out == ["repo", "repo", "repo", "entry", "revision", "revision", "revision"]
