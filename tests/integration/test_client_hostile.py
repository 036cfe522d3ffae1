"""The Python client against servers that misbehave on purpose (issue 22):
a scripted HTTP server thread answers each request as a test says, and
every case must end in a clean exception (a tensord.SafetensorError) within
its deadline and with bounded memory (tracemalloc's peak of what Python
allocated). Also: a handle opened while the real daemon still hashes a file
(weak ETags) reads the file after the hash is known (strong ETags).

Cases: Retry-After past the deadline and endless 503s; model descriptions,
error bodies and answers larger than their limits; fetch answers whose
header or offsets would make the client allocate more than it asked for, or
that safetensors would refuse; bodies and headers trickled a byte at a
time, and servers that never answer; malformed model descriptions; ranges
other than asked; where $TENSORD_TOKEN goes."""
import contextlib
import json
import os
import socket
import struct
import sys
import tempfile
import threading
import time
import tracemalloc

import numpy as np
import pytest

import faultlib
from tdutil import REPO, gen_models

sys.path.insert(0, os.path.join(REPO, "client", "python"))
import tensord  # noqa: E402
from tensord import _http  # noqa: E402

SLACK = faultlib.SLACK

# ---------------------------------------------------------------------------
# A scripted server


class Request:
    def __init__(self, method, path, headers, body):
        self.method, self.path, self.headers, self.body = method, path, headers, body


class Script:
    """A server on a loopback port whose answer to each request is what
    `answer(req, conn)` writes on the raw socket. Requests are recorded."""

    def __init__(self, answer, host="127.0.0.1"):
        self.answer = answer
        self.requests = []
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((host, 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.stop = threading.Event()
        self.conns = []
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def url(self, model="m", host="127.0.0.1"):
        return f"http://{host}:{self.port}/v1/models/{model}"

    def _accept(self):
        while not self.stop.is_set():
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        f = c.makefile("rb")
        try:
            while not self.stop.is_set():
                line = f.readline(65536)
                if not line:
                    return
                method, path, _ = line.decode("latin-1").split(" ", 2)
                headers = {}
                while True:
                    h = f.readline(65536).decode("latin-1")
                    if h in ("\r\n", "\n", ""):
                        break
                    k, _, v = h.partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = f.read(int(headers.get("content-length", "0")))
                req = Request(method, path, headers, body)
                self.requests.append(req)
                if self.answer(req, c) is False:
                    return
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                c.close()

    def close(self):
        self.stop.set()
        with contextlib.suppress(OSError):
            self.lsock.close()
        for c in self.conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
                c.close()


@contextlib.contextmanager
def script(answer, host="127.0.0.1"):
    s = Script(answer, host)
    try:
        yield s
    finally:
        s.close()


def send(c, status, body=b"", headers=(), length=True):
    head = [f"HTTP/1.1 {status} X"]
    if length:
        head.append(f"Content-Length: {len(body)}")
    head += list(headers)
    c.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)


def send_json(c, doc, status=200, headers=()):
    send(c, status, json.dumps(doc).encode(), ("Content-Type: application/json",) + tuple(headers))


def trickle(c, data, every=1.0):
    """Writes data a byte at a time, one every `every` seconds, until the
    peer leaves."""
    try:
        for b in data:
            c.sendall(bytes([b]))
            time.sleep(every)
    except OSError:
        pass
    return False


@contextlib.contextmanager
def bounded(seconds, peak_bytes):
    """The block must end within `seconds` (stretched for sanitizer runs)
    and allocate at most `peak_bytes` at its peak (tracemalloc)."""
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        yield
    finally:
        elapsed = time.monotonic() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert elapsed < seconds * SLACK, f"took {elapsed:.2f} s, more than {seconds} s"
    assert peak < peak_bytes, f"peak of {peak} bytes, more than {peak_bytes}"


def raises(cls, fn, match=None):
    """fn() raises cls, which must also be a tensord.SafetensorError."""
    with pytest.raises(cls, match=match) as e:
        fn()
    assert isinstance(e.value, tensord.SafetensorError), repr(e.value)
    return e.value


# A model of two tensors in one file, as the daemon describes it.
W = np.arange(64, dtype=np.float32).reshape(8, 8)
B = np.arange(8, dtype=np.int64)
FILE, HLEN, _ = gen_models.encode_safetensors([("b", "I64", (8,), B.tobytes()),
                                               ("w", "F32", (8, 8), W.tobytes())], {"format": "pt"})
WEAK = f'W/"{len(FILE):x}-{gen_models.FIXED_MTIME * 10**9:x}"'
LAST_MODIFIED = "Tue, 14 Nov 2023 22:13:20 GMT"  # FIXED_MTIME


def model_doc(etag='"abc"', **changes):
    doc = {"name": "m", "state": "ready",
           "files": [{"name": "model.safetensors", "size": len(FILE), "etag": etag,
                      "header_length": HLEN, "sha256": None}],
           "metadata": {"model.safetensors": {"format": "pt"}},
           "tensors": {"b": {"dtype": "I64", "shape": [8], "file": "model.safetensors",
                             "data_offsets": [0, 64], "nbytes": 64},
                       "w": {"dtype": "F32", "shape": [8, 8], "file": "model.safetensors",
                             "data_offsets": [64, 320], "nbytes": 256}}}
    doc.update(changes)
    return doc


def serve_file(req, c, etag='"abc"', last_modified=LAST_MODIFIED, data=FILE):
    """A Range answer of the model's file, as the daemon gives one."""
    a, b = req.headers["range"][6:].split("-")
    a, b = int(a), int(b)
    send(c, 206, data[a:b + 1], (f"Content-Range: bytes {a}-{b}/{len(data)}", f"ETag: {etag}",
                                 f"Last-Modified: {last_modified}"))


def normal(req, c):
    if req.path == "/v1/models/m":
        send_json(c, model_doc())
    elif req.path.startswith("/v1/models/m/files/"):
        serve_file(req, c)
    else:
        send_json(c, {"error": {"code": "not_found", "message": "no"}}, 404)


def test_the_script_serves_a_model():
    """The scripted model itself loads (the cases below break one thing)."""
    with script(normal) as s:
        got = tensord.load_file(s.url(), timeout=5)
        assert got["w"].tobytes() == W.tobytes() and got["b"].tobytes() == B.tobytes()


# ---------------------------------------------------------------------------
# Retries and Retry-After, within the deadline


def test_retry_after_past_the_deadline_fails_at_once():
    def answer(req, c):
        send_json(c, {"error": {"code": "not_ready", "message": "loading"}}, 503,
                  ("Retry-After: 3600",))
    with script(answer) as s, bounded(1.0, 1 << 20):
        e = raises(tensord.RemoteError, lambda: tensord.safe_open(s.url(), "numpy", timeout=5))
        assert e.status == 503 and "retry after 3600 s" in str(e)
        assert len(s.requests) == 1


def test_retry_after_within_the_deadline_is_waited_for():
    def answer(req, c):
        if len(s.requests) < 3:
            return send_json(c, {"error": {"code": "x", "message": "y"}}, 503,
                             ("Retry-After: 0",))
        return normal(req, c)
    with script(answer) as s:
        with tensord.safe_open(s.url(), "numpy", timeout=5) as f:
            assert f.keys() == ["b", "w"]


def test_endless_503_is_retried_three_times():
    def answer(req, c):
        send_json(c, {"error": {"code": "busy", "message": "later"}}, 503, ("Retry-After: 0",))
    with script(answer) as s, bounded(2.0, 1 << 20):
        e = raises(tensord.RemoteError, lambda: tensord.safe_open(s.url(), "numpy", timeout=5))
        assert e.status == 503 and len(s.requests) == 4


def test_retry_after_longer_than_what_is_left():
    def answer(req, c):
        send_json(c, {"error": {"code": "busy", "message": "later"}}, 503, ("Retry-After: 2",))
    with script(answer) as s, bounded(1.0, 1 << 20):
        raises(tensord.RemoteError, lambda: tensord.safe_open(s.url(), "numpy", timeout=1))


# ---------------------------------------------------------------------------
# Sizes


def endless(c, status, content_length=None, chunk=1 << 20):
    """A body of zeros that never ends (or Content-Length bytes of them)."""
    head = [f"HTTP/1.1 {status} X", "Content-Type: application/json"]
    if content_length is not None:
        head.append(f"Content-Length: {content_length}")
    else:
        head.append("Connection: close")
    try:
        c.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        zeros = b"0" * chunk
        sent = 0
        while content_length is None or sent < content_length:
            c.sendall(zeros)
            sent += len(zeros)
    except OSError:
        pass
    return False


@pytest.mark.parametrize("content_length", [1 << 30, None])
def test_huge_model_description(content_length):
    cap = _http.MAX_DOCUMENT_BYTES
    with script(lambda req, c: endless(c, 200, content_length)) as s, \
            bounded(10.0, 2 * cap + (8 << 20)):
        raises(tensord.BadAnswer, lambda: tensord.safe_open(s.url(), "numpy", timeout=20),
               match="larger than")


@pytest.mark.parametrize("content_length", [1 << 30, None])
def test_huge_error_body(content_length):
    with script(lambda req, c: endless(c, 500, content_length)) as s, bounded(5.0, 4 << 20):
        e = raises(tensord.RemoteError, lambda: tensord.safe_open(s.url(), "numpy", timeout=20))
        assert e.status == 500


def test_range_answer_longer_than_asked_is_not_drained():
    """A 206 whose Content-Length promises a gigabyte after the range: the
    client reads what it asked for and drops the connection."""
    def answer(req, c):
        if req.path == "/v1/models/m":
            return send_json(c, model_doc())
        a, b = (int(x) for x in req.headers["range"][6:].split("-"))
        head = (f"HTTP/1.1 206 X\r\nContent-Range: bytes {a}-{b}/{len(FILE)}\r\nETag: \"abc\""
                f"\r\nContent-Length: {1 << 30}\r\n\r\n").encode()
        return endless_after(c, head + FILE[a:b + 1])
    with script(answer) as s, bounded(5.0, 4 << 20):
        with tensord.safe_open(s.url(), "numpy", timeout=10) as f:
            assert f.get_tensor("w").tobytes() == W.tobytes()


def endless_after(c, data):
    try:
        c.sendall(data)
        while True:
            c.sendall(b"\0" * (1 << 20))
    except OSError:
        pass
    return False


@pytest.mark.parametrize("bad", [
    {"status": 200},                                  # Range ignored
    {"range": (0, 10)},                               # another range
    {"range": (5, 2)},                                # nonsense
    {"etag": '"other"'},                              # another version
])
def test_ranges_other_than_asked(bad):
    def answer(req, c):
        if req.path == "/v1/models/m":
            return send_json(c, model_doc())
        a, b = (int(x) for x in req.headers["range"][6:].split("-"))
        if "status" in bad:
            return send(c, 200, FILE, ('ETag: "abc"',))
        a, b = bad.get("range", (a, b))
        body = FILE[a:b + 1] if a <= b else b""
        send(c, 206, body, (f"Content-Range: bytes {a}-{b}/{len(FILE)}",
                            f"ETag: {bad.get('etag', chr(34) + 'abc' + chr(34))}"))
    with script(answer) as s, bounded(5.0, 2 << 20):
        with tensord.safe_open(s.url(), "numpy", timeout=5) as f:
            raises(tensord.SafetensorError, lambda: f.get_tensor("w"))


# ---------------------------------------------------------------------------
# Malformed model descriptions


def _doc_with(**changes):
    doc = model_doc()
    for path, v in changes.items():
        node = doc
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = keys[-1]
        if isinstance(node, list):
            node[int(last)] = v
        elif v is KeyError:
            del node[last]
        else:
            node[last] = v
    return doc


MALFORMED = [
    [1, 2], "ready", None,
    _doc_with(state=3), _doc_with(files="x"), _doc_with(tensors=[]),
    _doc_with(files__0__size="320"), _doc_with(files__0__header_length=10 ** 9),
    _doc_with(files__0__etag=5), _doc_with(files__0=None),
    _doc_with(tensors__w__dtype="F33"), _doc_with(tensors__w__dtype=None),
    _doc_with(tensors__w__shape=[8, -8]), _doc_with(tensors__w__shape=[8, 9]),
    _doc_with(tensors__w__shape="8,8"), _doc_with(tensors__w__shape=[8.0, 8]),
    _doc_with(tensors__w__data_offsets=[64, 32]), _doc_with(tensors__w__data_offsets=[64]),
    _doc_with(tensors__w__data_offsets=[10 ** 12, 10 ** 12 + 256]),
    _doc_with(tensors__w__file="other.safetensors"), _doc_with(tensors__w__file=KeyError),
    _doc_with(tensors__w=[1]), _doc_with(metadata=[1]),
    _doc_with(metadata={"model.safetensors": {"a": 1}}), _doc_with(metadata={"f": [1]}),
]


@pytest.mark.parametrize("doc", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_model_descriptions(doc):
    with script(lambda req, c: send_json(c, doc)) as s, bounded(2.0, 1 << 20):
        raises(tensord.SafetensorError, lambda: tensord.safe_open(s.url(), "numpy", timeout=5))
        raises(tensord.SafetensorError, lambda: tensord.load_file(s.url(), timeout=5))


def test_deeply_nested_and_not_json():
    for body in [b"[" * 100000, b"{\"state\": \"ready\"", b"\xff\xfe", b""]:
        with script(lambda req, c: send(c, 200, body)) as s, bounded(2.0, 4 << 20):
            raises(tensord.BadAnswer, lambda: tensord.safe_open(s.url(), "numpy", timeout=5))


# ---------------------------------------------------------------------------
# Fetch answers (load_file(split=...)): checked before anything is allocated


def fetch_answer(entries, meta=None, data=None, hlen=None, raw_header=None):
    """A fetch answer: entries {name: (dtype, shape, [begin, end])}."""
    hdr = {name: {"dtype": d, "shape": list(sh), "data_offsets": list(o)}
           for name, (d, sh, o) in entries.items()}
    if meta is not None:
        hdr["__metadata__"] = meta
    raw = raw_header if raw_header is not None else json.dumps(hdr).encode()
    if data is None:
        data = bytes(max((o[1] for _, _, o in entries.values()), default=0))
    return struct.pack("<Q", len(raw) if hlen is None else hlen) + raw + data


GOOD = {"b": ("I64", (4,), (0, 32)), "w": ("F32", (4, 8), (32, 160))}
FETCHES = {
    "good": (fetch_answer(GOOD), None),
    "header length 3 GiB": (fetch_answer(GOOD, hlen=3 << 30), "header length"),
    "header length past the end": (fetch_answer(GOOD, hlen=4096), "header length"),
    "header length 0": (fetch_answer(GOOD, hlen=0), "header length"),
    "a 1 TiB tensor": (fetch_answer({"b": ("I64", (4,), (0, 32)),
                                     "w": ("F32", (1 << 38,), (32, 32 + (1 << 40)))},
                                    data=bytes(160)),
                       "does not make|end at"),
    "offsets overlap": (fetch_answer({"b": ("I64", (4,), (0, 32)),
                                      "w": ("F32", (4, 8), (16, 144))}), "overlap"),
    "offsets leave a gap": (fetch_answer({"b": ("I64", (4,), (0, 32)),
                                          "w": ("F32", (4, 8), (40, 168))}), "gap"),
    "data past the tensors": (fetch_answer(GOOD, data=bytes(200)), "end at"),
    "size and shape disagree": (fetch_answer({"b": ("I64", (4,), (0, 32)),
                                              "w": ("F32", (4, 9), (32, 160))}), "make"),
    "another dtype": (fetch_answer({"b": ("I64", (4,), (0, 32)),
                                    "w": ("F64", (2, 8), (32, 160))}), "malformed dtype"),
    "a name not asked for": (fetch_answer({"b": ("I64", (4,), (0, 32)),
                                           "x": ("F32", (4, 8), (32, 160))}), "other tensors"),
    "a name missing": (fetch_answer({"b": ("I64", (4,), (0, 32))}), "other tensors"),
    "more bytes than the tensor has": (fetch_answer({"b": ("I64", (16,), (0, 128)),
                                                     "w": ("F32", (4, 8), (128, 256))}),
                                       "more than the tensor"),
    "not JSON": (fetch_answer({}, raw_header=b"{nope" + b" " * 40), "JSON"),
    "no object": (fetch_answer({}, raw_header=b"[1, 2]"), "JSON object"),
    "duplicate names": (fetch_answer({}, raw_header=(
        b'{"b":{"dtype":"I64","shape":[4],"data_offsets":[0,32]},'
        b'"b":{"dtype":"I64","shape":[4],"data_offsets":[0,32]}}')), "duplicate"),
    "metadata not strings": (fetch_answer(GOOD, meta={"a": 1}), "__metadata__"),
}


def fetch_server(answer_bytes, total=None):
    def answer(req, c):
        if req.path == "/v1/models/m":
            return send_json(c, model_doc())
        if req.path == "/v1/models/m/fetch":
            a, b = (int(x) for x in req.headers["range"][6:].split("-"))
            size = len(answer_bytes) if total is None else total
            b = min(b, size - 1)
            body = answer_bytes[a:b + 1]
            return send(c, 206, body, (f"Content-Range: bytes {a}-{b}/{size}", 'ETag: "f1"'))
        send_json(c, {"error": {"code": "x", "message": "y"}}, 404)
    return answer


SPLIT = {"world": 2, "rank": 0, "rules": [{"match": "*", "dim": 0}]}


@pytest.mark.parametrize("case", list(FETCHES))
def test_fetch_answers_checked_before_allocating(case):
    body, error = FETCHES[case]
    with script(fetch_server(body)) as s, bounded(3.0, 4 << 20):
        if error is None:
            got = tensord.load_file(s.url(), split=SPLIT, timeout=5)
            assert got["w"].shape == (4, 8) and got["b"].shape == (4,)
            return
        raises(tensord.BadAnswer, lambda: tensord.load_file(s.url(), split=SPLIT, timeout=5),
               match=error)


def test_fetch_answer_claiming_a_terabyte():
    """Content-Range says 1 TiB: more than the tensors asked for could
    make, refused before the header is read."""
    with script(fetch_server(fetch_answer(GOOD), total=1 << 40)) as s, bounded(3.0, 2 << 20):
        raises(tensord.BadAnswer, lambda: tensord.load_file(s.url(), split=SPLIT, timeout=5),
               match="more than")


def test_fetch_header_longer_than_the_first_range():
    """A header read in two ranges (the first range smaller than it)."""
    with script(fetch_server(fetch_answer(GOOD, meta={"k": "v" * 300}))) as s:
        got = tensord.load_file(s.url(), split=SPLIT, timeout=5, chunk_bytes=64)
        assert got["w"].shape == (4, 8)


# ---------------------------------------------------------------------------
# Trickles and stalls: the deadline ends the call


def doc_bytes():
    return json.dumps(model_doc()).encode()


TRICKLES = {
    "body": lambda req, c: trickle_after(c, b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n"
                                        % len(doc_bytes()), doc_bytes()),
    "status line": lambda req, c: trickle(c, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"),
    "headers": lambda req, c: trickle_after(c, b"HTTP/1.1 200 OK\r\n", b"X-A: " + b"a" * 60000),
    "chunked body": lambda req, c: trickle_after(
        c, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", b"1\r\n{\r\n" * 1000),
    "silence": lambda req, c: until_closed(c),
    "error body": lambda req, c: trickle_after(
        c, b"HTTP/1.1 500 X\r\nContent-Length: 60000\r\n\r\n", b"e" * 60000),
}


def until_closed(c):
    """Says nothing until the peer leaves."""
    with contextlib.suppress(OSError):
        while c.recv(4096):
            pass
    return False


def trickle_after(c, head, body, every=0.3):
    try:
        c.sendall(head)
    except OSError:
        return False
    return trickle(c, body, every)


@pytest.mark.parametrize("case", list(TRICKLES))
def test_trickle_ends_at_the_deadline(case):
    with script(TRICKLES[case]) as s, bounded(1.0 + 1.5, 1 << 20):
        e = raises(tensord.DeadlineExceeded,
                   lambda: tensord.safe_open(s.url(), "numpy", timeout=1))
        assert isinstance(e, TimeoutError) and "deadline of 1 s" in str(e)


@pytest.mark.parametrize("where", ["get_tensor", "slice", "load_file", "fetch"])
def test_trickled_tensor_bytes(where):
    """The description comes at once, the tensor's bytes a byte at a time."""
    def answer(req, c):
        if req.path == "/v1/models/m":
            return send_json(c, model_doc())
        a, b = (int(x) for x in req.headers["range"][6:].split("-"))
        data = FILE
        if req.path.endswith("/fetch"):
            data = fetch_answer(GOOD)
        b = min(b, len(data) - 1)
        head = (f"HTTP/1.1 206 X\r\nContent-Range: bytes {a}-{b}/{len(data)}\r\n"
                f"ETag: \"abc\"\r\nContent-Length: {b - a + 1}\r\n\r\n").encode()
        return trickle_after(c, head, data[a:b + 1], 0.1)
    with script(answer) as s, bounded(1.0 + 1.5, 1 << 20):
        calls = {
            "get_tensor": lambda: tensord.safe_open(s.url(), "numpy", timeout=1).get_tensor("w"),
            "slice": lambda: tensord.safe_open(s.url(), "numpy", timeout=1).get_slice("w")[2:],
            "load_file": lambda: tensord.load_file(s.url(), timeout=1),
            "fetch": lambda: tensord.load_file(s.url(), split=SPLIT, timeout=1),
        }
        raises(tensord.DeadlineExceeded, calls[where])


def big_model(n):
    """A description of one U8 tensor of n bytes (the file is zeros)."""
    return {**model_doc(), "tensors": {"t": {
        "dtype": "U8", "shape": [n], "file": "model.safetensors", "data_offsets": [0, n],
        "nbytes": n}}, "files": [{"name": "model.safetensors", "size": n + 16, "etag": '"x"',
                                  "header_length": 8}]}


def paced(every, piece):
    """Serves ranges of zeros, `piece` bytes every `every` seconds."""
    def answer(req, c):
        if req.path == "/v1/models/m":
            return send_json(c, big_model(8 << 20))
        a, b = (int(x) for x in req.headers["range"][6:].split("-"))
        try:
            c.sendall((f"HTTP/1.1 206 X\r\nContent-Range: bytes {a}-{b}/{(8 << 20) + 16}\r\n"
                       f"ETag: \"x\"\r\nContent-Length: {b - a + 1}\r\n\r\n").encode())
            left = b - a + 1
            while left:
                c.sendall(bytes(min(piece, left)))
                left -= min(piece, left)
                time.sleep(every)
        except OSError:
            pass
        return False
    return answer


def test_default_deadline_grows_with_what_arrives(monkeypatch):
    """timeout=None: a base (1 s here, 60 s really) pushed back 1 s per MiB
    received. 8 MiB at 4 MiB/s take 2 s and load; 8 MiB trickled end at
    the base, whatever size the description announced."""
    from tensord import _deadline
    monkeypatch.setattr(_deadline, "DEFAULT_TIMEOUT", 1.0)
    with script(paced(0.25, 1 << 20)) as s:
        got = tensord.load_file(s.url(), connections=1)
        assert got["t"].nbytes == 8 << 20
    with script(paced(0.1, 1)) as s, bounded(1.0 + 1.5, (8 << 20) + (2 << 20)):
        e = raises(tensord.DeadlineExceeded, lambda: tensord.load_file(s.url(), connections=1))
        assert "default deadline" in str(e)


def flood(head, unit):
    """Sends head, then unit (bytes the client reads and throws away) as
    fast as the client takes them, until it leaves."""
    def answer(req, c):
        try:
            c.sendall(head)
            while True:
                c.sendall(unit * 16)
        except OSError:
            pass
        return False
    return answer


CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
FLOODS = {
    # http.client skips any number of interim 100 answers before the real one
    "interim 100s": (b"", b"HTTP/1.1 100 Continue\r\nX: " + b"a" * 60000 + b"\r\n\r\n"),
    # ... and reads trailer fields after the last chunk until a blank line
    "trailers": (CHUNKED + b"2\r\n{}\r\n0\r\n", b"X: " + b"a" * 60000 + b"\r\n"),
    # ... and a chunk extension of up to 64 KiB per one-byte chunk
    "chunk extensions": (CHUNKED, b"1;" + b"a" * 60000 + b"\r\n \r\n"),
}


@pytest.mark.parametrize("case", list(FLOODS))
def test_default_deadline_ignores_what_is_thrown_away(monkeypatch, case):
    """timeout=None grows with the body bytes a call keeps, never with bytes
    it discards: a server sending those at any rate still meets the base
    deadline (it grew with every byte on the socket: such a server held the
    call forever once it sent more than 1 MiB/s)."""
    from tensord import _deadline
    monkeypatch.setattr(_deadline, "DEFAULT_TIMEOUT", 1.0)
    with script(flood(*FLOODS[case])) as s, bounded(1.0 + 1.5, 4 << 20):
        e = raises(tensord.DeadlineExceeded, lambda: tensord.safe_open(s.url(), "numpy"))
        assert "default deadline" in str(e)


SUPERSCRIPT_TWO = b"\xb2"  # Latin-1 '²': str.isdigit() says yes, int() and float() no
NOT_DIGITS = {
    "Retry-After": lambda req, c: c.sendall(
        b"HTTP/1.1 503 X\r\nRetry-After: " + SUPERSCRIPT_TWO + b"\r\nContent-Length: 2\r\n\r\n{}"),
    "error Content-Length": lambda req, c: c.sendall(
        b"HTTP/1.1 500 X\r\nContent-Length: " + SUPERSCRIPT_TWO + b"\r\nConnection: close\r\n\r\n"
        b"{}") or False,
    "fetch Content-Length": lambda req, c: send_json(c, model_doc()) if req.method == "GET" else
    c.sendall(b"HTTP/1.1 200 X\r\nContent-Length: " + SUPERSCRIPT_TWO +
              b"\r\nConnection: close\r\n\r\n" + fetch_answer(GOOD)) or False,
}


@pytest.mark.parametrize("case", list(NOT_DIGITS))
def test_header_numbers_that_are_not_ascii_digits(case):
    """A number in a header that only Python's isdigit takes is a clean
    error (it was a bare ValueError from int() or float())."""
    with script(NOT_DIGITS[case]) as s, bounded(5.0, 1 << 20):
        if case.startswith("fetch"):
            raises(tensord.SafetensorError, lambda: tensord.load_file(s.url(), split=SPLIT,
                                                                      timeout=3))
        else:
            raises(tensord.RemoteError, lambda: tensord.safe_open(s.url(), "numpy", timeout=3))


def test_a_refused_connection_is_a_clean_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with bounded(3.0, 1 << 20):
        e = raises(tensord.RemoteConnectionError,
                   lambda: tensord.safe_open(f"http://127.0.0.1:{port}/v1/models/m", "numpy",
                                             timeout=5))
        assert isinstance(e, ConnectionError)


# ---------------------------------------------------------------------------
# Where the token goes


def other_address():
    """A non-loopback address of this machine, or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
            u.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
            addr = u.getsockname()[0]
    except OSError:
        return None
    return None if addr.startswith("127.") else addr


def test_env_token_goes_to_its_origin_and_loopback_only(monkeypatch):
    monkeypatch.setenv("TENSORD_TOKEN", "secret")
    monkeypatch.delenv("TENSORD_URL", raising=False)
    f = _http.env_token_for
    assert f("http://127.0.0.1:1") == ("secret", False)
    assert f("http://[::1]:1") == ("secret", False)
    assert f("http://localhost:1") == ("secret", False)
    assert f("http://10.1.2.3:8077") == (None, True)
    assert f("https://models.example.com") == (None, True)
    assert f("http://127.0.0.1.example.com") == (None, True)
    monkeypatch.setenv("TENSORD_URL", "https://models.example.com/v1/models/x")
    assert f("https://models.example.com:443") == ("secret", False)
    assert f("https://MODELS.example.com") == ("secret", False)
    assert f("http://models.example.com") == (None, True)      # plain http: another origin
    assert f("https://models.example.com:8443") == (None, True)
    assert f("https://evil.example.com") == (None, True)


def test_env_token_over_the_wire(monkeypatch):
    addr = other_address()
    seen = []

    def answer(req, c):
        seen.append(req.headers.get("authorization"))
        send_json(c, {"error": {"code": "unauthorized", "message": "token"}}, 401)
    monkeypatch.setenv("TENSORD_TOKEN", "secret")
    monkeypatch.delenv("TENSORD_URL", raising=False)
    with script(answer, host="0.0.0.0") as s:
        raises(tensord.RemoteError, lambda: tensord.safe_open(s.url(), "numpy", timeout=5))
        assert seen[-1] == "Bearer secret"  # loopback
        if addr is None:
            pytest.skip("no non-loopback address to test over")
        e = raises(tensord.RemoteError,
                   lambda: tensord.safe_open(s.url(host=addr), "numpy", timeout=5))
        assert seen[-1] is None and "pass token=" in str(e)
        raises(tensord.RemoteError,
               lambda: tensord.safe_open(s.url(host=addr), "numpy", token="given", timeout=5))
        assert seen[-1] == "Bearer given"  # passed explicitly: sent
        monkeypatch.setenv("TENSORD_URL", f"http://{addr}:{s.port}")
        raises(tensord.RemoteError,
               lambda: tensord.safe_open(s.url(host=addr), "numpy", timeout=5))
        assert seen[-1] == "Bearer secret"  # the origin it was given for


@pytest.mark.parametrize("url", [
    "http://evil.example\\@127.0.0.1:{port}/v1/models/m",   # 127.0.0.1 to urlsplit, evil to urllib3
    "http://127.0.0.1:{port}\\@evil.example/v1/models/m",
    "http://user@127.0.0.1:{port}/v1/models/m",
    "http://user:pw@127.0.0.1:{port}/v1/models/m",
    "http://127.0.0.1:{port}/v1/models/m\\..\\x",
    "http://127.0.0.1 :{port}/v1/models/m",
    "http://127.0.0.1:{port}\t/v1/models/m",           # urlsplit drops tabs and line breaks
    "http://127.0.0.1:{port}/v1/models/m\n",
    "http://127.0.0.1:{port}:1/v1/models/m",
    "http://127.0.0.1:99999/v1/models/m",
    "http://127.0.0.%31:{port}/v1/models/m",
    "http://[::1:{port}/v1/models/m",
    "http://[fe80::1%25lo]:{port}/v1/models/m",
    "http://\u0127.0.0.1:{port}/v1/models/m",
    "ftp://127.0.0.1:{port}/v1/models/m",
])
def test_ambiguous_urls_are_refused_before_any_request(monkeypatch, url):
    """A URL two parsers could read differently (the token decision once
    read it with urllib.parse and the connection with urllib3), or one
    with user information, is refused before anything is sent anywhere."""
    monkeypatch.setenv("TENSORD_TOKEN", "secret")
    monkeypatch.delenv("TENSORD_URL", raising=False)
    with script(lambda req, c: send_json(c, model_doc())) as s:
        with pytest.raises(ValueError) as e:
            tensord.safe_open(url.format(port=s.port), "numpy", timeout=5)
        assert "refused" in str(e.value) or "is not" in str(e.value), e.value
        assert s.requests == []


def test_one_parse_for_the_token_and_the_connection(monkeypatch):
    """The origin the token decision reads is the one the pool connects to."""
    monkeypatch.setenv("TENSORD_TOKEN", "secret")
    monkeypatch.delenv("TENSORD_URL", raising=False)
    for url, host, port in (("http://127.0.0.1:8077/v1/models/m", "127.0.0.1", 8077),
                            ("http://LocalHost/v1/models/m", "localhost", 80),
                            ("https://[0:0::1]:9/v1/models/m", "[::1]", 9),
                            ("http://models.example.com/p/v1/models/a%2Fb", "models.example.com",
                             80)):
        u = _http.ModelURL(url)
        assert (u.origin.host, u.origin.port) == (host, port)
        session = _http.Session(u.origin)
        try:
            assert (session.pool.host, session.pool.port) == (host.strip("[]"), port)
            assert session.headers.get("Authorization") == \
                (None if "example" in host else "Bearer secret")
        finally:
            session.close()


def test_redirects_are_not_followed(monkeypatch):
    monkeypatch.setenv("TENSORD_TOKEN", "secret")
    with script(lambda req, c: send(c, 302, b"", ("Location: http://192.0.2.1/v1/models/m",))) \
            as s, bounded(2.0, 1 << 20):
        raises(tensord.SafetensorError, lambda: tensord.safe_open(s.url(), "numpy", timeout=5))
        assert len(s.requests) == 1


# ---------------------------------------------------------------------------
# Weak ETags that turn strong


def test_weak_pin_turning_strong_is_the_same_file():
    """Opened with the weak tag, read after the hash is known: the strong
    answer agrees with the weak tag's size and mtime, so it is the file."""
    def answer(req, c):
        if req.path == "/v1/models/m":
            return send_json(c, model_doc(etag=WEAK))
        return serve_file(req, c, etag='"' + "ab" * 32 + '"')
    with script(answer) as s:
        with tensord.safe_open(s.url(), "numpy", timeout=5) as f:
            assert f.get_tensor("w").tobytes() == W.tobytes()
            assert f.get_tensor("b").tobytes() == B.tobytes()
            # from then on the strong tag goes in If-Match
            assert s.requests[-1].headers.get("if-match") == '"' + "ab" * 32 + '"'


@pytest.mark.parametrize("what", ["size", "mtime"])
def test_weak_pin_turning_strong_on_another_file(what):
    """The strong answer's size or Last-Modified disagrees with the weak
    tag: another file, refused."""
    data = FILE + b"\0" * 8 if what == "size" else FILE
    lm = "Wed, 15 Nov 2023 22:13:20 GMT" if what == "mtime" else LAST_MODIFIED

    def answer(req, c):
        if req.path == "/v1/models/m":
            return send_json(c, model_doc(etag=WEAK))
        return serve_file(req, c, etag='"strong"', last_modified=lm, data=data)
    with script(answer) as s:
        with tensord.safe_open(s.url(), "numpy", timeout=5) as f:
            e = raises(tensord.RemoteError, lambda: f.get_tensor("w"))
            assert "changed on the daemon" in str(e)


def test_slice_whose_tag_turns_strong_midway_is_read_again():
    """A slice read in several ranges: the first answer weak, the later ones
    strong (the hash became known in between). The ranges cannot be tied
    together, so the slice is read again, whole, under the strong tag."""
    data = np.arange(1 << 16, dtype=np.uint8).tobytes() * 4  # 256 KiB, 4 ranges of 64 KiB
    calls = []

    def answer(req, c):
        if req.path == "/v1/models/m":
            return send_json(c, {**model_doc(), "tensors": {"t": {
                "dtype": "U8", "shape": [len(data)], "file": "model.safetensors",
                "data_offsets": [0, len(data)], "nbytes": len(data)}},
                "files": [{"name": "model.safetensors", "size": len(data) + 8 + 8,
                           "etag": '"x"', "header_length": 8}]})
        a, b = (int(x) for x in req.headers["range"][6:].split("-"))
        calls.append((a, req.headers.get("if-match")))
        tag = 'W/"w-t1"' if len(calls) == 1 else '"s-t1"'
        send(c, 206, data[a:b + 1], (f"Content-Range: bytes {a}-{b}/{len(data)}", f"ETag: {tag}"))
    from tensord import _loader
    old = _loader.DEFAULT_CHUNK
    _loader.DEFAULT_CHUNK = 1 << 16
    try:
        with script(answer) as s, tensord.safe_open(s.url(), "numpy", timeout=5,
                                                    connections=1) as f:
            got = f.get_slice("t")[...]
    finally:
        _loader.DEFAULT_CHUNK = old
    assert got.tobytes() == data
    restart = calls.index((0, '"s-t1"'))
    assert restart >= 1 and all(m == '"s-t1"' for _, m in calls[restart:])


def test_open_while_hashing_read_after():
    """The bug of issue 22: a handle opened while the daemon still hashes a
    file (weak W/"size-mtime" tags in the model description) failed every
    read once the hash was known ("changed on the daemon"). The file is
    written just before the daemon starts, so the daemon waits before
    hashing it and the first description is weak."""
    base = tempfile.mkdtemp(prefix="tensord-weak-")
    try:
        models = os.path.join(base, "models")
        data = np.arange(1 << 16, dtype=np.float32)
        gen_models.write_safetensors(os.path.join(models, "fresh", "model.safetensors"),
                                     [("x", "F32", data.shape, data.tobytes())],
                                     {"format": "pt"}, mtime=time.time())
        with faultlib.running_daemon(models) as d:
            u = f"http://127.0.0.1:{d.port}/v1/models/fresh"
            f = tensord.safe_open(u, "numpy", timeout=30)
            assert f._model.files["model.safetensors"]["etag"].startswith("W/")
            d.wait_hashed()
            doc = json.loads(d.get("/v1/models/fresh").body)
            assert not doc["files"][0]["etag"].startswith("W/")
            assert f.get_tensor("x").tobytes() == data.tobytes()
            assert f.get_slice("x")[::-7].tobytes() == data[::-7].tobytes()
            assert f.get_tensors()["x"].tobytes() == data.tobytes()
            f.close()
    finally:
        import shutil
        shutil.rmtree(base, ignore_errors=True)
