"""Limits: every one configurable, with safe defaults, and each enforced with
the documented answer."""
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

import faultlib
import tdutil
from faultlib import connect, raw_get, read_head, request_bytes, running_daemon, wait_closed


@pytest.fixture
def models():
    b = tempfile.mkdtemp(prefix="tensord-lim-")
    m = os.path.join(b, "models")
    faultlib.small_models(m)
    # A 1 MiB tensor for slice limits.
    data = bytes(range(256)) * 4096
    tdutil.gen_models.write_safetensors(os.path.join(m, "big", "model.safetensors"),
                                        [("w", "U8", (1024, 1024), data)])
    yield m
    shutil.rmtree(b, ignore_errors=True)


def test_defaults_are_bounded():
    p = subprocess.run([tdutil.tensord_bin(), "--print-config"], capture_output=True, text=True,
                       timeout=20)
    assert p.returncode == 0, p.stderr
    cfg = {}
    for line in p.stdout.splitlines():
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")) and "=" in line:
            k, _, v = line.partition("=")
            cfg[k.strip()] = v.strip().strip('"')

    def size(v):
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
        return int(v[:-1]) * mult[v[-1].upper()] if v[-1:].upper() in mult else int(v)

    assert 0 < int(cfg["max_connections"]) <= 65536, cfg["max_connections"]
    assert 0 < int(cfg["connection_timeout"]) <= 600, cfg["connection_timeout"]
    assert 4096 <= size(cfg["max_request_header_bytes"]) <= 1 << 20
    assert 0 < int(cfg["max_ranges"]) <= 256, cfg["max_ranges"]
    assert 0 < size(cfg["max_slice_bytes"]), "slices are unbounded by default"
    assert "max_connections_per_ip" in cfg


def test_max_connections_answers_503(models):
    with running_daemon(models, "--max-connections", 4) as d:
        held = [connect(d.port) for _ in range(5)]
        try:
            time.sleep(0.2)
            r = raw_get(d.port, "/v1/models/m/tensors/v", timeout=5)
            assert r.status == 503, r
            assert r.headers.get("connection", "").lower() == "close"
            assert r.headers.get("retry-after")
            assert r.json()["error"]["code"] == "overloaded"
        finally:
            for s in held:
                s.close()
        assert faultlib.wait_for(lambda: raw_get(d.port, "/healthz").status == 200, 5)


def open_connections(s):
    """The daemon's count of open connections, asked on s (kept alive)."""
    s.sendall(request_bytes("/v1/metrics"))
    status, headers, rest = read_head(s)
    body, complete = faultlib.read_body(s, headers, rest)
    assert status == 200 and complete, (status, headers)
    return json.loads(body)["connections"]["open"]


def test_max_connections_per_ip(models):
    with running_daemon(models, "--max-connections-per-ip", 3) as d:
        # The readiness probes' connections count until the daemon has seen
        # them close: asked on the first held one, kept alive, until it is
        # the only one open.
        held = [connect(d.port)]
        assert faultlib.wait_for(lambda: open_connections(held[0]) == 1, 10), \
            f"{open_connections(held[0])} connections open, not 1"
        held += [connect(d.port) for _ in range(2)]
        try:
            for s in held:  # each one surely accepted and counted: it answered
                s.sendall(request_bytes("/healthz"))
                assert read_head(s)[0] == 200
            tries = [raw_get(d.port, "/healthz", timeout=5) for _ in range(4)]
            served = [r for r in tries if r.status not in (None, 503)]
            assert not served, (f"with 3 connections held from 127.0.0.1 and "
                                f"max_connections_per_ip=3, {len(served)} of 4 further "
                                f"connections were served: {[r.status for r in tries]}")
            assert max(r.elapsed for r in tries) < 3, "a refused connection took too long"
            # Another client address is not affected.
            try:
                other = raw_get(d.port, "/healthz", timeout=5, source="127.0.0.2")
            except OSError as e:
                pytest.skip(f"cannot bind 127.0.0.2 here: {e}")
            assert other.status == 200, other
        finally:
            for s in held:
                s.close()
        assert faultlib.wait_for(lambda: raw_get(d.port, "/healthz").status == 200, 5)


def test_header_and_url_size(models):
    with running_daemon(models, "--max-request-header-bytes", "8K") as d:
        ok = raw_get(d.port, "/v1/models/m/tensors/v", {"X-Pad": "a" * 2000})
        assert ok.status == 200, ok
        r = raw_get(d.port, "/v1/models/m/tensors/v", {"X-Pad": "a" * 12000})
        assert r.status in (431, None), r
        r = raw_get(d.port, "/v1/models/m/tensors/v", {f"X-Pad-{i}": "a" * 100 for i in range(120)})
        assert r.status in (431, None), r
        r = raw_get(d.port, "/v1/models/" + "a" * 12000)
        assert r.status in (414, 431, None), r
        assert raw_get(d.port, "/healthz").status == 200


def test_request_body_limit(models):
    with running_daemon(models) as d:
        r = d.request("POST", "/v1/models/m/gpu", body=b'{"device":"host","pad":"' +
                      b"a" * 70000 + b'"}')
        tdutil.assert_error(r, 413, "body_too_large")


def test_max_slice_bytes(models):
    with running_daemon(models, "--max-slice-bytes", 4096) as d:
        r = d.get("/v1/models/big/tensors/w?slice=0:4")
        assert r.status == 200 and len(r.body) == 4096, r
        r = d.get("/v1/models/big/tensors/w?slice=0:5")
        tdutil.assert_error(r, 400, "slice_too_large")
        r = d.get("/v1/models/big/tensors/w?slice=0:5&format=npy")
        tdutil.assert_error(r, 400, "slice_too_large")
        r = d.get("/v1/models/big/tensors/w?slice=:,0:4")
        assert r.status == 200 and len(r.body) == 4096, r


def test_max_ranges(models):
    with running_daemon(models, "--max-ranges", 3) as d:
        url = "/v1/models/big/tensors/w"
        r = d.get(url, {"Range": "bytes=0-0,1000-1000,2000-2000"})
        assert r.status == 206 and r.ctype == "multipart/byteranges", r
        assert len(tdutil.parse_multipart_byteranges(r.header("Content-Type"), r.body)) == 3
        r = d.get(url, {"Range": "bytes=0-0,1000-1000,2000-2000,3000-3000"})
        assert r.status == 200 and len(r.body) == 1 << 20, "more parts than max_ranges: ignored"
        many = ",".join(f"{i}-{i}" for i in range(0, 2000, 2))
        r = d.get(url, {"Range": "bytes=" + many})
        assert r.status == 200, r


def test_default_max_ranges_bounds_multipart(models):
    """With the defaults a Range of 1000 parts is not answered part by part."""
    with running_daemon(models) as d:
        many = ",".join(f"{i}-{i}" for i in range(0, 2000, 2))
        r = d.get("/v1/models/big/tensors/w", {"Range": "bytes=" + many})
        assert r.status == 200 and len(r.body) == 1 << 20


def test_idle_keepalive_timeout(models):
    with running_daemon(models, "--connection-timeout", 2) as d:
        s = connect(d.port)
        try:
            s.sendall(request_bytes("/healthz"))
            status, hdrs, rest = read_head(s)
            assert status == 200
            t = wait_closed(s, 10 * faultlib.SLACK)
            assert t is not None, "an idle keep-alive connection was never closed"
            assert 1.0 <= t <= 5 * faultlib.SLACK, f"closed after {t:.1f}s with a 2 s timeout"
        finally:
            s.close()


@pytest.mark.parametrize("opt,value", [
    ("max-connections", "0"), ("max-ranges", "0"), ("max-request-header-bytes", "100"),
    ("connection-timeout", "-1"), ("max-connections-per-ip", "x"),
])
def test_limits_out_of_range_stop_startup(models, opt, value):
    rc, out = faultlib.run_daemon_expect_failure(models, f"--{opt}", value)
    assert rc != 0, f"--{opt} {value} was accepted"
    assert opt.replace("-", "_") in out, out
