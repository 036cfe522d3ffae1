"""The Hugging Face endpoint at the HTTP level: the Hub's headers and error
dialect, caching headers, HEAD = GET, Range and conditional requests on
commit URLs, the redirect from a branch to its commit, waiting for hashes
(and 503 with Retry-After when a request may not wait), what a commit URL
does after the files change, bearer tokens, hostile paths and bodies, and
Content-Disposition on /v1 tensor downloads (checked with curl -OJ)."""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse

import pytest

import faultlib
import hubrepos
import tdutil

SLACK = faultlib.SLACK


@pytest.fixture(scope="module")
def hub():
    base = tempfile.mkdtemp(prefix="tensord-hubhttp-")
    root = os.path.join(base, "models")
    files = hubrepos.make_repos(root, big_bytes=(10 << 20) + 1)
    d = tdutil.Daemon(root, base)
    d.start().wait_hashed(60 * SLACK)  # the list leaves out revisions not known yet
    d.files, d.root = files, root
    try:
        yield d
        d.stop_checked()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def hub_error(r, status, code=None):
    """An error in the Hub's dialect: {"error": "message"}, X-Error-Code."""
    assert r.status == status, r
    assert r.ctype == "application/json", r
    body = json.loads(r.body)
    assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], r
    assert r.header("X-Error-Code") == code, r
    return body["error"]


def commit(hub, repo):
    return hubrepos.commit_of(hub.files[repo])


def test_branch_redirects_to_its_commit(hub):
    c = commit(hub, "org/sd")
    for rev in ("main", "HEAD"):
        for kind in ("resolve", "raw"):
            for method in ("GET", "HEAD"):
                r = hub.request(method, f"/org/sd/{kind}/{rev}/unet/config.json")
                assert r.status == 302, r
                assert r.header("Location") == f"/org/sd/{kind}/{c}/unet/config.json"
                assert r.header("X-Repo-Commit") == c
                assert r.header("Cache-Control") == "no-cache"
    # Names are percent-encoded in the Location.
    r = hub.get("/single/resolve/main/README.md")
    assert r.header("Location") == f"/single/resolve/{commit(hub, 'single')}/README.md"


def test_commit_url_headers_small_and_lfs(hub):
    c = commit(hub, "org/sharded")
    small = hub.files["org/sharded"]["config.json"]
    r = hub.get(f"/org/sharded/resolve/{c}/config.json")
    assert r.status == 200 and r.body == small
    assert r.header("ETag") == '"%s"' % hashlib.sha1(b"blob %d\0" % len(small) + small).hexdigest()
    assert r.header("X-Linked-Etag") is None and r.header("X-Linked-Size") is None
    assert r.header("X-Repo-Commit") == c
    assert r.header("Cache-Control") == "public, max-age=31536000, immutable"
    assert r.header("Accept-Ranges") == "bytes"
    assert r.header("Content-Type") == "application/json"
    assert r.header("Content-Disposition") == \
        "attachment; filename=\"config.json\"; filename*=UTF-8''config.json"
    for path in ("model-00001-of-00002.safetensors", "big.bin"):
        data = hub.files["org/sharded"][path]
        r = hub.head(f"/org/sharded/resolve/{c}/{path}")
        sha = hashlib.sha256(data).hexdigest()
        assert r.status == 200 and r.body == b""
        assert r.header("ETag") == f'"{sha}"' and r.header("X-Linked-Etag") == f'"{sha}"'
        assert r.header("X-Linked-Size") == str(len(data))
        assert r.header("Content-Length") == str(len(data))
    r = hub.get(f"/org/sharded/raw/{c}/config.json")
    assert r.status == 200 and r.body == small
    assert r.header("Content-Disposition").startswith("inline; ")


def test_head_equals_get_and_ranges(hub):
    c = commit(hub, "org/sharded")
    data = hub.files["org/sharded"]["big.bin"]
    url = f"/org/sharded/resolve/{c}/big.bin"
    g, h = hub.get(url), hub.head(url)
    assert g.status == h.status == 200 and g.body == data and h.body == b""
    skip = {"date"}
    assert {k: v for k, v in g.headers.items() if k.lower() not in skip} == \
        {k: v for k, v in h.headers.items() if k.lower() not in skip}
    etag = g.header("ETag")
    r = hub.get(url, {"Range": "bytes=100-199"})
    assert r.status == 206 and r.body == data[100:200]
    assert r.header("Content-Range") == f"bytes 100-199/{len(data)}"
    assert r.header("X-Repo-Commit") == c
    # A resume: Range with If-Range of the strong ETag.
    r = hub.get(url, {"Range": f"bytes={len(data) - 10}-", "If-Range": etag})
    assert r.status == 206 and r.body == data[-10:]
    r = hub.get(url, {"Range": "bytes=0-9", "If-Range": '"0000"'})
    assert r.status == 200 and r.body == data
    r = hub.get(url, {"If-None-Match": etag})
    assert r.status == 304 and r.body == b""
    assert r.header("ETag") == etag and r.header("X-Repo-Commit") == c
    assert r.header("Cache-Control") == "public, max-age=31536000, immutable"
    r = hub.get(url, {"Range": f"bytes={len(data) + 5}-"})
    assert r.status == 416


def test_documents_cache_by_revision(hub):
    c = commit(hub, "org/deep")
    for path, cc in ((f"/api/models/org/deep", "no-cache"),
                     (f"/api/models/org/deep/revision/main", "no-cache"),
                     (f"/api/models/org/deep/revision/{c}", "public, max-age=31536000, immutable"),
                     (f"/api/models/org/deep/tree/main", "no-cache"),
                     (f"/api/models/org/deep/tree/{c}/a", "public, max-age=31536000, immutable")):
        r = hub.get(path)
        assert r.status == 200 and r.ctype == "application/json", r
        assert r.header("Cache-Control") == cc, path
        assert r.header("ETag", "").startswith('"'), path
        assert hub.get(path, {"If-None-Match": r.header("ETag")}).status == 304
        h = hub.head(path)
        assert h.header("Content-Length") == str(len(r.body)) and h.body == b""


def test_errors_speak_the_hubs_dialect(hub):
    c = commit(hub, "single")
    hub_error(hub.get("/nope/resolve/main/x"), 404, "RepoNotFound")
    hub_error(hub.get("/org/nope/resolve/main/x"), 404, "RepoNotFound")
    hub_error(hub.get("/api/models/org/nope"), 404, "RepoNotFound")
    hub_error(hub.get("/api/models/org/nope/tree/main"), 404, "RepoNotFound")
    hub_error(hub.get("/single/resolve/v2/config.json"), 404, "RevisionNotFound")
    hub_error(hub.get("/single/resolve/" + "0" * 40 + "/config.json"), 404, "RevisionNotFound")
    hub_error(hub.get("/api/models/single/revision/dev"), 404, "RevisionNotFound")
    r = hub.get(f"/single/resolve/{c}/missing.bin")
    hub_error(r, 404, "EntryNotFound")
    assert r.header("X-Repo-Commit") == c
    hub_error(hub.get("/single/resolve/main/missing.bin"), 404, "EntryNotFound")
    hub_error(hub.get("/api/models/org/deep/tree/main/nope"), 404, "EntryNotFound")
    hub_error(hub.get("/api/models/org/deep/tree/main/top.json"), 404, "EntryNotFound")
    hub_error(hub.get("/api/collections"), 404)  # /api/spaces is [] (test_hub_routes.py)
    hub_error(hub.get("/api/models/single/nothing/here"), 404)
    hub_error(hub.request("DELETE", "/single/resolve/main/config.json"), 405)
    hub_error(hub.get("/api/models/single/paths-info/main"), 405)
    # Paths never leave the repo: dot segments and NULs are refused, hidden
    # files and links leading out of the root are not in any repo.
    for bad in ("/single/resolve/main/../org/sd/model_index.json",
                "/single/resolve/main/%2e%2e/x", "/single/resolve/main/a//b",
                "/single/resolve/main/x%00y", "/single/resolve/m%zzn/x"):
        hub_error(hub.get(bad), 400)
    hub_error(hub.get(f"/single/resolve/{c}/.hidden"), 404, "EntryNotFound")
    hub_error(hub.get(f"/org/deep/resolve/{commit(hub, 'org/deep')}/escape.txt"), 404,
              "EntryNotFound")


def test_paths_info_bodies(hub):
    c = commit(hub, "org/sd")
    url = f"/api/models/org/sd/paths-info/{c}"
    form = urllib.parse.urlencode([("paths", "unet"), ("paths", "model_index.json"),
                                   ("paths", "unet"), ("expand", "False")]).encode()
    r = hub.request("POST", url, {"Content-Type": "application/x-www-form-urlencoded"}, form)
    assert r.status == 200, r
    assert [(e["type"], e["path"]) for e in json.loads(r.body)] == \
        [("directory", "unet"), ("file", "model_index.json")]
    r = hub.request("POST", url, {"Content-Type": "application/json"},
                    json.dumps({"paths": ["vae/config.json", "nope"], "expand": True}).encode())
    assert r.status == 200 and [e["path"] for e in json.loads(r.body)] == ["vae/config.json"]
    r = hub.request("POST", url, {"Content-Type": "application/json"}, b'{"paths": "unet"}')
    assert [e["path"] for e in json.loads(r.body)] == ["unet"]
    for body, ct in ((b'{"paths": [1]}', "application/json"), (b'{"paths": [', "application/json"),
                     (b'{"paths": [], "paths": []}', "application/json"),
                     (b'paths=%zz', "application/x-www-form-urlencoded"),
                     (b'{"paths": ["a\\u0000b"]}', "application/json")):
        hub_error(hub.request("POST", url, {"Content-Type": ct}, body), 400)
    many = json.dumps({"paths": ["x"] * 10001}).encode()
    hub_error(hub.request("POST", url, {"Content-Type": "application/json"}, many), 413)


def test_model_list_filters(hub):
    ids = [m["id"] for m in hub.json("/api/models")]
    assert ids == sorted(hubrepos.REPOS)
    assert [m["id"] for m in hub.json("/api/models?author=org")] == \
        ["org/deep", "org/sd", "org/sharded"]
    assert [m["id"] for m in hub.json("/api/models?search=SHAR")] == ["org/sharded"]
    assert [m["id"] for m in hub.json("/api/models?search=g%2Fs")] == ["org/sd", "org/sharded"]
    assert hub.json("/api/models?search=no+such") == []
    hub_error(hub.get("/api/models?search=%zz"), 400)
    assert [m["id"] for m in hub.json("/api/models?limit=2")] == ["org/deep", "org/sd"]
    full = hub.json("/api/models?search=single&full=true")
    assert [s["rfilename"] for s in full[0]["siblings"]] == sorted(hub.files["single"])
    assert full[0]["sha"] == commit(hub, "single")
    hub_error(hub.get("/api/models?limit=-1"), 400)


def test_v1_routes_and_components(hub):
    """The diffusers repo's components stay /v1 models, and /v1 answers
    revalidate (no-cache)."""
    names = {m["name"] for m in hub.json("/v1/models")["models"]}
    assert {"single", "org/sharded", "org/sd/unet", "org/sd/vae",
            "org/sd/text_encoder"} <= names
    r = hub.get("/v1/models/org/sd/unet/files/diffusion_pytorch_model.safetensors")
    assert r.status == 200 and r.body == \
        hub.files["org/sd"]["unet/diffusion_pytorch_model.safetensors"]
    assert r.header("Cache-Control") == "no-cache"


def test_tensor_downloads_have_a_file_name(hub, tmp_path):
    cases = [("/v1/models/single/tensors/wte.weight?format=npy", "wte.weight.npy"),
             ("/v1/models/single/tensors/wte.weight?slice=0:2", "wte.weight.bin"),
             ("/v1/models/single/tensors/wte.weight?format=safetensors",
              "wte.weight.safetensors")]
    for url, name in cases:
        r = hub.get(url)
        assert r.status == 200
        assert r.header("Content-Disposition") == \
            f"attachment; filename=\"{name}\"; filename*=UTF-8''{name}"
    # A name with '/', quotes and non-ASCII: a safe ASCII stand-in and the
    # exact name in filename* (RFC 6266/8187).
    url = "/v1/models/single/tensors/" + urllib.parse.quote('emb/ü "q".weight') + "?format=npy"
    r = hub.get(url)
    assert r.header("Content-Disposition") == \
        "attachment; filename=\"emb___ _q_.weight.npy\"; " \
        "filename*=UTF-8''emb_%C3%BC%20%22q%22.weight.npy"
    if not shutil.which("curl"):
        pytest.skip("curl is not installed")
    subprocess.run(["curl", "-sfOJ", f"http://127.0.0.1:{hub.port}{cases[0][0]}"],
                   cwd=tmp_path, check=True)
    assert os.listdir(tmp_path) == ["wte.weight.npy"]


def test_old_commit_after_a_change(hub):
    """A commit URL names content: after a file changes the repo has a new
    commit, the old one is RevisionNotFound, and main redirects to the new."""
    old = commit(hub, "org/deep")
    path = os.path.join(hub.root, "org/deep/top.json")
    with open(path, "wb") as f:
        f.write(b'{"changed": true}')
    hub.files["org/deep"]["top.json"] = b'{"changed": true}'
    new = commit(hub, "org/deep")
    deadline = time.monotonic() + 10 * SLACK
    while time.monotonic() < deadline:
        r = hub.get("/org/deep/resolve/main/top.json")
        if r.status == 302 and r.header("X-Repo-Commit") == new:
            break
        time.sleep(0.1)
    assert r.header("Location") == f"/org/deep/resolve/{new}/top.json", r
    assert hub.get(r.header("Location")).body == b'{"changed": true}'
    hub_error(hub.get(f"/org/deep/resolve/{old}/top.json"), 404, "RevisionNotFound")
    assert hub.json("/api/models/org/deep")["sha"] == new


def test_waits_for_hashes_then_answers(tmp_path):
    """Right after start-up nothing is hashed: a request waits for its
    repo's files (hashed first, unpaced) and gets the right commit; with
    hash_wait 0 it gets 503 and a Retry-After instead."""
    root = tmp_path / "models"
    files = hubrepos.make_repos(str(root), big_bytes=64 << 20)
    c = hubrepos.commit_of(files["org/sharded"])
    # Background hashing slowed to a crawl: only the wanted files go fast.
    d = tdutil.Daemon(str(root), str(tmp_path), ["--hash-max-bytes-per-second", "64K",
                                                  "--hash-threads", "1"])
    d.start()
    try:
        t0 = time.monotonic()
        r = d.get("/api/models/org/sharded")
        assert r.status == 200, r
        assert json.loads(r.body)["sha"] == c
        assert time.monotonic() - t0 < 8 * SLACK
    finally:
        d.stop_checked()
    shutil.rmtree(d.state_dir)
    d = tdutil.Daemon(str(root), str(tmp_path), ["--hash-wait", "0",
                                                  "--hash-max-bytes-per-second", "64K",
                                                  "--hash-threads", "1"])
    d.start()
    try:
        r = d.get("/org/sharded/resolve/main/big.bin")
        msg = hub_error(r, 503)
        assert "hash" in msg
        assert int(r.header("Retry-After")) >= 1
        # The list never waits: it leaves the revision out until it is known.
        assert "sha" not in [m for m in d.json("/api/models") if m["id"] == "org/sharded"][0]
    finally:
        d.stop_checked()


def test_bearer_tokens(tmp_path):
    root = tmp_path / "models"
    files = hubrepos.make_repos(str(root), big_bytes=1 << 10)
    tokens = tmp_path / "tokens"
    tokens.write_text("read hub-read-token-0123456789\n")
    d = tdutil.Daemon(str(root), str(tmp_path), ["--auth-token-file", str(tokens)],
                      probe_headers={"Authorization": "Bearer hub-read-token-0123456789"})
    d.start()
    try:
        msg = hub_error(d.get("/api/models/single"), 401)
        assert "token" in msg
        r = d.get("/api/models/single", {"Authorization": "Bearer wrong"})
        assert hub_error(r, 401) == "Invalid credentials in Authorization header"
        assert r.header("X-Error-Message") == "Invalid credentials in Authorization header"
        r = d.get("/api/models/single",
                  {"Authorization": "Bearer hub-read-token-0123456789"})
        assert r.status == 200 and json.loads(r.body)["sha"] == \
            hubrepos.commit_of(files["single"])
        env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{d.port}",
                   HF_HUB_CACHE=str(tmp_path / "cache"), HF_TOKEN="hub-read-token-0123456789",
                   HF_HUB_DISABLE_PROGRESS_BARS="1")
        code = ("from huggingface_hub import hf_hub_download\n"
                "print(open(hf_hub_download('single', 'config.json'), 'rb').read().decode())")
        p = subprocess.run([tdutil.sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert p.stdout.strip() == files["single"]["config.json"].decode()
    finally:
        d.stop_checked()
