"""The pull-through mirror (upstream = URL, issue 26): two daemons, an
upstream tensord serving a models root and a mirror with an empty one
whose Hugging Face endpoint is the upstream's through its cache. The
oracles are the files on the upstream's disk (hashlib, the bytes
themselves), huggingface_hub and the `hf` command line as clients, and the
upstream's own access log, which says what the mirror asked it for (each
range once, nothing fetched twice).

Small files and 64 KiB blocks keep the module at a few seconds; the long
measurements (a 4 GiB file, capped links, 100 cut downloads, the preload's
lag after the last byte) are bench/mirror.py's."""
import hashlib
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import pytest

import tdutil
from tdutil import gen_models

BLOCK = 64 * 1024
TOKEN = "mirror-test-token-0123456789"
HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)
HF = os.path.join(BIN, "hf")


def sha(b):
    return hashlib.sha256(b).hexdigest()


def git_blob(b):
    """git's blob id: the key of a small (not LFS) file in the cache."""
    return hashlib.sha1(b"blob %d\0" % len(b) + b).hexdigest()


def write_model(d, rng, shards, elems):
    """A model of `shards` safetensors files (with an index when more than
    one) and a config.json; returns {name: bytes}."""
    os.makedirs(d, exist_ok=True)
    files, weight_map = {}, {}
    for s in range(shards):
        name = "model.safetensors" if shards == 1 else \
            f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        tensors = []
        for t in range(2):
            a = rng.standard_normal(elems // 2).astype(np.float32)
            tensors.append((f"l{s}.t{t}", "F32", (elems // 2,), a.tobytes()))
            weight_map[f"l{s}.t{t}"] = name
        gen_models.write_safetensors(os.path.join(d, name), tensors)
    if shards > 1:
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            f.write('{"metadata": {"total_size": 0}, "weight_map": %s}\n'
                    % str(weight_map).replace("'", '"'))
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write('{"model_type": "mirror-test"}\n')
    for name in os.listdir(d):
        with open(os.path.join(d, name), "rb") as f:
            files[name] = f.read()
    return files


def write_blob(path, data):
    tmp = path + ".tmp-new"
    with open(tmp, "wb") as f:
        f.write(data)
    os.rename(tmp, path)


class Upstream:
    """The upstream daemon and the repos it serves."""

    def __init__(self, base, auth=False):
        self.root = os.path.join(base, "models")
        self.base = base
        os.makedirs(self.root, exist_ok=True)
        args = ["--access-log", os.path.join(base, "access.log")]
        self.headers = {}
        if auth:
            tf = os.path.join(base, "tokens")
            with open(tf, "w") as f:
                f.write(f"read {TOKEN}\n")
            args += ["--auth-token-file", tf]
            self.headers = {"Authorization": f"Bearer {TOKEN}"}
        self.d = tdutil.Daemon(self.root, base, args, probe_headers=self.headers)
        self.files = {}

    def add(self, repo, rng, shards=1, elems=1 << 16, raw=None):
        d = os.path.join(self.root, repo)
        if raw is not None:
            os.makedirs(d, exist_ok=True)
            for name, data in raw.items():
                write_blob(os.path.join(d, name), data)
            self.files[repo] = dict(raw)
        else:
            self.files[repo] = write_model(d, rng, shards, elems)
        return self.files[repo]

    def ranges(self, path_part):
        """[(first, last)] of the 206 answers the upstream gave for URLs
        holding path_part, from its access log."""
        out = []
        with open(os.path.join(self.base, "access.log")) as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 7 and path_part in parts[2] and parts[3] == "206":
                    m = re.match(r"bytes=(\d+)-(\d+)$", parts[6])
                    if m:
                        out.append((int(m.group(1)), int(m.group(2))))
        return out

    def log_text(self):
        with open(os.path.join(self.base, "access.log")) as f:
            return f.read()


def start_mirror(up, workdir, *extra, probe_headers=None):
    os.makedirs(workdir, exist_ok=True)
    root = os.path.join(workdir, "models")
    os.makedirs(root, exist_ok=True)
    args = ["--upstream", f"http://127.0.0.1:{up.d.port}", "--mirror-block-bytes", str(BLOCK),
            "--mirror-cache-dir", os.path.join(workdir, "cache"),
            "--access-log", os.path.join(workdir, "access.log")] + list(extra)
    return tdutil.Daemon(root, workdir, args, probe_headers=probe_headers).start()


@pytest.fixture(scope="module")
def env():
    base = tempfile.mkdtemp(prefix="tensord-mirror-")
    up = Upstream(os.path.join(base, "up"))
    rng = np.random.default_rng(26)
    up.add("org/sharded", rng, shards=2, elems=100_000)
    up.add("solo", rng, shards=1, elems=30_000)
    for i in range(6):  # the cache test's: 256 KiB of data each
        up.add(f"cap/f{i}", rng, raw={"w.bin": rng.bytes(256 * 1024)})
    up.add("cap/huge", rng, raw={"w.bin": rng.bytes(2 * 1024 * 1024)})
    up.add("org/many", rng, raw={"w.bin": rng.bytes(1536 * 1024 + 77)})
    up.add("org/cut", rng, raw={"w.bin": rng.bytes(2 * 1024 * 1024 + 5)})
    up.add("org/changes", rng, raw={"w.bin": rng.bytes(3 * 1024 * 1024)})
    up.add("org/restart", rng, raw={"w.bin": rng.bytes(2 * 1024 * 1024 + 999)})
    up.d.start()
    up.d.wait_hashed(60)
    mirror = start_mirror(up, os.path.join(base, "mirror"))
    try:
        yield up, mirror, base
        mirror.stop_checked()
        up.d.stop_checked()
    finally:
        mirror.stop()
        up.d.stop()
        shutil.rmtree(base, ignore_errors=True)


def commit_of(d, repo, headers=None):
    r = d.get(f"/api/models/{repo}", headers)
    assert r.status == 200, r
    return r.json()["sha"]


def client_env(port, cache):
    env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HUB_CACHE=str(cache),
               HF_HOME=os.path.join(str(cache), "home"), HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_XET="1", NO_COLOR="1")
    env.pop("HF_TOKEN", None)
    return env


def test_snapshot_download_byte_exact(env, tmp_path):
    up, mirror, _ = env
    code = ("from huggingface_hub import snapshot_download\n"
            "print(snapshot_download('org/sharded'))\n")
    p = subprocess.run([sys.executable, "-c", code], env=client_env(mirror.port, tmp_path / "c"),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    snap = p.stdout.strip().splitlines()[-1]
    got = {n: open(os.path.join(snap, n), "rb").read() for n in os.listdir(snap)}
    assert got == up.files["org/sharded"]
    # The snapshot is named by the upstream's commit: one commit per download.
    assert os.path.basename(snap) == commit_of(up.d, "org/sharded")


@pytest.mark.skipif(not os.path.exists(HF), reason="no hf command line in this environment")
def test_hf_download_byte_exact(env, tmp_path):
    up, mirror, _ = env
    p = subprocess.run([HF, "download", "solo", "--local-dir", str(tmp_path / "solo")],
                       env=client_env(mirror.port, tmp_path / "c"), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    for name, data in up.files["solo"].items():
        assert (tmp_path / "solo" / name).read_bytes() == data


def test_file_answers_match_the_upstream(env):
    up, mirror, _ = env
    repo, name = "org/sharded", "model-00002-of-00002.safetensors"
    data = up.files[repo][name]
    commit = commit_of(up.d, repo)
    r = mirror.head(f"/{repo}/resolve/main/{name}")
    assert r.status == 302, r
    assert r.header("Location") == f"/{repo}/resolve/{commit}/{name}"
    assert r.header("X-Repo-Commit") == commit
    assert r.header("X-Linked-Etag") == f'"{sha(data)}"'
    assert r.header("X-Linked-Size") == str(len(data))
    url = f"/{repo}/resolve/{commit}/{name}"
    h, u = mirror.head(url), up.d.head(url)
    assert h.status == u.status == 200
    for k in ("ETag", "X-Linked-Etag", "X-Linked-Size", "X-Repo-Commit", "Content-Length",
              "Cache-Control", "Content-Disposition", "Accept-Ranges"):
        assert h.header(k) == u.header(k), k
    # Ranges, before and after the file is cached, and a multipart one.
    for _ in range(2):
        r = mirror.get(url, {"Range": "bytes=70000-70099"})
        assert r.status == 206 and r.body == data[70000:70100], r
        r = mirror.get(url, {"Range": f"bytes=-{len(data) - 5}"})
        assert r.status == 206 and r.body == data[5:]
    r = mirror.get(url, {"Range": "bytes=0-9,200000-200009"})
    parts = tdutil.parse_multipart_byteranges(r.header("Content-Type"), r.body)
    assert [p[4] for p in parts] == [data[:10], data[200000:200010]]
    # A small (git) file, checked by its blob id.
    r = mirror.get(f"/{repo}/resolve/{commit}/config.json")
    assert r.status == 200 and r.body == up.files[repo]["config.json"]
    # Missing things are the upstream's errors, with its X-Error-Code.
    r = mirror.get(f"/{repo}/resolve/main/nope.bin")
    assert r.status == 404 and r.header("X-Error-Code") == "EntryNotFound", r
    r = mirror.get("/org/nothing/resolve/main/x")
    assert r.status == 404 and r.header("X-Error-Code") == "RepoNotFound", r
    r = mirror.get(f"/{repo}/resolve/{'0' * 40}/{name}")
    assert r.status == 404 and r.header("X-Error-Code") == "RevisionNotFound", r
    # Documents pass through.
    for path in (f"/api/models/{repo}", f"/api/models/{repo}/revision/{commit}",
                 f"/api/models/{repo}/tree/main", "/api/models"):
        a, b = mirror.get(path), up.d.get(path)
        assert a.status == b.status == 200 and a.body == b.body, path
    # The by-digest route serves the mirror's complete files.
    r = mirror.get(f"/v1/blobs/sha256:{sha(data)}")
    assert r.status == 200 and r.body == data


@pytest.mark.concurrent
def test_64_clients_one_fetch_per_block(env, tmp_path):
    """64 clients on one cold file (the upstream capped so they all wait)
    get it byte-exact, and the upstream sent each block once."""
    up, _, _ = env
    m = start_mirror(up, str(tmp_path / "m"), "--upstream-max-bytes-per-second", "3M")
    try:
        repo, data = "org/many", up.files["org/many"]["w.bin"]
        url = f"/{repo}/resolve/{commit_of(up.d, repo)}/w.bin"
        got, errors = [None] * 64, []

        def fetch(i):
            try:
                r = m.get(url)
                got[i] = r.body if r.status == 200 else r
            except Exception as e:  # noqa: BLE001
                errors.append(e)
        ts = [threading.Thread(target=fetch, args=(i,)) for i in range(64)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert not errors, errors
        assert all(g == data for g in got), [type(g) for g in got if g != data][:3]
        ranges = sorted(up.ranges(repo + "/"))
        covered = 0
        for first, last in ranges:  # no byte twice, none missing
            assert first == covered, ranges
            covered = last + 1
        assert covered == len(data)
        assert len(ranges) == (len(data) + BLOCK - 1) // BLOCK
        m.stop_checked()
    finally:
        m.stop()


def test_cut_downloads_resume_byte_exact(env):
    """Downloads cut at random offsets resume with Range and If-Range and
    give the file; the upstream sent each byte once for all of them."""
    up, mirror, _ = env
    repo, data = "org/cut", up.files["org/cut"]["w.bin"]
    url = f"/{repo}/resolve/{commit_of(up.d, repo)}/w.bin"
    etag = mirror.head(url).header("ETag")
    rnd = random.Random(7)
    for _ in range(20):
        cut = rnd.randrange(1, len(data))
        with socket.create_connection(("127.0.0.1", mirror.port), timeout=30) as s:
            s.sendall(f"GET {url} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += s.recv(65536)
            head, _, body = buf.partition(b"\r\n\r\n")
            while len(body) < cut:
                chunk = s.recv(65536)
                assert chunk, "the answer ended before the cut"
                body += chunk
            body = body[:cut]  # the client goes away here
        r = mirror.get(url, {"Range": f"bytes={cut}-", "If-Range": etag})
        assert r.status == 206, r
        assert body + r.body == data
    covered = 0
    for first, last in sorted(up.ranges(repo + "/")):
        assert first == covered
        covered = last + 1
    assert covered == len(data)


def blobs_usage(cache):
    """Bytes the cache's files take on the disk (sparse files count what
    they hold)."""
    total = 0
    for dirpath, _, names in os.walk(cache):
        for n in names:
            st = os.lstat(os.path.join(dirpath, n))
            total += st.st_blocks * 512
    return total


def test_cache_stays_under_its_cap(env, tmp_path):
    up, _, _ = env
    cap = 1024 * 1024
    m = start_mirror(up, str(tmp_path / "m"), "--mirror-cache-max-bytes", str(cap))
    try:
        cache = str(tmp_path / "m" / "cache")
        for i in range(6):
            repo = f"cap/f{i}"
            r = m.get(f"/{repo}/resolve/{commit_of(up.d, repo)}/w.bin")
            assert r.status == 200 and r.body == up.files[repo]["w.bin"]
            assert blobs_usage(cache) <= cap + BLOCK + 64 * 1024, blobs_usage(cache)
        keys = {f"gitsha1-{git_blob(up.files[f'cap/f{i}']['w.bin'])}": i for i in range(6)}

        def kept():
            return sorted(keys[n] for n in os.listdir(os.path.join(cache, "blobs")) if n in keys)
        assert kept() == [2, 3, 4, 5]  # four fit: the oldest two went
        # Read f2 again (a hit), then f0: the least recently used, f3, goes.
        fetched = len(up.ranges("cap/f2/"))
        assert m.get(f"/cap/f2/resolve/{commit_of(up.d, 'cap/f2')}/w.bin").status == 200
        assert len(up.ranges("cap/f2/")) == fetched
        assert m.get(f"/cap/f0/resolve/{commit_of(up.d, 'cap/f0')}/w.bin").status == 200
        assert kept() == [0, 2, 4, 5]
        assert blobs_usage(cache) <= cap + BLOCK + 64 * 1024, blobs_usage(cache)
        # Nobody reads once the answers ended (just after their last byte).
        deadline = time.monotonic() + 5
        while (g := m.json("/v1/metrics")["mirror"])["in_use_bytes"] and \
                time.monotonic() < deadline:
            time.sleep(0.02)
        assert {k: g[k] for k in ("cache_bytes", "in_use_bytes", "files", "partial_files",
                                  "questions_waiting", "upstream_up")} == \
            {"cache_bytes": 4 * 256 * 1024, "in_use_bytes": 0, "files": 4, "partial_files": 0,
             "questions_waiting": 0, "upstream_up": True}, g
        assert m.json("/v1/metrics")["counters"]["mirror_evictions"] == 3
        # Larger than the whole cache: refused, saying why.
        repo = "cap/huge"
        r = m.get(f"/{repo}/resolve/{commit_of(up.d, repo)}/w.bin")
        assert r.status == 503 and b"mirror_cache_max_bytes" in r.body, r
        m.stop_checked()
    finally:
        m.stop()


def test_changed_upstream_never_mixes(env, tmp_path):
    """The upstream's file is replaced while the mirror pulls it: the
    client gets the old file whole or a cut answer whose bytes are the old
    file's, never a mix; the cache keeps no file whose bytes are not its
    hash's; the next download is the new file."""
    up, _, _ = env
    m = start_mirror(up, str(tmp_path / "m"), "--upstream-max-bytes-per-second", "2M",
                     "--mirror-auth-ttl", "0")
    try:
        repo = "org/changes"
        path = os.path.join(up.root, repo, "w.bin")
        old = up.files[repo]["w.bin"]
        new = bytes(b ^ 0x5A for b in old)
        r = m.head(f"/{repo}/resolve/main/w.bin")
        url = r.header("Location")
        out = {}

        def pull():
            try:
                out["r"] = m.get(url)
            except Exception as e:  # noqa: BLE001 (a cut answer)
                out["e"] = e
        fetched = tdutil.prom_counter(m, "tensord_mirror_upstream_bytes_total")
        t = threading.Thread(target=pull)
        t.start()
        # Changed once the pull is under way, long before its end (3 MiB at
        # 2 MB/s).
        deadline = time.monotonic() + 10
        while tdutil.prom_counter(m, "tensord_mirror_upstream_bytes_total") == fetched:
            assert time.monotonic() < deadline, "the pull did not start"
            time.sleep(0.02)
        write_blob(path, new)
        assert t.is_alive(), "the pull ended before the file changed: nothing was tested"

        t.join(60)
        if "r" in out:
            assert out["r"].body == old, "a whole answer is the old file"
        else:
            assert isinstance(out["e"], Exception)
        # Complete blobs hash to their names.
        blobs = os.path.join(str(tmp_path / "m" / "cache"), "blobs")
        for n in os.listdir(blobs):
            if n.startswith("sha256-") and not os.path.exists(os.path.join(blobs, n + ".state")):
                assert sha(open(os.path.join(blobs, n), "rb").read()) == n[7:]
        # The new revision, once the upstream has rescanned and hashed it.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = m.get(f"/{repo}/resolve/main/w.bin")
            if r.status == 302 and r.header("Location") != url:
                break
            time.sleep(0.1)
        r = m.get(r.header("Location"))
        assert r.status == 200 and r.body == new
        m.stop_checked()
    finally:
        write_blob(path, old)
        m.stop()


def test_restart_resumes_the_partial_file(env, tmp_path):
    """A mirror stopped half-way through a file fetches only the rest after
    a restart (its bitmap), and the file is byte-exact."""
    up, _, _ = env
    repo, data = "org/restart", up.files["org/restart"]["w.bin"]
    url = f"/{repo}/resolve/{commit_of(up.d, repo)}/w.bin"
    work = str(tmp_path / "m")
    m = start_mirror(up, work, "--upstream-max-bytes-per-second", "2M")
    try:
        r = m.get(url, {"Range": "bytes=0-1048575"})
        assert r.status == 206 and r.body == data[:1 << 20]
        m.stop_checked()
    finally:
        m.stop()
    before = sum(b - a + 1 for a, b in up.ranges(repo + "/"))
    m = start_mirror(up, work)
    try:
        r = m.get(url)
        assert r.status == 200 and r.body == data
        total = sum(b - a + 1 for a, b in up.ranges(repo + "/"))
        # Each byte once in all, whatever the stop cut (a block in flight
        # at the stop is fetched again: at most one per fetcher).
        assert before >= 1 << 20
        assert total <= len(data) + 4 * BLOCK, (before, total)
        m.stop_checked()
    finally:
        m.stop()


def test_tokens_forwarded_and_checked(tmp_path):
    """With an upstream that wants a token: the caller's is forwarded; a
    cached file is served only to callers the upstream lets in; the token
    appears in no log."""
    base = str(tmp_path)
    up = Upstream(os.path.join(base, "up"), auth=True)
    up.add("org/gated", np.random.default_rng(1), shards=1, elems=80_000)
    data = up.files["org/gated"]["model.safetensors"]  # an LFS file: found by its SHA-256
    up.d.start()
    up.d.wait_hashed(30)
    mine = "mirror-own-token-0123456789abcdef"
    with open(os.path.join(base, "mirror-tokens"), "w") as f:
        f.write(f"read {mine}\n")
    m = start_mirror(up, os.path.join(base, "m"), "--mirror-auth-ttl", "60",
                     "--auth-token-file", os.path.join(base, "mirror-tokens"),
                     probe_headers={"Authorization": f"Bearer {mine}"})
    try:
        good = {"Authorization": f"Bearer {TOKEN}"}
        # The mirror's own tokens guard its /v1 routes; its Hub routes are
        # the upstream's to check (even for a request with a body, which the
        # daemon checks when its headers arrive).
        assert m.get("/v1/models").status == 401
        assert m.get("/v1/models", {"Authorization": f"Bearer {mine}"}).status == 200
        r = m.request("POST", "/api/models/org/gated/paths-info/main",
                      dict(good, **{"Content-Type": "application/x-www-form-urlencoded"}),
                      b"paths=model.safetensors")
        assert r.status == 200 and r.json()[0]["path"] == "model.safetensors", r
        r = m.request("POST", "/api/models/org/gated/paths-info/main",
                      {"Content-Type": "application/x-www-form-urlencoded"},
                      b"paths=model.safetensors")
        assert r.status == 401, r
        bad = {"Authorization": "Bearer not-the-token-at-all-1234"}
        r = m.get("/org/gated/resolve/main/model.safetensors")
        assert r.status == 401, r
        r = m.get("/org/gated/resolve/main/model.safetensors", good)
        assert r.status == 302, r
        url = r.header("Location")
        r = m.get(url, good)
        assert r.status == 200 and r.body == data
        # Cached now: still asked of the upstream for each caller.
        assert m.get(url).status == 401
        assert m.get(url, bad).status == 401
        assert m.get(url, good).body == data
        # A digest names no repo: a gated repo's file is not found by it.
        r = m.get(f"/v1/blobs/sha256:{sha(data)}", {"Authorization": f"Bearer {mine}"})
        assert r.status == 404, r
        r = m.get("/api/models/org/gated")
        assert r.status == 401
        assert m.get("/api/models/org/gated", good).status == 200
        m.stop_checked()
        for f in (os.path.join(base, "m", "tensord.log"), os.path.join(base, "m", "access.log"),
                  os.path.join(base, "up", "tensord.log"), os.path.join(base, "up", "access.log")):
            assert TOKEN not in open(f).read(), f
        for dirpath, _, names in os.walk(os.path.join(base, "m", "cache")):
            for n in names:
                assert TOKEN.encode() not in open(os.path.join(dirpath, n), "rb").read()
        up.d.stop_checked()
    finally:
        m.stop()
        up.d.stop()


def test_preload_from_the_mirror(env):
    """POST /v1/models/{repo}/gpu on the mirror preloads the upstream's
    model (host backend) as its bytes arrive; the leased tensors are the
    upstream files' bytes."""
    up, mirror, _ = env
    sys.path.insert(0, os.path.join(tdutil.REPO, "client", "python"))
    import tensord
    r = mirror.request("POST", "/v1/models/org/sharded/gpu", body=b'{"device": "host"}')
    assert r.status in (200, 202), r
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        doc = mirror.json("/v1/models/org/sharded/gpu")
        if doc["state"] != "loading":
            break
        time.sleep(0.05)
    assert doc["state"] == "ready", doc
    c = tensord.connect(os.path.join(mirror.workdir, "tensord.sock"))
    model = c.open("org/sharded")
    want = {}
    for name, data in up.files["org/sharded"].items():
        if name.endswith(".safetensors"):
            want.update(tdutil.read_safetensors_bytes(data)[2])
    assert sorted(model.keys()) == sorted(want)
    for name, (_, _, raw) in want.items():
        assert model[name].tobytes() == raw, name
    model.close()
    c.close()
    # A second POST answers the instance; DELETE evicts it.
    r = mirror.request("POST", "/v1/models/org/sharded/gpu", body=b'{"device": "host"}')
    assert r.status == 200, r
    assert mirror.request("DELETE", "/v1/models/org/sharded/gpu").status in (200, 202)
    # A repo the upstream lacks is 404.
    r = mirror.request("POST", "/v1/models/org/none/gpu", body=b'{"device": "host"}')
    tdutil.assert_error(r, 404, "model_not_found")


class LyingUpstream:
    """A Hugging Face endpoint that lies: HEAD names one file's SHA-256 and
    size, the ranges send other bytes (mode "bytes"), or a Content-Range
    other than the one asked for (mode "range")."""

    COMMIT = "c0ffee" + "0" * 34

    def __init__(self, named, sent, mode):
        import http.server
        outer = self
        self.named, self.sent, self.mode = named, sent, mode

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_HEAD(self):
                self.send_response(200)
                self.send_header("X-Repo-Commit", outer.COMMIT)
                self.send_header("X-Linked-Etag", f'"{sha(outer.named)}"')
                self.send_header("X-Linked-Size", str(len(outer.named)))
                self.send_header("Content-Length", str(len(outer.named)))
                self.end_headers()

            def do_GET(self):
                m = re.match(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
                a, b = int(m.group(1)), int(m.group(2))
                body = outer.sent[a:b + 1]
                if outer.mode == "range":
                    a, b = a + 1, b + 1
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {a}-{b}/{len(outer.named)}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.mark.parametrize("mode", ["bytes", "range"])
def test_lying_upstream_fails_loudly(tmp_path, mode):
    """Bytes that do not hash to what the upstream named, or a range that is
    not the one asked for: the client's answer is cut short (never its last
    byte), the cache keeps nothing complete, and the log says why."""
    named = np.random.default_rng(3).bytes(300_000)
    sent = bytes(b ^ 1 for b in named) if mode == "bytes" else named
    liar = LyingUpstream(named, sent, mode)

    class Up:  # what start_mirror reads of an upstream
        class d:
            port = liar.port
    m = start_mirror(Up, str(tmp_path / "m"))
    try:
        url = f"/org/x/resolve/{LyingUpstream.COMMIT}/model.safetensors"
        got = b""
        try:
            r = m.get(url)
            got = r.body
        except Exception:  # noqa: BLE001 (the cut answer)
            pass
        assert len(got) < len(named), "a lying upstream's file was answered whole"
        blobs = tmp_path / "m" / "cache" / "blobs"
        key = f"sha256-{sha(named)}"
        assert not (blobs / key).exists() or (blobs / f"{key}.state").exists()
        log = m.log_tail(20000)
        why = "hash to" if mode == "bytes" else "sent bytes"
        assert why in log, log
        counters = m.json("/v1/metrics")["counters"]
        assert counters["mirror_verify_failures"] == (1 if mode == "bytes" else 0)
        m.stop_checked()
    finally:
        m.stop()
        liar.close()
