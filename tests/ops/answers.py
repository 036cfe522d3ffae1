#!/usr/bin/python3
"""Records the daemon's answers to a fixed set of requests, or compares them
with a recording: a referee for refactors that must change nothing a client
sees (issue 27 recorded them before its first change).

    tests/ops/answers.py record FILE [--bin build/tensord]
    tests/ops/answers.py compare FILE [--bin build/tensord]

It generates the demo models and the test models (tests/gen/gen_models.py)
in a temporary root with every mtime set to one fixed time, starts the
daemon with fixed options, waits until every content hash is known, and
sends every request of requests(): the model API, files, headers, tensors,
slices in every format, ranges (single, multiple, suffix, unsatisfiable,
malformed), conditional requests, HEAD, errors in both dialects, the Hub
routes, fetch, the GPU state, S3, blobs, the console, CORS; every handler's
preconditions, ranges, conditionals and errors in both dialects, the
refusals every request may get (method, query, sizes, framing), and
requests made with the validators, commits and digests the daemon reports;
then host preloads (POST, GET, DELETE .../gpu and their errors, those
from a page of another origin among them, the model list with instances) and the lease socket's answers (hello, list, open, release,
malformed and refused requests); and a second daemon with bearer tokens
and an S3 key (the 401s in both dialects, what needs no token, S3's
refusals). An answer is its status line, its headers
(less Date; multipart boundaries replaced) and its body's SHA-256 with its
first 200 bytes (the temporary directory's name replaced; a preload's
timings replaced); a lease answer is its JSON text and the number of
descriptors it carried. compare prints every answer that differs and exits
1 when one does."""
import argparse
import hashlib
import json
import os
import re
import shutil
import socket
import struct
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))

import gen_models  # noqa: E402
import tdutil  # noqa: E402

MTIME = 1_700_000_000
ORIGIN = "http://console.example"
READ_TOKEN, ADMIN_TOKEN = "answers-read-token-0123", "answers-admin-token-0123"
S3_KEY, S3_SECRET = "answerskey", "answers-secret"


def requests(models):
    """(method, path, headers, body) of every request, in order."""
    out = []

    def add(method, path, headers=None, body=None):
        out.append((method, path, headers or {}, body))

    add("GET", "/v1/models")
    add("GET", "/healthz")
    add("GET", "/readyz")
    for m in ("demo-f32", "demo-sharded", "demo-bf16", "org/demo-i8"):
        q = tdutil.q(m)
        for suffix in ("", "/header", "/gpu"):
            add("GET", f"/v1/models/{q}{suffix}")
            add("HEAD", f"/v1/models/{q}{suffix}")
    add("GET", "/v1/models/demo-f32/files/config.json")
    add("GET", "/v1/models/demo-sharded/files/model-00001-of-00002.safetensors/header")
    f1 = "/v1/models/demo-sharded/files/model-00001-of-00002.safetensors"
    for rng in ("bytes=0-7", "bytes=-5", "bytes=10-", "bytes=0-0,5-9,100-120",
                "bytes=999999999-", "bytes=x-y", "bytes=5-1"):
        add("GET", f1, {"Range": rng})
    t = "/v1/models/demo-f32/tensors/embed.weight"
    add("GET", t)
    add("HEAD", t)
    for query in ("slice=0:2,1:3", "slice=-1&format=npy", "slice=::2", "format=safetensors",
                  "format=npy", "slice=0:2,1:3&format=safetensors", "slice=99",
                  "slice=a:b", "format=bogus", "slice=0:0"):
        add("GET", f"{t}?{query}")
    add("GET", "/v1/models/demo-bf16/tensors/w?format=npy&npy_dtype=raw")
    add("GET", t, {"Range": "bytes=4-11"})
    add("GET", f"{t}?slice=0:2", {"Range": "bytes=0-3,8-11"})
    add("GET", "/v1/models/nope")
    add("GET", "/v1/models/demo-f32/tensors/nope")
    add("GET", "/v1/models/demo-f32/files/nope.txt")
    add("GET", "/v1/models/..%2F..%2Fetc/files/passwd")
    add("DELETE", "/v1/models/demo-f32")
    add("POST", "/v1/models/demo-sharded/fetch",
        body=b'{"split": {"world": 2, "rank": 1, "rules": [{"match": "*.weight", "dim": 0}]}}')
    add("POST", "/v1/models/demo-sharded/fetch", body=b"{")
    for m in models[:12]:
        add("GET", f"/v1/models/{tdutil.q(m)}")
    # Hugging Face endpoint
    add("GET", "/api/models")
    for repo in ("demo-sharded", "org/demo-i8"):
        add("GET", f"/api/models/{repo}")
        add("GET", f"/api/models/{repo}/revision/main")
        add("GET", f"/api/models/{repo}/tree/main")
        add("GET", f"/api/models/{repo}/refs")
        add("GET", f"/api/models/{repo}/commits/main")
        add("POST", f"/api/models/{repo}/paths-info/main",
            {"Content-Type": "application/json"}, b'{"paths": ["config.json"]}')
    add("GET", "/demo-sharded/resolve/main/config.json")
    add("HEAD", "/demo-sharded/resolve/main/model-00001-of-00002.safetensors")
    add("GET", "/demo-sharded/raw/main/config.json")
    add("GET", "/api/models/nope")
    add("GET", "/api/datasets/nope")
    add("GET", "/nope/resolve/main/x")
    # S3, blobs, console, CORS
    add("GET", "/s3/")
    add("GET", "/s3/demo-sharded?list-type=2")
    add("GET", "/s3/org--demo-i8?list-type=2&delimiter=/")
    add("GET", "/s3/demo-sharded/config.json", {"Range": "bytes=0-9"})
    add("HEAD", "/s3/demo-sharded/nope")
    add("GET", "/v1/blobs/sha256:" + "0" * 64)
    add("GET", "/v1/blobs/sha256:xyz")
    add("GET", "/ui/")
    add("GET", "/ui")
    add("OPTIONS", t, {"Origin": ORIGIN, "Access-Control-Request-Method": "GET",
                       "Access-Control-Request-Headers": "range"})
    add("GET", t, {"Origin": ORIGIN, "Range": "bytes=0-3"})
    handler_requests(add)
    return out


def handler_requests(add):
    """Every handler's preconditions, ranges, conditionals and errors in both
    dialects, and the checks every request passes (added before issue 27's
    handlers returned answers)."""
    t = "/v1/models/demo-f32/tensors/embed.weight"
    f1 = "/v1/models/demo-sharded/files/model-00001-of-00002.safetensors"
    for h in ({"If-None-Match": "*"}, {"If-Match": '"nope"'}, {"If-Match": "*"},
              {"If-Modified-Since": "Sun, 06 Nov 2033 08:49:37 GMT"},
              {"If-Unmodified-Since": "Sun, 06 Nov 1994 08:49:37 GMT"},
              {"If-Range": '"nope"', "Range": "bytes=0-3"},
              {"If-None-Match": "*", "Range": "bytes=0-3"}):
        add("GET", t, h)
    add("HEAD", t, {"Range": "bytes=0-3"})
    add("HEAD", f1, {"Range": "bytes=0-3,8-9"})
    add("GET", f1, {"Range": "bytes=0-7,7-20"})
    add("GET", "/v1/models/demo-f32/files/config.json", {"Range": "bytes=2-"})
    add("GET", "/v1/models/demo-f32/files/config.json/header")
    add("GET", "/v1/models/demo-f32/files/model.safetensors/header", {"Range": "bytes=0-9"})
    add("HEAD", "/v1/models/demo-f32/header", {"If-None-Match": "*"})
    add("GET", "/v1/models/bad-json/header")
    add("GET", "/v1/models/bad-json/tensors/x")
    add("GET", "/v1/models/bad-json/gpu")
    add("GET", "/v1/models/dtype-f32/tensors/scalar")
    add("GET", "/v1/models/dtype-f32/tensors/scalar?format=npy")
    add("GET", "/v1/models/dtype-bf16/tensors/vec?format=npy")
    add("GET", "/v1/models/dtype-bf16/tensors/vec?npy_dtype=raw")
    add("GET", "/v1/models/dtype-bf16/tensors/vec?format=npy&npy_dtype=bogus")
    add("GET", "/v1/models/org%2Fname/tensors/nested%2Ftensor%20name?slice=0")
    add("GET", f"{t}?slice=%zz")
    add("GET", f"{t}?bogus=1")
    add("GET", "/v1/models?x=1")
    add("PUT", "/v1/models")
    add("DELETE", t)
    add("POST", "/v1/models/demo-f32/tensors/embed.weight", body=b"x")
    fq = "/v1/models/demo-f32/fetch?q=" + urllib.parse.quote('{"tensors": ["embed.weight"]}')
    add("GET", "/v1/models/demo-f32/fetch?q=" +
        urllib.parse.quote('{"tensors": ["embed.weight", "layers.0.bias"]}'))
    add("GET", fq, {"Range": "bytes=0-15,-4"})
    add("HEAD", fq)
    add("GET", fq, {"If-None-Match": "*"})
    add("GET", "/v1/models/demo-f32/fetch?q=%zz")
    add("GET", "/v1/models/demo-f32/fetch?q=" + urllib.parse.quote('{"tensors": ["nope"]}'))
    add("POST", fq, body=b'{"tensors": ["embed.weight"]}')
    add("POST", "/v1/models/demo-f32/fetch", body=b'{"tensors": ["embed.weight"]}')
    add("POST", "/v1/models/demo-f32/fetch", body=b'{"tensors": ["embed.weight", "embed.weight"]}')
    add("POST", "/v1/models/demo-f32/fetch", body=b'{"tensors": [{"name": "embed.weight", "slice": "9:"}]}')
    add("POST", "/v1/models/demo-f32/gpu", body=b"x" * 70000)
    add("GET", "/v1/models/demo-f32?" + "&".join(f"a{i}=1" for i in range(40)))
    add("GET", "/v1/models", {f"X-Many-{i}": "1" for i in range(110)})
    add("POST", "/v1/models/demo-f32/fetch", {"Transfer-Encoding": "chunked"}, b"0")
    add("GET", "/metrics?format=bogus")
    add("GET", "/v1/metrics?x=1")
    add("GET", "/healthz", {"If-None-Match": "*"})
    add("GET", "/v1/nothing")
    add("GET", "/v1/models/%2e%2e")
    # Hugging Face endpoint
    add("GET", "/api/models?search=DEMO&limit=1&full=true")
    add("GET", "/api/models?author=org")
    add("GET", "/api/models?limit=-1")
    add("GET", "/api/models?search=%zz")
    add("GET", "/api/models/demo-sharded/tree/main?recursive=true")
    add("GET", "/api/models/demo-sharded/tree/main/nope")
    add("GET", "/api/models/demo-sharded/tree/v2")
    add("GET", "/api/models/demo-sharded/revision/nope")
    add("GET", "/api/models/demo-sharded/paths-info/main")
    add("POST", "/api/models/demo-sharded/paths-info/main", {}, b"paths=model.safetensors.index.json&paths=nope")
    add("POST", "/api/models/demo-sharded/paths-info/main",
        {"Content-Type": "application/json"}, b"{")
    add("GET", "/api/models/demo-sharded", {"If-None-Match": "*"})
    add("GET", "/api/spaces")
    add("GET", "/api/datasets")
    add("GET", "/api/nothing")
    add("GET", "/api/models/demo-sharded?x=1")
    add("PUT", "/api/models/demo-sharded")
    add("GET", "/demo-sharded/resolve/main/nope.json")
    add("GET", "/demo-sharded/resolve/v9/config.json")
    add("GET", "/demo-sharded/resolve/main/%zz")
    add("GET", "/demo-sharded/resolve/main/model-00001-of-00002.safetensors")
    add("HEAD", "/org/demo-i8/resolve/main/model.safetensors")
    # S3
    add("GET", "/s3/demo-sharded?list-type=2&max-keys=1")
    add("GET", "/s3/demo-sharded?list-type=2&max-keys=bogus")
    add("GET", "/s3/demo-sharded?marker=config.json")
    add("GET", "/s3/demo-sharded?location")
    add("HEAD", "/s3/demo-sharded")
    add("HEAD", "/s3/demo-f32/config.json")
    add("GET", "/s3/demo-f32/config.json", {"Range": "bytes=99999-"})
    add("GET", "/s3/demo-f32/config.json?partNumber=2")
    add("GET", "/s3/demo-f32/config.json", {"If-None-Match": "*"})
    add("GET", "/s3/nope")
    add("PUT", "/s3/demo-sharded/x")
    # blobs, console, CORS
    add("GET", "/v1/blobs/md5:abc")
    add("HEAD", "/v1/blobs/sha256:" + "0" * 64)
    add("GET", "/ui/app.js")
    add("GET", "/ui/app.css", {"If-None-Match": "*"})
    add("GET", "/ui/nope.js")
    add("OPTIONS", "/api/models", {"Origin": ORIGIN, "Access-Control-Request-Method": "GET"})
    add("OPTIONS", t, {"Origin": "http://other.example", "Access-Control-Request-Method": "GET"})
    add("GET", "/api/models/nope", {"Origin": ORIGIN})
    add("GET", "/v1/models/nope", {"Origin": "http://other.example"})


def known_requests(d, root):
    """Requests made of what the daemon reports (validators, commits,
    digests), which are functions of the fixed files."""
    out = []
    t = "/v1/models/demo-f32/tensors/embed.weight"
    etag = d.request("GET", t).headers["ETag"]
    for h in ({"If-None-Match": etag}, {"If-Match": etag}, {"If-Range": etag, "Range": "bytes=0-3"},
              {"If-None-Match": "W/" + etag}, {"If-Match": '"x", ' + etag}):
        out.append(("GET", t, h, None))
    doc = d.request("GET", "/v1/models/demo-f32").headers["ETag"]
    out.append(("GET", "/v1/models/demo-f32", {"If-None-Match": doc}, None))
    out.append(("GET", "/v1/models/demo-f32", {"Range": "bytes=0-9"}, None))
    commit = d.request("HEAD", "/demo-f32/resolve/main/config.json").headers["X-Repo-Commit"]
    base = f"/demo-f32/resolve/{commit}/"
    out.append(("GET", base + "config.json", {}, None))
    out.append(("GET", base + "model.safetensors", {"Range": "bytes=0-7"}, None))
    out.append(("HEAD", base + "model.safetensors", {}, None))
    lfs = d.request("HEAD", base + "model.safetensors").headers["ETag"]
    out.append(("GET", base + "model.safetensors", {"If-None-Match": lfs}, None))
    out.append(("GET", f"/demo-f32/raw/{commit}/config.json", {}, None))
    out.append(("GET", f"/api/models/demo-f32/revision/{commit}", {}, None))
    out.append(("GET", f"/api/models/demo-f32/tree/{commit}", {}, None))
    with open(os.path.join(root, "demo-f32", "config.json"), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    out.append(("GET", f"/v1/blobs/sha256:{digest}", {}, None))
    out.append(("GET", f"/v1/blobs/sha256:{digest}", {"Range": "bytes=1-3"}, None))
    out.append(("HEAD", f"/v1/blobs/sha256:{digest}", {"If-None-Match": f'"sha256:{digest}"'}, None))
    s3 = d.request("HEAD", "/s3/demo-f32/config.json").headers["ETag"]
    out.append(("GET", "/s3/demo-f32/config.json", {"If-Match": s3}, None))
    out.append(("GET", "/s3/demo-f32/config.json", {"If-Range": s3, "Range": "bytes=1-2"}, None))
    return out


def guarded_requests():
    """(method, path, headers, body) against a daemon with bearer tokens and
    an S3 key: the 401s in both dialects, what needs no token, S3's refusals."""
    read, admin = {"Authorization": f"Bearer {READ_TOKEN}"}, {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    bad = {"Authorization": "Bearer wrong"}
    return [
        ("GET", "/v1/models/demo-f32/header", {}, None),
        ("GET", "/v1/models/demo-f32/header", bad, None),
        ("GET", "/v1/models/demo-f32/header", read, None),
        ("GET", "/v1/models/demo-f32/header", admin, None),
        ("POST", "/v1/models/demo-f32/gpu", read, b'{"device": "host"}'),
        ("DELETE", "/v1/models/demo-f32/gpu", read, None),
        ("POST", "/v1/models/demo-f32/fetch", {}, b'{"tensors": ["layers.0.bias"]}'),
        ("POST", "/v1/models/demo-f32/fetch", read, b'{"tensors": ["layers.0.bias"]}'),
        ("GET", "/api/models/demo-sharded", {}, None),
        ("GET", "/api/models/demo-sharded", bad, None),
        ("GET", "/api/models/demo-sharded/refs", read, None),
        ("GET", "/api/datasets/x/y", {}, None),
        ("GET", "/healthz", {}, None),
        ("GET", "/readyz", {}, None),
        ("GET", "/ui/", {}, None),
        ("GET", "/metrics", {}, None),
        ("GET", "/s3/", {}, None),
        ("GET", "/s3/demo-f32/config.json", {"Authorization": "AWS4-HMAC-SHA256 nonsense"}, None),
        ("GET", "/s3/demo-f32/config.json", {
            "Authorization": "AWS4-HMAC-SHA256 Credential=nobody/20240101/us-east-1/s3/aws4_request, "
                             "SignedHeaders=host;x-amz-date, Signature=" + "0" * 64,
            "X-Amz-Date": "20240101T000000Z"}, None),
        ("GET", "/s3/demo-f32/config.json", {
            "Authorization": f"AWS4-HMAC-SHA256 Credential={S3_KEY}/20240101/us-east-1/s3/aws4_request, "
                             "SignedHeaders=host;x-amz-date, Signature=" + "0" * 64,
            "X-Amz-Date": "20240101T000000Z"}, None),
    ]


def gpu_requests(d, invalid):
    """(method, path, headers, body) of the GPU phase, in order; the
    preloads they start are waited for before the next request."""
    dev = json.dumps({"device": "host"}).encode()
    g = "/v1/models/demo-sharded/gpu"
    return [
        ("GET", g, {}, None),
        ("POST", g, {}, dev),                      # 202: the load starts
        ("WAIT", g, {}, None),
        ("GET", g, {}, None),
        ("HEAD", g, {}, None),
        ("POST", g, {}, dev),                      # 200: already there
        ("POST", g, {}, b"{"),
        ("POST", g, {}, b'{"device": 5}'),
        ("POST", g, {}, b'["host"]'),
        ("POST", g, {}, b'{"device": "bogus"}'),
        ("POST", g, {}, b'{"device": "cuda:0"}'),
        ("POST", g, {}, b'{"device": "GPU-00000000-0000-0000-0000-000000000000"}'),
        ("POST", g, {"If-Match": '"nope"'}, dev),
        ("DELETE", g, {"If-None-Match": "*"}, None),
        ("POST", g, {"Origin": "http://other.example"}, dev),   # 403 cross_origin
        ("DELETE", g, {"Origin": "http://other.example"}, None),
        ("POST", f"/v1/models/{tdutil.q(invalid)}/gpu", {}, dev),
        ("POST", "/v1/models/nope/gpu", {}, dev),
        ("POST", "/v1/models/demo-f32/gpu", {}, dev),
        ("WAIT", "/v1/models/demo-f32/gpu", {}, None),
        ("GET", "/v1/models", {}, None),
        ("GET", "/v1/models/demo-f32", {}, None),
        ("SOCKET", "", {}, None),                  # the lease socket; demo-f32 stays leased
        ("DELETE", "/v1/models/demo-f32/gpu", {}, None),    # 202: draining
        ("GET", "/v1/models/demo-f32/gpu", {}, None),
        ("GET", "/v1/models", {}, None),
        ("DELETE", g, {}, None),                   # 200: released at once
        ("DELETE", g, {}, None),                   # 404 not_loaded
        ("GET", g, {}, None),
        ("UNLEASE", "", {}, None),
        ("GET", "/v1/models/demo-f32/gpu", {}, None),
    ]


def lease_frame(payload):
    b = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return struct.pack("<I", len(b)) + b


def lease_answer(s):
    """The text of one answer frame and how many descriptors came with it
    (closed at once); None when the daemon closed the connection."""
    data, nfds = b"", 0
    while len(data) < 4 or len(data) < 4 + struct.unpack("<I", data[:4])[0]:
        want = 4 - len(data) if len(data) < 4 else 4 + struct.unpack("<I", data[:4])[0] - len(data)
        try:
            msg, anc, _flags, _addr = s.recvmsg(want, socket.CMSG_SPACE(4 * 64))
        except ConnectionResetError:
            return None
        for level, typ, cdata in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                for fd in struct.unpack(f"{len(cdata) // 4}i", cdata[:len(cdata) // 4 * 4]):
                    os.close(fd)
                    nfds += 1
        if not msg:
            return None
        data += msg
    return {"text": data[4:].decode("latin-1"), "fds": nfds}


def lease_connect(sock):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(sock)
    return s


def lease_answers(sock, held):
    """Every kind of lease answer; the connection that holds a lease on
    demo-f32 is appended to held (the caller closes it)."""
    out = []
    s = lease_connect(sock)
    held.append(s)
    for req in ({"op": "hello", "protocol": 2}, {"op": "hello", "protocol": 9}, {"op": "list"},
                {"op": "open", "model": "demo-f32"},
                {"op": "open", "model": "demo-f32", "device": "host"},
                {"op": "open", "model": "demo-f32", "device": "cuda:0"},
                {"op": "open", "model": "demo-f32", "device": "bogus"},
                {"op": "open", "model": "nope"}, {"op": "open", "model": "demo-bf16"},
                {"op": "release", "lease": 2}, {"op": "release", "lease": 2},
                {"op": "release", "lease": 99}, b"{", b'{"op": "fly"}', b'{"op": "open"}',
                b'{"op": "open", "model": "demo-f32", "model": "x"}', b"[1]",
                {"op": "list"}):
        s.sendall(lease_frame(req))
        out.append({"request": f"LEASE {req if isinstance(req, bytes) else json.dumps(req)}",
                    "answer": lease_answer(s)})
    # A frame longer than a request may be: answered, then closed.
    t = lease_connect(sock)
    t.sendall(struct.pack("<I", 1 << 20))
    out.append({"request": "LEASE too large", "answer": lease_answer(t)})
    t.close()
    t = lease_connect(sock)
    t.sendall(lease_frame({"op": "close"}))
    out.append({"request": "LEASE close", "answer": lease_answer(t)})
    t.close()
    return out


def wait_state(d, path, done, timeout=60):
    """Waits until done(the state GET path answers) holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = d.request("GET", path)
        if done(json.loads(r.body).get("state")):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{path}: still {json.loads(r.body).get('state')} after {timeout}s")


def gpu_answers(d, base, invalid):
    out, held = [], []
    try:
        for method, path, headers, body in gpu_requests(d, invalid):
            if method == "WAIT":
                wait_state(d, path, lambda s: s in ("ready", "failed"))
            elif method == "SOCKET":
                out += lease_answers(os.path.join(d.workdir, "tensord.sock"), held)
            elif method == "UNLEASE":
                for s in held:
                    s.close()
                held.clear()
                # the serve thread sees the close and ends the lease; the
                # draining copy then goes
                wait_state(d, "/v1/models/demo-f32/gpu", lambda s: s != "draining")
            else:
                r = d.request(method, path, headers=headers, body=body)
                # A HEAD's Content-Length counts the timings' digits too.
                out.append({"request": f"{method} {path} {json.dumps(headers)} {body!r}",
                            "answer": normalize(r, base, timed=method == "HEAD")})
    finally:
        for s in held:
            s.close()
    return out


# A preload's timings, the only numbers that differ from run to run in a
# JSON answer (the hasher's rate stays: the files are too small to move it):
# its time and rate, the time of each phase, and the CPU time of its copies.
TIMINGS = re.compile(rb'"seconds":[-+0-9.eE]+,"bytes_per_second":[-+0-9.eE]+')
PHASES = re.compile(rb'"phases":\{[^{}]*\}')
CPU_SECONDS = re.compile(rb'"copy_cpu_seconds":[-+0-9.eE]+')


def untimed(body):
    """body with a preload's timings set to 0 (their keys kept)."""
    body = TIMINGS.sub(rb'"seconds":0,"bytes_per_second":0', body)
    body = PHASES.sub(lambda m: re.sub(rb':[-+0-9.eE]+', b':0', m.group(0)), body)
    return CPU_SECONDS.sub(b'"copy_cpu_seconds":0', body)


def normalize(r, base, timed=False):
    """The answer less what differs from run to run: the date, multipart
    boundaries, the temporary directory's name (in paths the daemon shows)."""
    headers = []
    boundary = None
    timed = timed or TIMINGS.search(r.body) is not None
    for k, v in r.headers.items():
        if timed and k.lower() == "content-length":
            v = "N"  # the timings' digits
        if k.lower() == "date":
            continue
        m = re.search(r"boundary=(\S+)", v)
        if m:
            boundary = m.group(1)
            v = v.replace(boundary, "BOUNDARY")
        headers.append(f"{k}: {v}")
    body = r.body.replace(base.encode(), b"BASE")
    body = untimed(body)
    if boundary:
        body = body.replace(boundary.encode(), b"BOUNDARY")
    return {"status": f"{r.status} {r.reason}", "headers": headers, "sha256": hashlib.sha256(body).hexdigest(),
            "length": len(body), "head": body[:200].decode("latin-1")}


def ask(d, reqs, base):
    out = []
    for method, path, headers, body in reqs:
        r = d.request(method, path, headers=headers, body=body)
        out.append({"request": f"{method} {path} {json.dumps(headers)}",
                    "answer": normalize(r, base)})
    return out


def record(binary):
    base = tempfile.mkdtemp(prefix="tensord-answers-")
    try:
        root = os.path.join(base, "models")
        gen_models.make_demo_models(root)
        man = gen_models.make_test_models(root)
        for d, dirs, files in os.walk(root):
            for n in dirs + files:
                os.utime(os.path.join(d, n), (MTIME, MTIME), follow_symlinks=False)
        work = os.path.join(base, "run")
        os.mkdir(work)
        os.environ["TENSORD_BIN"] = binary
        d = tdutil.Daemon(root, work, extra_args=["--cors-origins", ORIGIN,
                                                  "--access-log", "off"]).start()
        try:
            d.wait_hashed(timeout=120)
            answers = ask(d, requests(sorted(man.models)), base)
            answers += ask(d, known_requests(d, root), base)
            invalid = sorted(m["name"] for m in d.json("/v1/models")["models"]
                             if m["state"] == "invalid")[0]
            answers += gpu_answers(d, base, invalid)
        finally:
            d.stop()
        with open(os.path.join(base, "tokens"), "w") as f:
            f.write(f"read {READ_TOKEN}\nadmin {ADMIN_TOKEN}\n")
        with open(os.path.join(base, "s3.secret"), "w") as f:
            f.write(S3_SECRET + "\n")
        work = os.path.join(base, "guarded")
        os.mkdir(work)
        auth = {"Authorization": f"Bearer {READ_TOKEN}"}
        d = tdutil.Daemon(root, work, extra_args=[
            "--access-log", "off", "--auth-token-file", os.path.join(base, "tokens"),
            "--s3-access-key", S3_KEY, "--s3-secret-key-file", os.path.join(base, "s3.secret")],
            probe_headers=auth).start()
        try:
            d.probe_headers = auth
            d.wait_hashed(timeout=120)
            answers += ask(d, guarded_requests(), base)
        finally:
            d.stop()
        return answers
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=("record", "compare"))
    ap.add_argument("file")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "tensord"))
    a = ap.parse_args()
    got = record(a.bin)
    if a.mode == "record":
        with open(a.file, "w") as f:
            json.dump(got, f, indent=1)
        print(f"{len(got)} answers recorded in {a.file}")
        return 0
    with open(a.file) as f:
        want = json.load(f)
    diffs = 0
    for w, g in zip(want, got):
        if w != g:
            diffs += 1
            print(f"DIFFERS: {w['request']}\n  was: {json.dumps(w['answer'])[:600]}\n"
                  f"  now: {json.dumps(g['answer'])[:600]}")
    if len(want) != len(got):
        diffs += 1
        print(f"{len(want)} answers recorded, {len(got)} now")
    print(f"{len(got)} answers, {diffs} differ")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
