"""Hostile input on the HTTP side: each class an attacker or a careless
client can reach without a token (malformed and ambiguous requests, memory
and slow-request exhaustion, range amplification), and start-up mistakes
that would have left the daemon open. Every test says what the defect was;
each fails on a3a5bfa and passes now. The models-directory side is in
test_hostile_models.py."""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

import faultlib
import tdutil
from faultlib import SLACK, connect, read_body, read_head, running_daemon


@pytest.fixture
def root():
    base = tempfile.mkdtemp(prefix="tensord-hostile-")
    models = os.path.join(base, "models")
    os.makedirs(models)
    data = faultlib.small_models(models)
    yield models, data
    shutil.rmtree(base, ignore_errors=True)


def exchange(port, raw, timeout=5):
    """Sends raw bytes on a new connection and reads until the peer closes or
    goes quiet. Returns (everything received, closed by the peer)."""
    with connect(port, timeout=timeout) as s:
        s.sendall(raw)
        data = b""
        s.settimeout(timeout)
        try:
            while True:
                c = s.recv(65536)
                if not c:
                    return data, True
                data += c
        except socket.timeout:
            return data, False
        except ConnectionResetError:
            return data, True


def status_of(data):
    if not data.startswith(b"HTTP/1."):
        return None
    return int(data.split(b" ", 2)[1])


# ---------------------------------------------------------------------------
# Start-up


def test_second_daemon_on_the_same_address_does_not_start(root):
    """SO_REUSEPORT let a second daemon bind the same address and take half
    the traffic. Now the second one stops with a clear error."""
    models, data = root
    with running_daemon(models) as d:
        p = subprocess.run([tdutil.tensord_bin(), "serve", "--models", models, "--listen",
                            f"127.0.0.1:{d.port}", "--threads", "1"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
        out = (p.stdout + p.stderr).decode("utf-8", "replace")
        assert p.returncode != 0, f"a second daemon started on port {d.port}:\n{out}"
        assert "Address already in use" in out and f"127.0.0.1:{d.port}" in out, out
        # Every request still reaches the first daemon.
        for _ in range(20):
            assert d.get("/v1/models/m/tensors/v").body == data["v"]


@pytest.mark.parametrize("form", ["equals", "separate"])
def test_config_file_forms_are_both_read(root, form):
    """--config=FILE was silently ignored: the daemon started on defaults."""
    models, _ = root
    base = os.path.dirname(models)
    port = tdutil.free_port()
    conf = os.path.join(base, "t.conf")
    with open(conf, "w") as f:
        f.write(f"models = {models}\nlisten = 127.0.0.1:{port}\nmax_ranges = 3\n")
    arg = [f"--config={conf}"] if form == "equals" else ["--config", conf]
    p = subprocess.run([tdutil.tensord_bin(), "--print-config"] + arg, capture_output=True,
                       text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    assert "max_ranges = 3" in p.stdout and f"listen = 127.0.0.1:{port}" in p.stdout, p.stdout


@pytest.mark.parametrize("arg", [["--config=/nonexistent/tensord.conf"],
                                 ["--config", "/nonexistent/tensord.conf"], ["--config="]])
def test_missing_config_file_stops_startup(root, arg):
    models, _ = root
    rc, out = faultlib.run_daemon_expect_failure(models, *arg)
    assert rc != 0, f"started without its configuration file:\n{out}"
    assert "No such file" in out, out


# ---------------------------------------------------------------------------
# Memory: every request gets an answer, and nothing it allocated outlives it


def metrics(d):
    return d.json("/v1/metrics")


def test_many_query_parameters_are_answered_and_freed(root):
    """A query of ~600 parameters filled libmicrohttpd's per-connection
    memory: the request got no answer, and its record and URI copy were
    never freed (in_flight never fell; one client loop took RSS from 5 MB to
    1 GB in 10 s; SIGTERM then waited the whole drain). Each is now answered
    414 and freed."""
    models, _ = root
    with running_daemon(models, check_exit=False) as d:
        paths = ["/healthz", "/v1/models/m/tensors/w", "/v1/models", "/nope"]
        q = "&".join(f"a{i}=1" for i in range(600))
        for p in paths:
            data, closed = exchange(d.port, faultlib.request_bytes(f"{p}?{q}"))
            assert status_of(data) == 414 and closed, (p, data[:300])
        rss0 = d.rss_kib()
        for i in range(1500):
            data, _ = exchange(d.port, faultlib.request_bytes(f"{paths[i % 4]}?{q}&i={i}"))
            assert status_of(data) == 414, (i, data[:200])
        grown = d.rss_kib() - rss0
        # Under ASan freed memory waits in its quarantine (RSS grows whatever
        # the daemon frees); there LeakSanitizer's report at exit is the check.
        if not faultlib.SANITIZED:
            assert grown < 4096, f"RSS grew by {grown} KiB over 1500 refused requests"
        m = metrics(d)
        assert m["requests"]["in_flight"] == 1, m["requests"]  # this request only
        t0 = time.monotonic()
        assert d.alive()
        assert d.stop() == 0, d.log_tail()
        assert time.monotonic() - t0 < 5, "SIGTERM waited for requests that do not exist"


def sweep(port, make, values):
    """Sends make(v) for each v on its own connection; returns {v: status}
    for the ones that got no HTTP answer at all."""
    silent = {}
    for v in values:
        data, _ = exchange(port, make(v), timeout=5 * SLACK)
        if status_of(data) is None:
            silent[v] = data[:100]
    return silent


def req(target, fields=b""):
    return b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + fields + b"\r\n"


@pytest.mark.parametrize("limit", [8192, 32768])
def test_every_request_near_the_memory_limit_gets_a_status(root, limit):
    """Requests just under and over max_request_header_bytes (one large
    field, many small fields, a long path, a long query) could leave
    libmicrohttpd no room to answer: the connection was closed without a
    status line. Every one now gets a status."""
    models, _ = root
    lo, hi = limit - 2048, limit + 10240
    step = 41 if limit == 8192 else 97
    with running_daemon(models, "--max-request-header-bytes", limit) as d:
        silent = sweep(d.port, lambda n: req(b"/healthz", b"X-Pad: " + b"a" * n + b"\r\n"),
                       range(lo, hi, step))
        assert not silent, f"one large field: no answer for sizes {sorted(silent)[:10]}"
        silent = sweep(d.port, lambda k: req(b"/healthz", b"".join(b"h%d: v\r\n" % i
                                                                  for i in range(k))),
                       range(1, 700, 3))
        assert not silent, f"many fields: no answer for counts {sorted(silent)[:10]}"
        silent = sweep(d.port, lambda n: req(b"/v1/models/" + b"a" * n), range(lo, hi, step))
        assert not silent, f"long path: no answer for sizes {sorted(silent)[:10]}"
        silent = sweep(d.port, lambda n: req(b"/healthz?x=" + b"a" * n), range(lo, hi, step))
        assert not silent, f"long query: no answer for sizes {sorted(silent)[:10]}"
        m = metrics(d)
        assert m["requests"]["in_flight"] == 1, m["requests"]


def test_oversized_requests_get_the_right_status(root):
    """max_request_header_bytes is each connection's memory; a request may use
    all of it but 8 KiB (a quarter of a small one), kept for its answer."""
    models, _ = root
    with running_daemon(models, "--max-request-header-bytes", 8192) as d:  # requests up to 6 KiB
        data, closed = exchange(d.port, req(b"/healthz", b"X-Pad: " + b"a" * 6500 + b"\r\n"))
        assert status_of(data) == 431 and closed, data[:300]
        data, closed = exchange(d.port, req(b"/v1/models/" + b"a" * 6500))
        assert status_of(data) == 414 and closed, data[:300]
        data, _ = exchange(d.port, req(b"/healthz", b"X-Pad: " + b"a" * 5900 + b"\r\n"))
        assert status_of(data) == 200, data[:300]
    with running_daemon(models) as d:  # the default 32 KiB: requests up to 24 KiB
        data, closed = exchange(d.port, req(b"/healthz", b"X-Pad: " + b"a" * 25000 + b"\r\n"))
        assert status_of(data) == 431 and closed, data[:300]
        data, closed = exchange(d.port, req(b"/healthz", b"".join(b"h%d: v\r\n" % i
                                                                 for i in range(150))))
        assert status_of(data) == 431 and closed, data[:300]
        data, _ = exchange(d.port, req(b"/healthz", b"X-Pad: " + b"a" * 24000 + b"\r\n"))
        assert status_of(data) == 200, data[:300]
        data, _ = exchange(d.port, req(b"/healthz", b"".join(b"h%d: v\r\n" % i
                                                            for i in range(95))))
        assert status_of(data) == 200, data[:300]
        data, _ = exchange(d.port, req(b"/healthz", b"".join(b"h%02d: %s\r\n" % (i, b"v" * 200)
                                                            for i in range(95))))
        assert status_of(data) == 200, data[:300]  # 95 fields and 20 KiB together


# ---------------------------------------------------------------------------
# Slow requests: header_timeout covers every request, headers and body


def dribble(sock, data, every, until):
    """Sends data one byte at a time, `every` seconds apart, until the peer
    closes or `until` seconds pass. Returns the seconds until the close, or
    None when it stayed open."""
    t0 = time.monotonic()
    for b in data:
        if time.monotonic() - t0 > until:
            return None
        try:
            sock.sendall(bytes([b]))
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - t0
        time.sleep(every)
        sock.setblocking(False)
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - t0
        except BlockingIOError:
            pass
        except ConnectionResetError:
            return time.monotonic() - t0
        finally:
            sock.setblocking(True)
    return None


SLOW_LINE = b"GET /v1/models/m/tensors/w HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200


def test_slow_second_request_on_a_kept_alive_connection_is_cut(root):
    """header_timeout was armed for a connection's first request only: the
    next request line on a kept-alive connection could be dribbled forever."""
    models, _ = root
    with running_daemon(models, "--header-timeout", 2) as d:
        s = connect(d.port, timeout=10)
        for _ in range(2):  # two normal requests first
            s.sendall(faultlib.request_bytes("/healthz"))
            status, hdrs, rest = read_head(s)
            assert status == 200
            read_body(s, hdrs, rest)
        took = dribble(s, SLOW_LINE, 0.25, 10 * SLACK)
        s.close()
        assert took is not None, "a dribbled second request line was never cut"
        assert took < 2 + 2.5 * SLACK, f"cut after {took:.1f}s with header_timeout 2"


@pytest.mark.parametrize("method, path", [("POST", "/v1/models/m/gpu"),
                                          ("GET", "/v1/models/m/tensors/w")])
def test_slow_body_is_cut(root, method, path):
    """A request body was never timed: its headers complete, it could be sent
    one byte at a time forever."""
    models, _ = root
    with running_daemon(models, "--header-timeout", 2) as d:
        s = connect(d.port, timeout=10)
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 4000\r\n"
                  "Content-Type: application/json\r\n\r\n".encode())
        took = dribble(s, b"{" + b" " * 3998 + b"}", 0.25, 10 * SLACK)
        s.close()
        assert took is not None, "a dribbled body was never cut"
        assert took < 2 + 2.5 * SLACK, f"cut after {took:.1f}s with header_timeout 2"


def test_dribbling_connections_cannot_lock_everyone_out(root):
    """max_connections connections each dribbling their second request (or a
    request after a 401) kept every other client out."""
    models, _ = root
    base = os.path.dirname(models)
    tokens = os.path.join(base, "tokens")
    with open(tokens, "w") as f:
        f.write("read r3ad-t0ken-Zq8x1VwQpL2m\n")
    auth = {"Authorization": "Bearer r3ad-t0ken-Zq8x1VwQpL2m"}
    with running_daemon(models, "--header-timeout", 2, "--max-connections", 6,
                        "--auth-token-file", tokens, probe_headers=auth) as d:
        socks = []
        for i in range(6 + 64):  # every slot libmicrohttpd has
            try:
                s = connect(d.port, timeout=10)
            except OSError:
                break
            s.sendall(faultlib.request_bytes("/v1/models" if i % 2 else "/healthz"))
            socks.append(s)
        for s in socks:  # answered (200 or 401), then the slow next request begins
            read_head(s)
            s.sendall(SLOW_LINE[:10])
        for s in socks:  # cut once header_timeout passes (or refused at once)
            assert faultlib.wait_closed(s, 2 + 5 * SLACK) is not None, "a dribbler was never cut"
        r = d.get("/v1/models/m/tensors/w", auth)
        assert r.status == 200, r
        for s in socks:
            s.close()


# ---------------------------------------------------------------------------
# Ambiguous framing (request smuggling) and NUL bytes


FRAMINGS = [
    (b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", 400),
    (b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", 400),
    (b"Content-Length: 5\r\nContent-Length: 6\r\n", 400),
    (b"Content-Length: 5\r\nContent-Length: 5 \r\nContent-Length: 7\r\n", 400),
    (b"Content-Length: +5\r\n", 400),
    (b"Content-Length: 5, 5\r\n", 400),
    (b"Transfer-Encoding: gzip, chunked\r\n", 501),
    (b"Transfer-Encoding: identity\r\n", 501),
    (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 501),
]


@pytest.mark.parametrize("framing, status", FRAMINGS)
@pytest.mark.parametrize("path", [b"/v1/models/m/gpu", b"/healthz"])
def test_ambiguous_body_framing_is_refused_and_closed(root, framing, status, path):
    """Both Content-Length and Transfer-Encoding, or two Content-Lengths that
    differ, were answered and the connection kept: a proxy that frames the
    body the other way sees a second, smuggled request. Now 400 (501 for a
    transfer coding other than chunked) and the connection is closed, so the
    bytes after the headers are never read as a request."""
    models, _ = root
    with running_daemon(models) as d:
        smuggled = b"GET /v1/models/m/tensors/w HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        raw = (b"POST " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n" + framing + b"\r\n"
               b"0\r\n\r\n" + smuggled)
        data, closed = exchange(d.port, raw)
        assert status_of(data) == status, data[:400]
        # libmicrohttpd answers a Content-Length that is not one number itself,
        # and repeats its own header inside that 400's body; what matters is
        # that no second answer, to the smuggled request, follows.
        assert b" 200 OK\r\n" not in data, f"the smuggled request was answered: {data[:600]!r}"
        assert closed, "the connection stayed open after an ambiguous request"


def test_transfer_encoding_in_http_1_0_is_refused(root):
    models, _ = root
    with running_daemon(models) as d:
        data, closed = exchange(d.port, b"POST /v1/models/m/gpu HTTP/1.0\r\n"
                                        b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        assert status_of(data) == 400 and closed, data[:300]


@pytest.mark.parametrize("target", [b"/v1/models/m\x00/tensors/w", b"/healthz\x00",
                                    b"/v1/models/m/tensors/w?slice=0\x00:3",
                                    b"/v1/models/m\x00HTTP/1.1", b"/\x00/v1/models"])
def test_nul_byte_in_the_target_is_refused(root, target):
    """libmicrohttpd ends the target at its first NUL byte, so
    /v1/models/m<NUL>/anything was served as /v1/models/m."""
    models, _ = root
    with running_daemon(models) as d:
        data, _ = exchange(d.port, b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert status_of(data) == 400, data[:300]
        assert b"NUL" in data, data[:300]
        assert d.get("/v1/models/m/tensors/v").status == 200


# ---------------------------------------------------------------------------
# HTTP semantics (RFC 9110)


def gpu_state(d):
    r = d.get("/v1/models/m/gpu")
    assert r.status == 200, r
    return r.json().get("state")


def wait_ready(d):
    assert faultlib.wait_for(lambda: gpu_state(d) == "ready", 20 * SLACK), gpu_state(d)


def test_post_and_delete_check_preconditions_before_acting(root):
    """DELETE …/gpu with If-Match: "nope" evicted, then answered 412; POST
    evaluated its preconditions after preloading. Preconditions now come
    first, and nothing happens when they fail."""
    models, _ = root
    host = json.dumps({"device": "host"}).encode()
    with running_daemon(models) as d:
        r = d.request("POST", "/v1/models/m/gpu", {"If-Match": '"nope"'}, host)
        tdutil.assert_error(r, 412, "precondition_failed")
        r = d.request("POST", "/v1/models/m/gpu", {"If-None-Match": "*"}, host)
        tdutil.assert_error(r, 412, "precondition_failed")
        assert gpu_state(d) in ("none", None), "a failed precondition still preloaded"
        r = d.request("POST", "/v1/models/m/gpu", {"If-Match": "*"}, host)
        assert r.status in (200, 202), r
        wait_ready(d)
        for hdrs in ({"If-Match": '"nope"'}, {"If-None-Match": "*"},
                     {"If-Match": '"a", "b"', "If-None-Match": '"c"'}):
            r = d.request("DELETE", "/v1/models/m/gpu", hdrs)
            tdutil.assert_error(r, 412, "precondition_failed")
            assert gpu_state(d) == "ready", f"{hdrs}: evicted although the precondition failed"
        r = d.request("DELETE", "/v1/models/m/gpu", {"If-None-Match": '"other"'})
        assert r.status == 200, r


def test_range_applies_to_get_only(root):
    """POST …/gpu with a Range header answered 206 with a slice of its JSON."""
    models, _ = root
    host = json.dumps({"device": "host"}).encode()
    with running_daemon(models) as d:
        assert d.request("POST", "/v1/models/m/gpu", {}, host).status in (200, 202)
        wait_ready(d)
        r = d.request("POST", "/v1/models/m/gpu", {"Range": "bytes=0-5"}, host)
        assert r.status == 200, r
        assert r.header("Content-Range") is None
        assert json.loads(r.body)["model"] == "m", r


def test_not_modified_carries_no_zero_length(root):
    """A 304 carried Content-Length: 0, which RFC 9110 §8.6 forbids unless
    the 200 would be empty: it now carries the 200's length, or none."""
    models, data = root
    with running_daemon(models) as d:
        for path in ("/v1/models/m/tensors/w", "/v1/models/m", "/v1/models/m/header",
                     "/v1/models/m/files/model.safetensors"):
            g = d.get(path)
            r = d.get(path, {"If-None-Match": g.header("ETag")})
            assert r.status == 304 and r.body == b"", (path, r)
            cl = r.header("Content-Length")
            assert cl is None or int(cl) == len(g.body), (path, cl, len(g.body))
            raw = faultlib.raw_get(d.port, path, {"If-None-Match": g.header("ETag")})
            assert raw.status == 304 and raw.body == b"", (path, raw.body[:100])


@pytest.mark.parametrize("path", ["/v1/models", "/v1/metrics", "/v1/models/m/gpu", "/readyz"])
def test_star_preconditions_on_answers_without_an_etag(root, path):
    """If-Match: * failed (412) and If-None-Match: * was ignored for answers
    that have no ETag; "*" matches any current representation."""
    models, _ = root
    with running_daemon(models) as d:
        assert d.get(path, {"If-Match": "*"}).status == 200
        r = d.get(path, {"If-None-Match": "*"})
        assert r.status == 304 and r.body == b"", r
        tdutil.assert_error(d.get(path, {"If-Match": '"x"'}), 412, "precondition_failed")
        assert d.get(path, {"If-None-Match": '"x"'}).status == 200


def test_head_answers_what_get_answers_for_a_changed_file(root):
    """HEAD answered 200 where GET answered 503 for a file changed since it
    was validated: HEAD now builds the same answer without the body."""
    models, _ = root
    path, _ = faultlib.big_model(models, rows=64, cols=4096)
    with running_daemon(models, "--watch", "false") as d:
        url = "/v1/models/big/tensors/w"
        for hdrs in ({}, {"Range": "bytes=0-99"}, {"Range": "bytes=0-9,5000-5009"}):
            g, h = d.get(url, hdrs), d.head(url, hdrs)
            assert (g.status, h.status) == (200 if not hdrs else 206,) * 2
        with open(path, "r+b") as f:  # written in place: same size, new mtime
            f.seek(200)
            f.write(b"changed")
        for u in (url, url + "?slice=0:2", "/v1/models/big/files/model.safetensors"):
            for hdrs in ({}, {"Range": "bytes=0-99"}, {"Range": "bytes=0-9,5000-5009"}):
                g, h = d.get(u, hdrs), d.head(u, hdrs)
                assert g.status == h.status, (u, hdrs, g, h)
                for k in ("Content-Type", "Content-Length", "ETag", "Content-Range"):
                    if k != "Content-Length" or g.status < 300:
                        assert g.header(k) == h.header(k), (u, hdrs, k)


# ---------------------------------------------------------------------------
# Validators: from content identity, never splicing two versions


def test_etags_do_not_depend_on_the_inode(root):
    """The ETag held the inode, so two replicas over identical files
    disagreed (nginx's slice module cut a download across two replicas with
    "etag mismatch"). Copies with the same size and mtime now agree."""
    models, _ = root
    base = os.path.dirname(models)
    copy = os.path.join(base, "replica")
    shutil.copytree(models, copy, copy_function=shutil.copy2)  # same mtime, new inodes
    paths = ["/v1/models/m/files/model.safetensors", "/v1/models/m/tensors/w",
             "/v1/models/m/tensors/w?slice=0:2&format=npy", "/v1/models/m/header",
             "/v1/models/m/files/model.safetensors/header", "/v1/models/m"]
    with running_daemon(models) as a, running_daemon(copy) as b:
        assert (os.stat(os.path.join(models, "m", "model.safetensors")).st_ino !=
                os.stat(os.path.join(copy, "m", "model.safetensors")).st_ino)
        for p in paths:
            ea, eb = a.get(p).header("ETag"), b.get(p).header("ETag")
            assert ea and ea == eb, (p, ea, eb)
            assert faultlib.raw_get(b.port, p, {"If-None-Match": ea}).status == 304, p


def test_if_range_never_joins_two_versions_with_the_same_mtime(root):
    """Two versions with the same mtime (a rewrite that restores it, or two
    writes in one second) let a resuming client join version A's first part
    to version B's rest through If-Range with a date, or with an ETag built
    from size and mtime. Neither validates now: the client gets B whole."""
    models, _ = root
    path, a = faultlib.big_model(models, rows=16, cols=4096)
    url = "/v1/models/big/files/model.safetensors"
    with running_daemon(models) as d:
        g = d.get(url)
        etag, lm = g.header("ETag"), g.header("Last-Modified")
        st = os.stat(path)
        with open(path, "r+b") as f:  # version B: same size, differs in the first half
            f.seek(len(g.body) // 4)
            f.write(os.urandom(4096))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # and the same mtime
        with open(path, "rb") as f:
            b = f.read()
        assert b != g.body
        half = len(b) // 2

        def resumed(validator):
            r = d.get(url, {"Range": f"bytes={half}-", "If-Range": validator})
            if r.status == 206:
                assert g.body[:half] + r.body == b, "a 206 joined two versions"
            return r

        assert faultlib.wait_for(lambda: d.get(url).status == 200 and d.get(url).body == b,
                                 10 * SLACK), "the daemon never served version B"
        for v in (etag, lm):
            r = resumed(v)
            assert r.status == 200 and r.body == b, (v, r)
