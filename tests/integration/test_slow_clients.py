"""Clients that ask and do not read, while a model's hashes come in (issue
23, items 1 and 2): the description of a model with 60,000 tensors is
rendered once per hash state, off the HTTP threads, and every answer sends
that one rendering by reference, so 80 connections that never read it hold
a few megabytes, not 80 copies; a fetch of every tensor is streamed, so 80
such fetches hold no header of their own. What the description says is
checked with Python's json and hashlib, the fetch answer with the
independent safetensors reader of tdutil.

Memory is measured as the daemon's resident set (VmRSS) before and after;
nothing here is timed."""
import hashlib
import json
import os
import shutil
import socket
import tempfile
import time

import pytest

import faultlib
import tdutil
from faultlib import running_daemon
from tdutil import gen_models

N_TENSORS = 60000
N_FETCHED = 20000
CLIENTS = 80
MiB = 1 << 20


@pytest.fixture(scope="module")
def models_root():
    """Model "wide": 60,000 U8[1] tensors and a 16 MiB blob.bin that one
    hashing thread paced at 256 KiB/s takes a minute to read (it comes first,
    so the model's hashes stay incomplete while a test runs); model
    "fetched": 20,000 U8[1] tensors."""
    base = tempfile.mkdtemp(prefix="tensord-slow-")
    root = os.path.join(base, "models")
    gen_models.make_many_tensors(os.path.join(root, "wide", "model.safetensors"), N_TENSORS)
    gen_models.make_many_tensors(os.path.join(root, "fetched", "model.safetensors"), N_FETCHED)
    with open(os.path.join(root, "wide", "blob.bin"), "wb") as f:
        f.write(os.urandom(16 * MiB))
    with open(os.path.join(root, "wide", "config.json"), "w") as f:
        f.write('{"model_type": "test"}\n')
    try:
        yield root
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def wide(models_root):
    """A daemon of its own for each test, so memory measured in one is not
    the heap another left behind."""
    with running_daemon(models_root, "--hash-threads", 1, "--hash-max-bytes-per-second",
                        "256K") as d:
        d.root = models_root
        yield d


def counters(d):
    return d.json("/v1/metrics")["counters"]


def idle_connections(d, n, request):
    """n connections that each send `request` and never read the answer."""
    socks = []
    for _ in range(n):
        s = faultlib.connect(d.port, timeout=10)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(request)
        socks.append(s)
    return socks


def assert_grown_under(grown_kib, limit_kib, what):
    # Under ASan freed memory waits in its quarantine (RSS grows whatever the
    # daemon frees); there LeakSanitizer's report at exit is the check.
    if not faultlib.SANITIZED:
        assert grown_kib < limit_kib, f"RSS grew by {grown_kib} KiB for {what}"


def settle_rss(d):
    """The daemon's RSS once every connection has its answer queued: a
    /healthz on a fresh connection goes through after them."""
    for _ in range(3):
        assert faultlib.raw_get(d.port, "/healthz", timeout=60).status == 200
    return d.rss_kib()


def test_description_while_hashing_is_right(wide):
    doc = wide.json("/v1/models/wide")
    files = {f["name"]: f for f in doc["files"]}
    assert set(files) == {"blob.bin", "config.json", "model.safetensors"}
    assert doc["tensor_count"] == N_TENSORS and len(doc["tensors"]) == N_TENSORS
    known = [n for n, f in files.items() if f["sha256"]]
    assert doc["hashes"] == {"known": len(known), "files": 3, "complete": len(known) == 3}
    for n in known:
        with open(os.path.join(wide.root, "wide", n), "rb") as f:
            assert files[n]["sha256"] == hashlib.sha256(f.read()).hexdigest()
    assert files["blob.bin"]["sha256"] is None, "the paced blob cannot be hashed yet"
    r = wide.get("/v1/models/wide")
    etag = r.header("ETag")
    assert etag and r.status == 200
    assert wide.get("/v1/models/wide", {"If-None-Match": etag}).status == 304
    # A range of it is the same bytes.
    r2 = wide.get("/v1/models/wide", {"Range": "bytes=1000-200999"})
    assert r2.status == 206 and r2.body == r.body[1000:201000]


def test_many_requests_one_rendering(wide):
    """200 requests for the description in one hash state: rendered once
    (its tensors, and its files at that state), not once per request."""
    wide.json("/v1/models/wide")
    before = counters(wide)["documents_rendered"]
    states = set()
    for _ in range(200):  # HEAD needs the document as GET does (its ETag, its length)
        r = wide.head("/v1/models/wide")
        assert r.status == 200
        states.add(r.header("ETag"))
    # A state seen for the first time is one rendering (a hash may come in
    # meanwhile); a request never is.
    assert counters(wide)["documents_rendered"] - before <= len(states)
    # The merged header too, once.
    wide.json("/v1/models/wide/header")
    before = counters(wide)["documents_rendered"]
    for _ in range(20):
        assert wide.head("/v1/models/wide/header").status == 200
    assert counters(wide)["documents_rendered"] == before


def test_readers_that_do_not_read_share_one_description(wide):
    size = len(wide.get("/v1/models/wide").body)
    assert size > 7 * MiB
    rss0 = settle_rss(wide)
    socks = idle_connections(wide, CLIENTS, faultlib.request_bytes("/v1/models/wide"))
    try:
        grown = settle_rss(wide) - rss0
        # 80 private copies were 80 x 7.8 MB (less what the kernel buffers);
        # one shared one and the connections' own buffers are a few megabytes.
        assert_grown_under(grown, 24 * 1024, f"{CLIENTS} idle readers")
    finally:
        for s in socks:
            s.close()


def test_fetches_that_are_not_read_hold_no_header(wide):
    body = b"{}"
    req = (b"POST /v1/models/fetched/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\n"
           b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n" + body)
    r = wide.request("POST", "/v1/models/fetched/fetch", body=body)
    assert r.status == 200
    _, header_len, tensors = tdutil.read_safetensors_bytes(r.body)
    assert len(tensors) == N_FETCHED
    assert all(t == ("U8", (1,), b"\x01") for t in tensors.values())
    assert header_len > 1 * MiB
    # The ETag and a range of the streamed answer are stable.
    r2 = wide.request("POST", "/v1/models/fetched/fetch", {"Range": "bytes=1000000-1099999"},
                      body)
    assert r2.status == 206 and r2.body == r.body[1000000:1100000]
    assert r2.header("ETag") == r.header("ETag")
    rss0 = settle_rss(wide)
    socks = idle_connections(wide, CLIENTS, req)
    try:
        grown = settle_rss(wide) - rss0
        # Each answer held its 1.5 MB header (168 MB in all); now its plan,
        # a cursor and libmicrohttpd's 256 KiB block buffer.
        assert_grown_under(grown, CLIENTS * 320 + 12 * 1024, f"{CLIENTS} idle fetches")
    finally:
        for s in socks:
            s.close()


@pytest.fixture(scope="module")
def repo_root():
    """Repo org/many: 12,000 small files of long names in 60 folders (its
    document and its recursive tree are about 4 MB each: more than a
    loopback socket takes in while its reader does not read)."""
    base = tempfile.mkdtemp(prefix="tensord-slow-hub-")
    root = os.path.join(base, "models")
    for i in range(12000):
        d = os.path.join(root, "org", "many", f"d{i // 200:02d}")
        if i % 200 == 0:
            os.makedirs(d)
        with open(os.path.join(d, f"f{i:05d}-{'x' * 240}.txt"), "w") as f:
            f.write(f"{i}\n")
    try:
        yield root
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("path", ["/api/models/org/many",
                                  "/api/models/org/many/tree/main?recursive=true"])
def test_hub_documents_that_are_not_read_are_shared(repo_root, path):
    """A Hub repo's document and tree are made once, off the HTTP threads,
    and every answer holds a reference: 80 connections that ask and never
    read hold a few megabytes, not 80 copies (issue 31)."""
    with running_daemon(repo_root) as d:
        d.wait_hashed(120)
        doc = json.loads(d.get(path).body)
        entries = doc["siblings"] if isinstance(doc, dict) else doc
        assert len(entries) == (12000 if isinstance(doc, dict) else 12000 + 60)
        rss0 = settle_rss(d)
        socks = []
        for _ in range(CLIENTS):  # a small window from the start: nothing waits in the kernel
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(10)
            s.connect(("127.0.0.1", d.port))
            s.sendall(faultlib.request_bytes(path))
            socks.append(s)
        try:
            # Every answer queued: the RSS stops moving (a /healthz can go
            # through between the renders of a daemon that renders each).
            last, stable = settle_rss(d), 0
            for _ in range(100):
                time.sleep(0.1)
                now = d.rss_kib()
                stable = stable + 1 if now == last else 0
                last = now
                if stable == 10:
                    break
            grown = last - rss0
            # 80 private copies were 80 x 4 MB (+300 MB); one shared one
            # and libmicrohttpd's 64 KiB per connection are a few MB.
            assert_grown_under(grown, 16 * 1024, f"{CLIENTS} idle readers of {path}")
        finally:
            for s in socks:
                s.close()
