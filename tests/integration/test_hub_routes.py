"""The Hub routes clients reach for beyond downloads (issue 23, item 8),
driven by the real huggingface_hub: list_repo_refs, list_repo_commits,
model_info().card_data from the README's YAML front matter (compared with
PyYAML's reading of the same block, the parser huggingface_hub itself uses
for local cards), RepositoryNotFoundError for datasets and spaces, and the
X-Linked-* headers on the redirect from a branch to its commit."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
import yaml

import faultlib
import hubrepos
import tdutil

SLACK = faultlib.SLACK

# Front matter whose every value means the same in YAML 1.1 (PyYAML) and
# 1.2 (the core schema tensord and the Hub read), with an anchor.
CARD_YAML = """\
license: apache-2.0
language:
- en
- fr
tags: [text-generation, 'quoted: yes']
library_name: transformers
pipeline_tag: text-generation
base_model: &base org/sharded
derived_from: *base
inference: false
widget: null
thresholds: {low: -1.5, high: 2.25e+3, count: 12}
model-index:
- name: carded
  results:
  - task: {type: text-generation}
    dataset: {name: wiki, type: wikitext}
    metrics:
    - {type: accuracy, value: 0.875, verified: true}
description: "a \\"quoted\\" line\\twith a tab, ünïcödé"
"""
CARD_README = "---\n" + CARD_YAML + "---\n\n# carded\n\nText after the front matter.\n"


@pytest.fixture(scope="module")
def hub():
    base = tempfile.mkdtemp(prefix="tensord-hubroutes-")
    root = os.path.join(base, "models")
    files = hubrepos.make_repos(root, big_bytes=(10 << 20) + 1)

    def put(repo, path, data):
        os.makedirs(os.path.join(root, repo, os.path.dirname(path)), exist_ok=True)
        with open(os.path.join(root, repo, path), "wb") as f:
            f.write(data)
        files.setdefault(repo, {})[path] = data
    put("org/carded", "README.md", CARD_README.encode())
    put("org/carded", "config.json", b"{}")
    put("org/badcard", "README.md", b"---\nlicense: [mit\n---\n")
    laughs = "---\na: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi")) + "---\n"
    put("org/laughs", "README.md", laughs.encode())
    d = tdutil.Daemon(root, base)
    d.start().wait_hashed(60 * SLACK)
    d.files, d.root = files, root
    try:
        yield d
        d.stop_checked()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_hf(hub, code):
    """Runs code in a child interpreter (huggingface_hub reads HF_ENDPOINT at
    import) and returns the JSON it prints last."""
    env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{hub.port}",
               HF_HUB_CACHE=os.path.join(hub.workdir, "hf-cache"), HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_XET="1")
    env.pop("HF_TOKEN", None)
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, f"client failed:\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_refs_commits_card_and_missing_repos_with_huggingface_hub(hub):
    sha = hubrepos.commit_of(hub.files["org/carded"])
    out = run_hf(hub, f"""
import json
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub.utils import RepositoryNotFoundError, RevisionNotFoundError
api = HfApi()
res = {{}}
refs = api.list_repo_refs("org/carded")
res["branches"] = [[b.name, b.ref, b.target_commit] for b in refs.branches]
res["tags"], res["converts"] = refs.tags, refs.converts
res["prs"] = api.list_repo_refs("org/carded", include_pull_requests=True).pull_requests
for rev in (None, "main", "{sha}"):
    cs = api.list_repo_commits("org/carded", revision=rev)
    res[f"commits {{rev}}"] = [[c.commit_id, c.title, c.authors, c.created_at.isoformat()]
                               for c in cs]
mi = api.model_info("org/carded")
cd = mi.card_data
res["card"] = [cd.license, cd.language, cd.tags, cd.base_model, cd.library_name,
               cd.eval_results[0].metric_type, cd.eval_results[0].metric_value,
               cd.eval_results[0].verified]
res["card_by_commit"] = api.model_info("org/carded", revision="{sha}").card_data.license
res["badcard"] = api.model_info("org/badcard").card_data
res["laughs"] = api.model_info("org/laughs").card_data
res["nocard"] = api.model_info("org/sharded").card_data
def raises(f, exc):
    try:
        f()
    except exc as e:
        return type(e).__name__
    except Exception as e:
        return "wrong: " + repr(e)
    return "no error"
res["errors"] = [
    raises(lambda: api.dataset_info("nobody/nothing"), RepositoryNotFoundError),
    raises(lambda: api.dataset_info("org/carded"), RepositoryNotFoundError),
    raises(lambda: api.space_info("nobody/nothing"), RepositoryNotFoundError),
    raises(lambda: api.list_repo_files("nobody/nothing", repo_type="dataset"),
           RepositoryNotFoundError),
    raises(lambda: hf_hub_download("nobody/nothing", "x.csv", repo_type="dataset"),
           RepositoryNotFoundError),
    raises(lambda: api.list_repo_refs("nope"), RepositoryNotFoundError),
    raises(lambda: api.list_repo_commits("org/carded", revision="v9"), RevisionNotFoundError),
    raises(lambda: api.list_repo_commits("org/carded", revision="0" * 40), RevisionNotFoundError),
]
res["datasets"] = list(api.list_datasets(limit=5))
print(json.dumps(res))
""")
    assert out["branches"] == [["main", "refs/heads/main", sha]]
    assert out["tags"] == [] and out["converts"] == [] and out["prs"] == []
    for rev in ("None", "main", sha):
        (c,) = out[f"commits {rev}"]
        assert c[0] == sha and c[1] and c[2] == [] and c[3] == "1970-01-01T00:00:00+00:00"
    assert out["card"] == ["apache-2.0", ["en", "fr"], ["text-generation", "quoted: yes"],
                           "org/sharded", "transformers", "accuracy", 0.875, True]
    assert out["card_by_commit"] == "apache-2.0"
    # the document's cardData is what PyYAML reads from the same block
    want = yaml.safe_load(CARD_YAML)
    assert want["license"] == "apache-2.0" and want["derived_from"] == "org/sharded"
    for path in ("/api/models/org/carded", f"/api/models/org/carded/revision/{sha}"):
        assert json.loads(hub.get(path).body)["cardData"] == want
    assert out["badcard"] is None and out["laughs"] is None and out["nocard"] is None
    assert out["errors"] == ["RepositoryNotFoundError"] * 6 + ["RevisionNotFoundError"] * 2
    assert out["datasets"] == []


def hub_error(r, status, code):
    assert r.status == status, r
    assert r.header("X-Error-Code") == code, r
    if r.body:  # not for HEAD
        assert isinstance(json.loads(r.body)["error"], str), r


def test_dataset_and_space_routes_are_repo_not_found(hub):
    for method, path in (("GET", "/api/datasets/org/x"), ("GET", "/api/datasets/x"),
                         ("GET", "/api/datasets/org/x/revision/main"),
                         ("GET", "/api/datasets/org/x/tree/main/a/b"),
                         ("POST", "/api/datasets/org/x/paths-info/main"),
                         ("GET", "/api/spaces/org/x/refs"), ("HEAD", "/api/spaces/x"),
                         ("GET", "/datasets/org/x/resolve/main/data.csv"),
                         ("HEAD", "/datasets/x/resolve/main/a/b.csv"),
                         ("GET", "/spaces/org/x/raw/main/app.py")):
        r = hub.request(method, path, body=b"" if method == "POST" else None)
        hub_error(r, 404, "RepoNotFound")
        if method != "HEAD":
            assert "Repository not found" in json.loads(r.body)["error"], path
    for path in ("/api/datasets", "/api/spaces"):
        r = hub.get(path)
        assert r.status == 200 and json.loads(r.body) == [], r
    # a model repo under a directory named "datasets" is still a model
    # repo: the reading that names an existing repo wins (none here)
    r = hub.get("/datasets/resolve/main/x")
    hub_error(r, 404, "RepoNotFound")


def test_refs_and_commits_over_http(hub):
    sha = hubrepos.commit_of(hub.files["org/deep"])
    r = hub.get("/api/models/org/deep/refs")
    assert r.status == 200 and r.header("Cache-Control") == "no-cache"
    assert r.header("X-Repo-Commit") == sha
    assert json.loads(r.body)["branches"][0]["targetCommit"] == sha
    for rev, cc in (("main", "no-cache"), (sha, "public, max-age=31536000, immutable")):
        r = hub.get(f"/api/models/org/deep/commits/{rev}")
        assert r.status == 200 and r.header("Cache-Control") == cc, r
        (c,) = json.loads(r.body)
        assert c["id"] == sha and c["date"] == "1970-01-01T00:00:00.000Z"
        h = hub.head(f"/api/models/org/deep/commits/{rev}")
        assert h.status == 200 and h.body == b"" and h.header("Content-Length") == str(len(r.body))
    hub_error(hub.get("/api/models/org/deep/commits/" + "1" * 40), 404, "RevisionNotFound")
    hub_error(hub.get("/api/models/org/none/commits/main"), 404, "RepoNotFound")
    hub_error(hub.get("/api/models/org/none/refs"), 404, "RepoNotFound")
    assert hub.request("POST", "/api/models/org/deep/refs", body=b"").status == 405


def test_branch_redirect_carries_the_linked_file(hub):
    sha = hubrepos.commit_of(hub.files["org/sharded"])
    for path in ("model-00001-of-00002.safetensors", "big.bin"):
        data = hub.files["org/sharded"][path]
        for method in ("GET", "HEAD"):
            r = hub.request(method, f"/org/sharded/resolve/main/{path}")
            assert r.status == 302, r
            assert r.header("X-Linked-Etag") == '"%s"' % hashlib.sha256(data).hexdigest()
            assert r.header("X-Linked-Size") == str(len(data))
            assert r.header("X-Repo-Commit") == sha
    # a small file's redirect has none (the Hub answers those in place)
    r = hub.head("/org/sharded/resolve/main/config.json")
    assert r.status == 302 and r.header("X-Linked-Etag") is None
    assert r.header("X-Linked-Size") is None
    # huggingface_hub follows it and gets the same metadata from the file
    out = run_hf(hub, """
import json
from huggingface_hub import get_hf_file_metadata, hf_hub_url
m = get_hf_file_metadata(hf_hub_url("org/sharded", "big.bin"))
print(json.dumps([m.etag, m.size, m.commit_hash]))
""")
    data = hub.files["org/sharded"]["big.bin"]
    assert out == [hashlib.sha256(data).hexdigest(), len(data), sha]


def test_card_follows_the_readme(hub):
    """The card is the README's at the commit: an unreadable YAML leaves it
    out without failing the document, and a README rewritten gives the new
    commit its new card."""
    r = hub.get("/api/models/org/badcard")
    assert r.status == 200 and "cardData" not in json.loads(r.body)
    path = os.path.join(hub.root, "org/carded/README.md")
    try:
        with open(path + ".new", "w") as f:
            f.write("---\nlicense: mit\n---\n")
        os.replace(path + ".new", path)
        new = hubrepos.commit_of(dict(hub.files["org/carded"],
                                      **{"README.md": b"---\nlicense: mit\n---\n"}))
        for _ in range(100):
            r = hub.get(f"/api/models/org/carded/revision/{new}")
            if r.status == 200:
                break
            time.sleep(0.1)  # the watcher rescans, the hasher hashes
        assert r.status == 200, r
        assert json.loads(r.body)["cardData"] == {"license": "mit"}
    finally:
        with open(path, "w") as f:
            f.write(CARD_README)
