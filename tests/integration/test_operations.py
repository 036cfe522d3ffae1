"""Operations against a live daemon: metrics move exactly as the requests
sent, the Prometheus text passes promtool, and the registry reloads on SIGHUP
and when a file is dropped into the models root, without a restart."""
import json
import os
import shutil
import signal
import subprocess
import tempfile

import pytest

import faultlib
import tdutil
from faultlib import running_daemon, wait_for
from tdutil import gen_models

TENSOR = "/v1/models/m/tensors/w"     # F32 [16, 16]: 1024 bytes


@pytest.fixture
def root():
    base = tempfile.mkdtemp(prefix="tensord-ops-")
    models = os.path.join(base, "models")
    gen_models.write_safetensors(os.path.join(models, "m", "model.safetensors"),
                                 [("w", "F32", (16, 16), bytes(range(256)) * 4)])
    yield models
    shutil.rmtree(base, ignore_errors=True)


def metrics(d):
    r = d.get("/v1/metrics")
    assert r.status == 200 and r.header("Content-Type").startswith("application/json")
    return json.loads(r.body)


def delta(a, b, *path):
    """a[path] - b[path] of two metrics documents."""
    for p in path:
        a, b = a[p], b[p]
    return a - b


def test_metrics_match_the_requests_sent(root):
    with running_daemon(root) as d:
        before = metrics(d)
        for _ in range(7):
            assert d.get(TENSOR).status == 200
        for spec in ("0:2", ":,0:4", "-1"):
            assert d.get(TENSOR + "?slice=" + spec).status == 200
        assert d.get(TENSOR, {"Range": "bytes=0-99"}).status == 206
        assert d.get(TENSOR, {"Range": "bytes=0-9,200-209"}).status == 206
        assert d.get(TENSOR, {"Range": "bytes=5000-"}).status == 416
        etag = d.get(TENSOR).header("ETag")
        assert d.get(TENSOR, {"If-None-Match": etag}).status == 304
        assert d.get("/v1/models/nope").status == 404
        # A request is counted when libmicrohttpd completes it, which may be
        # after its client has read the answer: wait until all 16 are.
        kinds = [("endpoints", e, "requests", c) for e, c in
                 (("tensor", "2xx"), ("tensor", "3xx"), ("tensor", "4xx"), ("slice", "2xx"),
                  ("model", "4xx"))]
        after = tdutil.wait_for(lambda: (m := metrics(d)) and sum(
            delta(m, before, *k) for k in kinds) >= 16 and m, 10, "the 16 requests counted")

    def grown(*path):
        return delta(after, before, *path)

    # 7 + 2 ranges + 1 for the ETag + 304 (3xx) + 416 (4xx) on the tensor endpoint
    assert grown("endpoints", "tensor", "requests", "2xx") == 7 + 2 + 1
    assert grown("endpoints", "tensor", "requests", "3xx") == 1
    assert grown("endpoints", "tensor", "requests", "4xx") == 1
    assert grown("endpoints", "slice", "requests", "2xx") == 3
    assert grown("endpoints", "model", "requests", "4xx") == 1
    assert grown("counters", "slice_requests") == 3
    assert grown("counters", "range_requests") == 3
    assert grown("counters", "multirange_requests") == 1
    assert grown("counters", "range_not_satisfiable") == 1
    assert grown("counters", "not_modified") == 1
    # Bytes: 8 whole tensors, 100 + the multipart body, the 416's JSON error.
    tensor_bytes = grown("endpoints", "tensor", "bytes")
    assert tensor_bytes > 8 * 1024 + 100 + 20
    assert grown("endpoints", "slice", "bytes") == 2 * 16 * 4 + 4 * 16 * 4 + 16 * 4
    assert after["registry"]["tensors"] == 1 and after["registry"]["models"] == 1
    assert after["uptime_seconds"] > 0
    assert after["requests"]["per_second"]["60s"] > 0


def test_prometheus_text_passes_promtool(root):
    promtool = shutil.which("promtool")
    if not promtool:
        pytest.skip("promtool is not installed (Debian package prometheus)")
    with running_daemon(root) as d:
        d.get(TENSOR)
        d.get(TENSOR + "?slice=0")
        texts = [d.get("/metrics"), d.get("/v1/metrics", {"Accept": "text/plain"})]
    for r in texts:
        assert r.status == 200 and r.header("Content-Type").startswith("text/plain")
        assert b'tensord_http_requests_total{endpoint="tensor",code="2xx"}' in r.body
        p = subprocess.run([promtool, "check", "metrics"], input=r.body, capture_output=True)
        assert p.returncode == 0, p.stdout + p.stderr


def fd_targets(pid):
    """What the process's descriptors point at (/proc/PID/fd links)."""
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            out.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:
            pass  # closed meanwhile
    return out


def test_file_dropped_into_the_root_is_served_without_restart(root):
    with running_daemon(root) as d:
        assert "anon_inode:inotify" in fd_targets(d.pid)  # the watcher's
        assert d.get("/v1/models/new").status == 404
        tmp = os.path.join(os.path.dirname(root), "new.safetensors")
        gen_models.write_safetensors(tmp, [("x", "U8", (4,), b"abcd")])
        os.rename(tmp, os.path.join(root, "new.safetensors"))
        assert wait_for(lambda: d.get("/v1/models/new/tensors/x").status == 200,
                        5 * faultlib.SLACK, 0.1)
        assert d.get("/v1/models/new/tensors/x").body == b"abcd"
        assert metrics(d)["counters"]["reloads"] >= 1


def test_sighup_rescans_and_bumps_the_generation(root):
    with running_daemon(root, "--watch", "false") as d:
        gen = json.loads(d.get("/v1/models").body)["generation"]
        # With the watcher off, a new model appears only after SIGHUP:
        # nothing watches the root (no inotify instance to wait for).
        assert "anon_inode:inotify" not in fd_targets(d.pid)
        gen_models.write_safetensors(os.path.join(root, "later", "model.safetensors"),
                                     [("y", "I8", (2,), b"\x01\x02")])
        assert d.get("/v1/models/later").status == 404
        d.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: d.get("/v1/models/later").status == 200, 5 * faultlib.SLACK, 0.1)
        assert json.loads(d.get("/v1/models").body)["generation"] > gen
        assert d.get("/v1/models/later/tensors/y").body == b"\x01\x02"


def test_model_that_became_invalid_is_reported_not_served(root):
    with running_daemon(root) as d:
        assert d.get(TENSOR).status == 200
        path = os.path.join(root, "m", "model.safetensors")
        tmp = path + ".tmp"
        with open(path, "rb") as f:
            blob = f.read()
        with open(tmp, "wb") as f:
            f.write(blob[:-10])                      # truncated copy, renamed over
        os.rename(tmp, path)
        assert wait_for(lambda: d.get(TENSOR).status == 409, 5 * faultlib.SLACK, 0.1)
        listed = json.loads(d.get("/v1/models").body)["models"]
        assert listed[0]["state"] == "invalid" and "error" in listed[0]
