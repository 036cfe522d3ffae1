#!/usr/bin/python3
"""Compressed documents: `make bench-compression` runs this file.

For each document (a 100,000-tensor model's description and merged header,
the description of a 300-tensor model, the model list, /metrics in
Prometheus text and as JSON, the console's script), the bytes on the wire
and the daemon's CPU time per request, as it is and as gzip: --requests
sequential requests of each kind on one keep-alive connection, the CPU
read from /proc/PID/stat (user + system) before and after. The model
documents' gzip form is made once, when the document is rendered (the
first request pays it, as it pays the rendering); the others are
compressed for every answer. Results in bench/out/compression-latest.md.
"""
import argparse
import http.client
import json
import os
import shutil
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import gen_models  # noqa: E402
import tdutil  # noqa: E402

GZ = {"Accept-Encoding": "gzip"}


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def model(root, name, n):
    tensors = [(f"model.layers.{i // 9}.mlp.proj_{i % 9}.weight", "BF16", [4, 2], b"\0" * 16)
               for i in range(n)]
    gen_models.write_safetensors(os.path.join(root, name, "model.safetensors"), tensors)


def measure(port, pid, path, headers, n):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", path, headers=headers)  # rendered (and compressed) outside the count
    r = conn.getresponse()
    r.read()
    size = 0
    t0, c0 = time.monotonic(), cpu_seconds(pid)
    for _ in range(n):
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        size = len(r.read())
        assert r.status == 200, (path, r.status)
    cpu = cpu_seconds(pid) - c0
    conn.close()
    return size, cpu / n * 1e6, (time.monotonic() - t0) / n * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="tensord-bench-gzip-")
    root = os.path.join(base, "models")
    model(root, "huge", 100000)
    model(root, "small", 300)
    for k in range(20):
        model(root, f"m{k:02d}", 9)
    os.makedirs(os.path.join(base, "work"))
    d = tdutil.Daemon(root, os.path.join(base, "work"), []).start()
    rows = []
    try:
        d.wait_hashed(120)
        for path in ("/v1/models/huge", "/v1/models/huge/header", "/v1/models/small",
                     "/v1/models", "/metrics", "/v1/metrics", "/ui/app.js"):
            n = args.requests if "huge" not in path else max(10, args.requests // 40)
            plain = measure(d.port, d.pid, path, {}, n)
            packed = measure(d.port, d.pid, path, GZ, n)
            # what making the gzip form costs once (level 6, as the renderer
            # does for a model's documents), with the same zlib
            conn = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
            conn.request("GET", path)
            body = conn.getresponse().read()
            conn.close()
            t0 = time.process_time()
            zlib.compress(body, 6)
            once = (time.process_time() - t0) * 1e3
            rows.append((path, plain, packed, once))
    finally:
        d.stop_checked()
        shutil.rmtree(base, ignore_errors=True)
    lines = ["| document | bytes | gzip bytes | ratio | CPU µs/request | gzip CPU µs/request "
             "| level 6 once, ms |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for path, (s0, c0, _), (s1, c1, _), once in rows:
        lines.append(f"| `{path}` | {s0:,} | {s1:,} | {s0 / s1:.1f}x | {c0:.0f} | {c1:.0f} "
                     f"| {once:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.join(HERE, "out"), exist_ok=True)
    with open(os.path.join(HERE, "out", "compression-latest.md"), "w") as f:
        f.write(text)
    with open(os.path.join(HERE, "out", "compression-latest.json"), "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    main()
