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
routes, fetch, the GPU state, S3, blobs, the console, CORS. An answer is its
status line, its headers (less Date; multipart boundaries replaced) and
its body's SHA-256 with its first 200 bytes (the temporary directory's
name replaced). compare prints every answer
that differs and exits 1 when one does."""
import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))

import gen_models  # noqa: E402
import tdutil  # noqa: E402

MTIME = 1_700_000_000
ORIGIN = "http://console.example"


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
    return out


def normalize(r, base):
    """The answer less what differs from run to run: the date, multipart
    boundaries, the temporary directory's name (in paths the daemon shows)."""
    headers = []
    boundary = None
    for k, v in r.headers.items():
        if k.lower() == "date":
            continue
        m = re.search(r"boundary=(\S+)", v)
        if m:
            boundary = m.group(1)
            v = v.replace(boundary, "BOUNDARY")
        headers.append(f"{k}: {v}")
    body = r.body.replace(base.encode(), b"BASE")
    if boundary:
        body = body.replace(boundary.encode(), b"BOUNDARY")
    return {"status": f"{r.status} {r.reason}", "headers": headers, "sha256": hashlib.sha256(body).hexdigest(),
            "length": len(body), "head": body[:200].decode("latin-1")}


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
            answers = []
            for method, path, headers, body in requests(sorted(man.models)):
                r = d.request(method, path, headers=headers, body=body)
                answers.append({"request": f"{method} {path} {json.dumps(headers)}",
                                "answer": normalize(r, base)})
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
