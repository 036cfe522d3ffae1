"""A download the client abandons is counted as what it got: the access log's
bytes, bytes.total, the endpoint's bytes and the sendfile/copy counters all
equal the body bytes the client's own kernel received (TCP_INFO
tcpi_bytes_received on the client's socket, less the header the client
parsed), and responses_aborted counts it once. A download that completes
counts its whole body, and a small answer none of this touches.

The oracle is the client's kernel, independent of the daemon: it also checks
the daemon's reckoning of the answer's header size (http_answer.c,
answer_head_bytes) byte for byte."""
import json
import os
import re
import shutil
import socket
import struct
import tempfile
import time

import pytest

import tdutil
from tdutil import gen_models

BIG_ROWS, BIG_COLS = 4096, 65536   # a 256 MiB U8 tensor, as the example
READ_BEFORE_ABORT = 1 << 20
TCPI_BYTES_RECEIVED = 128          # offsetof(struct tcp_info, tcpi_bytes_received)


@pytest.fixture(scope="module")
def big_daemon():
    base = tempfile.mkdtemp(prefix="tensord-aborted-")
    root = os.path.join(base, "models")
    gen_models.make_big(os.path.join(root, "big", "model.safetensors"), BIG_ROWS, BIG_COLS)
    access = os.path.join(base, "access.log")
    d = tdutil.Daemon(root, base, ["--access-log", access]).start()
    d.access_log = access
    try:
        yield d
    finally:
        d.stop_checked()
        shutil.rmtree(base, ignore_errors=True)


def bytes_received(sock):
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return struct.unpack_from("<Q", info, TCPI_BYTES_RECEIVED)[0]


def abandon(port, path, read_body=READ_BEFORE_ABORT, version="HTTP/1.1", extra=""):
    """GETs path, reads the header and read_body bytes of the body, waits
    until the kernel receives nothing more (both socket buffers full), then
    closes with data unread (a reset). Returns (status, Content-Length, body
    bytes the client's kernel received)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)
    s.sendall(f"GET {path} {version}\r\nHost: 127.0.0.1\r\n{extra}\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        assert chunk, "connection closed before the headers"
        buf += chunk
    head_len = buf.index(b"\r\n\r\n") + 4
    head = buf[:head_len].decode("latin-1")
    status = int(head.split()[1])
    length = int(re.search(r"(?im)^content-length:\s*(\d+)", head).group(1))
    got = len(buf) - head_len
    while got < read_body:
        chunk = s.recv(min(65536, read_body - got))
        assert chunk
        got += len(chunk)
    last, stable_since = bytes_received(s), time.monotonic()
    while time.monotonic() - stable_since < 0.4:
        time.sleep(0.05)
        now = bytes_received(s)
        if now != last:
            last, stable_since = now, time.monotonic()
    s.close()  # unread data: the kernel sends a reset
    return status, length, last - head_len


def access_lines(d, path, count, timeout=10):
    deadline = time.monotonic() + timeout
    while True:
        with open(d.access_log) as f:
            lines = [ln.split() for ln in f if f" {path} " in ln]
        if len(lines) >= count or time.monotonic() > deadline:
            return lines
        time.sleep(0.05)


def metrics(d):
    r = d.get("/v1/metrics")
    assert r.status == 200
    return json.loads(r.body), len(r.body)


def settled_metrics(d):
    """metrics(d) once the answers sent before it are counted: an answer's
    bytes are added when libmicrohttpd completes it, which may be after the
    client read it and asked again. Two documents in a row whose copied
    bytes differ by exactly the first one's body leave nothing in flight."""
    prev, prev_len = metrics(d)
    for _ in range(50):
        cur, cur_len = metrics(d)
        if cur["counters"]["copied_bytes"] - prev["counters"]["copied_bytes"] == prev_len:
            return cur, cur_len
        prev, prev_len = cur, cur_len
        time.sleep(0.02)
    raise AssertionError("the metrics counters never settled")


def prometheus(d):
    r = d.get("/metrics")
    assert r.status == 200
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r"(?m)^(tensord_[a-z_]+(?:\{[^}]*\})?) (\S+)$", r.body.decode())}


def deltas(before, after, mbody):
    """What changed between two metrics documents, less the first one's own
    body (counted as copied bytes of endpoint "metrics" when it ended)."""
    c0, c1 = before["counters"], after["counters"]
    e0, e1 = before["endpoints"], after["endpoints"]
    return {
        "bytes_total": after["bytes"]["total"] - before["bytes"]["total"] - mbody,
        "sendfile": c1["sendfile_bytes"] - c0["sendfile_bytes"],
        "copied": c1["copied_bytes"] - c0["copied_bytes"] - mbody,
        "aborted": c1["responses_aborted"] - c0["responses_aborted"],
        "ep": {k: e1[k]["bytes"] - e0[k]["bytes"] for k in e1 if k != "metrics"},
    }


@pytest.mark.parametrize("kind", ["sendfile", "streamed"])
def test_abandoned_download_counts_what_the_client_got(big_daemon, kind):
    d = big_daemon
    if kind == "sendfile":  # one contiguous span: sendfile
        path, endpoint, counter = "/v1/models/big/files/model.safetensors", "file", "sendfile"
    else:  # the .npy prefix and the data: the streamed reader
        path, endpoint, counter = "/v1/models/big/tensors/w?format=npy", "tensor", "copied"
    prom0 = prometheus(d)
    before, mbody = settled_metrics(d)
    status, length, got = abandon(d.port, path)
    assert status == 200 and length > 256 << 20
    assert READ_BEFORE_ABORT <= got < length // 8, got

    lines = access_lines(d, path, 1)
    assert len(lines) == 1, lines
    method, logged_path, st, logged = lines[0][1:5]
    assert (method, logged_path, st) == ("GET", path, "200")
    assert int(logged) == got, f"access log says {logged} bytes, the client's kernel got {got}"

    after, _ = metrics(d)
    dl = deltas(before, after, mbody)
    prom1 = prometheus(d)
    assert dl["aborted"] == 1
    assert dl["bytes_total"] == got
    assert dl["ep"][endpoint] == got and all(v == 0 for k, v in dl["ep"].items() if k != endpoint)
    assert dl[counter] == got
    assert dl["sendfile" if counter == "copied" else "copied"] == 0
    # The Prometheus names of the same counters.
    aborted = "tensord_http_responses_aborted_total"
    assert prom1[aborted] - prom0[aborted] == 1
    if counter == "sendfile":  # the scrapes and metrics documents in between are copied bytes
        key = 'tensord_sent_bytes_total{method="sendfile"}'
        assert prom1[key] - prom0[key] == got


@pytest.mark.parametrize("version,extra", [
    ("HTTP/1.0", ""), ("HTTP/1.0", "Connection: keep-alive\r\n"),
    ("HTTP/1.1", "Connection: close\r\n"), ("HTTP/1.1", "Range: bytes=100-\r\n")])
def test_abandoned_count_whatever_the_framing(big_daemon, version, extra):
    """The header libmicrohttpd writes differs with the request's version and
    Connection header, and with the answer (206): the count stays exact."""
    d = big_daemon
    path = "/v1/models/big/files/model.safetensors"
    n0 = len(access_lines(d, path, 0))
    status, length, got = abandon(d.port, path, version=version, extra=extra)
    assert status == (206 if "Range" in extra else 200)
    lines = access_lines(d, path, n0 + 1)
    assert int(lines[n0][4]) == got


def test_completed_download_counts_its_whole_body(big_daemon):
    d = big_daemon
    path = "/v1/models/big/tensors/w?slice=0:64"   # 4 MiB of one contiguous run: sendfile
    before, mbody = settled_metrics(d)
    r = d.get(path)
    assert r.status == 200 and len(r.body) == 64 * BIG_COLS
    lines = access_lines(d, path, 1)
    assert int(lines[-1][4]) == len(r.body)
    dl = deltas(before, metrics(d)[0], mbody)
    assert dl["aborted"] == 0
    assert dl["bytes_total"] == len(r.body) == dl["ep"]["slice"]
    assert dl["sendfile"] + dl["copied"] == len(r.body)


def test_head_and_small_answers_count_no_abort(big_daemon):
    d = big_daemon
    path = "/v1/models/big/files/model.safetensors"
    n0 = len(access_lines(d, path, 0))
    before, mbody = settled_metrics(d)
    assert d.head(path).status == 200
    r = d.get(path, {"Range": "bytes=0-99"})
    assert r.status == 206 and len(r.body) == 100
    # Counted when libmicrohttpd completes them, just before their log lines.
    assert len(access_lines(d, path, n0 + 2)) == n0 + 2
    dl = deltas(before, metrics(d)[0], mbody)
    assert dl["aborted"] == 0
    assert dl["bytes_total"] == 100 == dl["ep"]["file"]
