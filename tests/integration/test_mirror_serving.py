"""A mirror serves its upstream's repos on every route (issue 33), and keeps
serving what it holds while its upstream is down. Two daemons: a tensord
upstream and a mirror (64 KiB blocks) with an empty models root.

Oracles: the safetensors package reading the upstream's files from disk,
NumPy (slices, numpy.array_split for tensor-parallel parts), the real
clients (the Python client tensord.safe_open/load_file, boto3, the Run:ai
Model Streamer, huggingface_hub), and the upstream's access log, which says
which blocks the mirror fetched (each once; only those an answer needs)."""
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
import safetensors.numpy

import tdutil
from tdutil import REPO, gen_models, wait_for
from test_mirror import BLOCK, Upstream, client_env, start_mirror

sys.path.insert(0, os.path.join(REPO, "client", "python"))
import tensord  # noqa: E402

REPO_ID = "acme/sharded-lm"


def write_repo(up, rng):
    """Two shards of 2-D tensors, an index and a config; returns {name:
    bytes}."""
    d = os.path.join(up.root, REPO_ID)
    os.makedirs(d, exist_ok=True)
    weight_map = {}
    for s in range(2):
        name = f"model-{s + 1:05d}-of-00002.safetensors"
        a = rng.standard_normal((256, 256)).astype(np.float32)
        w = rng.standard_normal((96, 320)).astype(np.float32)
        b = rng.standard_normal(320).astype(np.float32)
        e = (rng.standard_normal((40, 64)) * 100).astype(np.float16)
        n = (rng.standard_normal((512, 512)) * 100).astype(np.float16)
        z = rng.standard_normal((256, 256)).astype(np.float32)
        # In this order in the file: w between two tensors of 4 blocks each.
        tensors = [(f"l{s}.a", "F32", a.shape, a.tobytes()), (f"l{s}.w", "F32", w.shape, w.tobytes()),
                   (f"l{s}.b", "F32", b.shape, b.tobytes()), (f"l{s}.e", "F16", e.shape, e.tobytes()),
                   (f"l{s}.n", "F16", n.shape, n.tobytes()), (f"l{s}.z", "F32", z.shape, z.tobytes())]
        gen_models.write_safetensors(os.path.join(d, name), tensors, {"format": "pt"})
        for t in tensors:
            weight_map[t[0]] = name
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write('{"model_type": "sharded-lm"}\n')
    return {n: open(os.path.join(d, n), "rb").read() for n in os.listdir(d)}


@pytest.fixture(scope="module")
def env():
    base = tempfile.mkdtemp(prefix="tensord-mirror-serving-")
    up = Upstream(os.path.join(base, "up"))
    up.files[REPO_ID] = write_repo(up, np.random.default_rng(33))
    up.d.start()
    up.d.wait_hashed()
    try:
        yield up, base
    finally:
        up.d.stop_checked()


def reference(up):
    """Every tensor of the repo as the safetensors package reads it."""
    out = {}
    for s in (1, 2):
        out.update(safetensors.numpy.load_file(os.path.join(
            up.root, REPO_ID, f"model-0000{s}-of-00002.safetensors")))
    return out


def log_lines(up):
    with open(os.path.join(up.base, "access.log")) as f:
        return len(f.readlines())


def ranges_by_file(up, since=0):
    """{file name: [(first, last), ...]} of the 206 answers the upstream gave
    (after its access log's first `since` lines)."""
    out = {}
    with open(os.path.join(up.base, "access.log")) as f:
        for line in f.readlines()[since:]:
            p = line.split()
            m = re.match(r"bytes=(\d+)-(\d+)$", p[6]) if len(p) >= 7 and p[3] == "206" else None
            if m and "/resolve/" in p[2]:
                out.setdefault(p[2].rsplit("/", 1)[1], []).append((int(m.group(1)),
                                                                     int(m.group(2))))
    return out


def settled(up, since, m):
    """The upstream's ranges since `since`, once its access log holds every
    block mirror m fetched (the log's line is written when the answer ends,
    which may be after the mirror has the bytes and its client its answer)."""
    want = tdutil.prom_counter(m, "tensord_mirror_blocks_fetched_total")
    deadline = time.monotonic() + 10
    while True:
        got = ranges_by_file(up, since)
        if sum(len(v) for v in got.values()) >= want or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


def assert_each_block_once(up, since):
    for name, rs in ranges_by_file(up, since).items():
        assert len(rs) == len(set(rs)), (name, sorted(rs))


def mirror(up, base, name, *extra):
    return start_mirror(up, os.path.join(base, name), *extra)


def url(m):
    return f"http://127.0.0.1:{m.port}/v1/models/{REPO_ID}"


def read_all(m, ref):
    """Every route a client of /v1 uses, compared with the references."""
    with tensord.safe_open(url(m), framework="np") as f:
        assert sorted(f.keys()) == sorted(ref)
        assert f.metadata() == {"format": "pt"}
        for name, a in ref.items():
            got = f.get_tensor(name)
            assert got.dtype == a.dtype and got.shape == a.shape and got.tobytes() == a.tobytes(), name
        sl = f.get_slice("l1.w")[5:70:3, ::7]
        assert np.array_equal(sl, ref["l1.w"][5:70:3, ::7])
    for rank in range(2):
        part = tensord.load_file(url(m), split={"world": 2, "rank": rank,
                                                "rules": [{"match": "*.w", "dim": 1},
                                                          {"match": "*.e", "dim": 0}]})
        for name, a in ref.items():
            want = a
            if name.endswith(".w"):
                want = np.array_split(a, 2, axis=1)[rank]
            elif name.endswith(".e"):
                want = np.array_split(a, 2, axis=0)[rank]
            assert part[name].tobytes() == np.ascontiguousarray(want).tobytes(), (rank, name)


def test_v1_through_the_mirror_cold_and_cached(env):
    up, base = env
    ref = reference(up)
    since = log_lines(up)
    m = mirror(up, base, "v1")
    try:
        # The merged header and the model's tensors as the upstream has them.
        assert m.json(f"/v1/models/{REPO_ID}/header") == up.d.json(f"/v1/models/{REPO_ID}/header")
        desc = m.json(f"/v1/models/{REPO_ID}")
        assert desc["tensors"] == up.d.json(f"/v1/models/{REPO_ID}")["tensors"]
        assert desc["hashes"]["complete"] and desc["sharded"]
        # Every file's SHA-256: the upstream's for the shards, the mirror's
        # own (from its cache) for the index, whose content the upstream names
        # by its git blob id.
        assert {f["name"]: f["sha256"] for f in desc["files"]} == {
            n: hashlib.sha256(b).hexdigest() for n, b in up.files[REPO_ID].items()
            if n.endswith((".safetensors", ".index.json"))}
        read_all(m, ref)
        r = m.get(f"/v1/models/{REPO_ID}/files/config.json")
        assert r.status == 200 and r.body == up.files[REPO_ID]["config.json"]
        fetched = settled(up, since, m)
        assert_each_block_once(up, since)
        # Cached: the same answers, nothing fetched again.
        read_all(m, ref)
        assert ranges_by_file(up, since) == fetched
        listed = {x["name"]: x for x in m.json("/v1/models")["models"]}
        row = listed[REPO_ID]
        assert row["source"] == "upstream" and row["tensors"] == len(ref)
        assert row["cache"]["bytes"] == row["cache"]["total"] > 0
        st = m.json("/v1/models")["mirror"]
        assert st["upstream_up"] and st["cache"]["hit_bytes"] > 0 and st["cache"]["miss_bytes"] > 0
        validator = pytest.importorskip("openapi_schema_validator")
        spec = m.json("/v1/openapi.json")
        schema = dict(spec["components"]["schemas"]["ModelList"], components=spec["components"])
        validator.validate(m.json("/v1/models"), schema, cls=validator.OAS31Validator)
        # Restarted on the same cache: its complete files serve the model
        # (their blocks were never marked present in this run), nothing fetched.
        m.stop_checked()
        m = mirror(up, base, "v1")
        read_all(m, ref)
        assert settled(up, since, m) == fetched
    finally:
        m.stop_checked()


@pytest.mark.parametrize("tensor,how", [("l1.w", "route"), ("l1.z", "client"),
                                        ("l1.n", "slice")])
def test_a_cold_tensor_fetches_only_its_blocks(env, tensor, how):
    """One tensor of a cold file, by its route, through tensord.safe_open
    (which reads a Range of the file), or sliced into 131,072 runs of two
    bytes (asked of the mirror a window at a time): the headers (to build
    the model) and the blocks that hold the tensor, nothing else of it; the
    file's last tensor does not wait for the whole file."""
    up, base = env
    m = mirror(up, base, "one-" + tensor)
    try:
        since = log_lines(up)
        hdr = up.d.json(f"/v1/models/{REPO_ID}")
        fs = {f["name"]: f for f in hdr["files"]}
        t = hdr["tensors"][tensor]
        shard = t["file"]
        start = 8 + fs[shard]["header_length"] + t["data_offsets"][0]
        end = 8 + fs[shard]["header_length"] + t["data_offsets"][1]
        want_bytes = reference(up)[tensor]
        if how == "client":
            with tensord.safe_open(url(m), framework="np") as f:
                got = f.get_tensor(tensor).tobytes()
        elif how == "slice":
            r = m.get(f"/v1/models/{REPO_ID}/tensors/{tensor}?slice=:,::2")
            assert r.status == 200
            got, want_bytes = r.body, np.ascontiguousarray(want_bytes[:, ::2])
        else:
            r = m.get(f"/v1/models/{REPO_ID}/tensors/{tensor}")
            assert r.status == 200
            got = r.body
        assert got == want_bytes.tobytes()
        new = settled(up, since, m)
        assert len(new[shard]) == len(set(new[shard]))
        blocks = {b for lo, hi in new[shard] for b in range(lo // BLOCK, hi // BLOCK + 1)}
        header_blocks = set(range(0, (8 + fs[shard]["header_length"] - 1) // BLOCK + 1))
        want = header_blocks | set(range(start // BLOCK, (end - 1) // BLOCK + 1))
        assert blocks == want, (sorted(blocks), sorted(want))
        assert len(want) < (fs[shard]["size"] - 1) // BLOCK + 1  # not the whole file
    finally:
        m.stop_checked()


def test_s3_clients_through_the_mirror(env):
    """boto3 (a listing, a ranged get_object) and the Run:ai streamer's
    SafetensorsStreamer read the repo through the mirror's S3 API."""
    boto3 = pytest.importorskip("boto3")
    from botocore.config import Config
    up, base = env
    files = up.files[REPO_ID]
    since = log_lines(up)
    m = mirror(up, base, "s3")
    try:
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{m.port}/s3",
                          aws_access_key_id="k", aws_secret_access_key="s",
                          region_name="us-east-1",
                          config=Config(s3={"addressing_style": "path"},
                                        retries={"max_attempts": 1}))
        bucket = REPO_ID.replace("/", "--")
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket)["Contents"]]
        assert keys == sorted(files)
        shard = "model-00002-of-00002.safetensors"
        r = s3.get_object(Bucket=bucket, Key=shard, Range="bytes=1000-70999")
        assert r["Body"].read() == files[shard][1000:71000]
        assert r["ContentRange"] == f"bytes 1000-70999/{len(files[shard])}"
        h = s3.head_object(Bucket=bucket, Key=shard)
        assert h["ContentLength"] == len(files[shard])
        assert bucket in [b["Name"] for b in s3.list_buckets()["Buckets"]]
        # The streamer in a process of its own: its native S3 client keeps
        # the first credentials it saw for the process's life.
        pytest.importorskip("runai_model_streamer_s3")
        env = dict(os.environ, AWS_ENDPOINT_URL=f"http://127.0.0.1:{m.port}/s3",
                   RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING="0", AWS_ACCESS_KEY_ID="k",
                   AWS_SECRET_ACCESS_KEY="s", AWS_EC2_METADATA_DISABLED="true",
                   AWS_DEFAULT_REGION="us-east-1")
        code = ("import hashlib, json, sys, torch\n"
                "from runai_model_streamer import SafetensorsStreamer, list_safetensors\n"
                f"urls = list_safetensors('s3://{bucket}/')\n"
                "got = {}\n"
                "with SafetensorsStreamer() as s:\n"
                "    s.stream_files(urls)\n"
                "    for name, t in s.get_tensors():\n"
                "        ints = {2: torch.int16, 4: torch.int32}[t.element_size()]\n"
                "        b = t.contiguous().view(ints).numpy().tobytes()\n"
                "        got[name] = hashlib.sha256(b).hexdigest()\n"
                "print(json.dumps({'urls': sorted(urls), 'tensors': got}))\n")
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout.strip().splitlines()[-1])
        assert [u.rsplit("/", 1)[1] for u in out["urls"]] == \
            [n for n in sorted(files) if n.endswith(".safetensors")]
        ref = reference(up)
        assert out["tensors"] == {k: hashlib.sha256(a.tobytes()).hexdigest() for k, a in ref.items()}
        settled(up, since, m)
        assert_each_block_once(up, since)
    finally:
        m.stop_checked()


# ---- the upstream down ----------------------------------------------------------


def hf(port, cache, code):
    """Runs huggingface_hub code against the mirror; its stdout."""
    p = subprocess.run([sys.executable, "-c", code], env=client_env(port, cache),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def metric(d, name):
    return tdutil.prom_counter(d, name)


def test_upstream_down_then_back(tmp_path):
    """Stopped upstream: files by commit and the last documents are served
    (marked stale), huggingface_hub's downloads and model_info succeed, the
    /v1 model is served, a repo never fetched is 504 saying why; metrics and
    the log say the upstream is down. Back: fresh answers, no restart."""
    up = Upstream(str(tmp_path / "up"))
    files = up.files[REPO_ID] = write_repo(up, np.random.default_rng(5))
    up.d.start()
    up.d.wait_hashed()
    port = up.d.port
    commit = up.d.json(f"/api/models/{REPO_ID}")["sha"]
    m = start_mirror(up, str(tmp_path / "m"), "--mirror-auth-ttl", "1")
    try:
        snap = hf(m.port, tmp_path / "warm", "from huggingface_hub import snapshot_download\n"
                  f"print(snapshot_download({REPO_ID!r}))").strip().splitlines()[-1]
        assert {n: open(os.path.join(snap, n), "rb").read() for n in os.listdir(snap)} == files
        assert hf(m.port, tmp_path / "warm", "from huggingface_hub import model_info\n"
                  f"print(model_info({REPO_ID!r}).sha)").split()[-1] == commit
        read_all(m, reference(up))
        up.d.stop()

        # Names: the last answers, marked stale once mirror_auth_ttl passed.
        info = wait_for(lambda: (r := m.get(f"/api/models/{REPO_ID}/revision/main")).status
                        == 200 and r.header("X-Tensord-Stale") and r, 10, "a stale document")
        assert info.json()["sha"] == commit and int(info.header("Age")) >= 0
        # Files by commit, and whole snapshots, from the cache.
        out = hf(m.port, tmp_path / "c1", "from huggingface_hub import hf_hub_download\n"
                 f"print(hf_hub_download({REPO_ID!r}, 'config.json', revision={commit!r}))")
        assert open(out.strip().splitlines()[-1], "rb").read() == files["config.json"]
        snap = hf(m.port, tmp_path / "c2", "from huggingface_hub import snapshot_download\n"
                  f"print(snapshot_download({REPO_ID!r}))").strip().splitlines()[-1]
        assert {n: open(os.path.join(snap, n), "rb").read() for n in os.listdir(snap)} == files
        assert hf(m.port, tmp_path / "c3", "from huggingface_hub import model_info\n"
                  f"print(model_info({REPO_ID!r}).sha)").split()[-1] == commit
        # The /v1 model: served, stale once mirror_auth_ttl passed.
        wait_for(lambda: (r := m.get(f"/v1/models/{REPO_ID}")).status == 200
                 and r.header("X-Tensord-Stale") is not None, 10, "a stale model")
        read_all(m, reference(up))
        # What the mirror never had: 504, saying why.
        r = m.get("/api/models/acme/never")
        assert r.status == 504 and "cannot be reached" in r.json()["error"], r
        r = m.get("/v1/models/acme/never")
        assert r.status == 504 and r.json()["error"]["code"] == "upstream_unreachable", r
        # The outage on the dashboard and in the log.
        assert metric(m, "tensord_mirror_upstream_up") == 0
        assert metric(m, "tensord_mirror_upstream_consecutive_failures") >= 1
        assert metric(m, "tensord_mirror_stale_answers_total") >= 3
        assert metric(m, "tensord_mirror_upstream_failures_total") >= 1
        st = m.json("/v1/models")["mirror"]
        assert st["upstream_up"] is False and st["last_error"]
        assert "cannot be reached" in m.log_tail(1 << 16)

        # Back (the same address): fresh answers again, without a restart.
        up.d.start(port)
        wait_for(lambda: (r := m.get(f"/api/models/{REPO_ID}/revision/main")).status == 200
                 and r.header("X-Tensord-Stale") is None, 40, "a fresh document")
        assert metric(m, "tensord_mirror_upstream_up") == 1
        wait_for(lambda: (r := m.get(f"/v1/models/{REPO_ID}")).status == 200
                 and r.header("X-Tensord-Stale") is None, 10, "a fresh model")
        assert "answers again" in m.log_tail(1 << 16)
    finally:
        m.stop_checked()
        up.d.stop()


def test_tokens_during_an_outage(tmp_path):
    """A repo that needed a token: from the cache only to a token the
    upstream accepted within mirror_auth_ttl; never to a caller without one."""
    up = Upstream(str(tmp_path / "up"), auth=True)
    files = up.add("gated/m", np.random.default_rng(7))
    up.d.start()
    up.d.wait_hashed()
    commit = tdutil.request(up.d.port, "GET", "/api/models/gated/m", up.headers).json()["sha"]
    m = start_mirror(up, str(tmp_path / "m"), "--mirror-auth-ttl", "4")
    try:
        path = f"/gated/m/resolve/{commit}/config.json"
        r = m.get(path, up.headers)
        assert r.status == 200 and r.body == files["config.json"]
        up.d.stop()
        r = m.get(path, up.headers)  # within the TTL of the upstream's yes
        assert r.status == 200 and r.body == files["config.json"]
        r = m.get(path)  # no token: the upstream never let it in
        assert r.status == 504, r
        # Once the TTL of the upstream's yes is spent, the token opens nothing.
        wait_for(lambda: m.get(path, up.headers).status == 504, 10, "the token's TTL spent")
    finally:
        m.stop_checked()
        up.d.stop()
