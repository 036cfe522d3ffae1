#!/usr/bin/python3
"""Hostile and slow peers against one tensord binary (issue 31's figures).

  hubdocs  a repo of --files small files: the daemon's RSS growth with
           --conns connections that each ask for the repo's document
           (/api/models/{repo}) and never read, and with as many asking for
           its recursive tree; /healthz latency (p50, p99, max over a probe
           every 20 ms) while they connect and ask
  mirror   a mirror of a scripted upstream in this process (64 KiB blocks,
           a 32 MiB cache): --abandon clients each ask for a cold range
           that starts past a file's first block and runs to its end, read
           the answer's status line and leave; then a new client's HEAD of
           another file (its latency), the connections still open, the
           cache bytes the mirror still holds for readers (in use), and a
           new cold download of 4 MiB (whether it completes)

Usage: bench/hostile_peers.py [--bin build/tensord] [--only hubdocs,mirror] [--json FILE]
Run it for the old and the new binary on the same machine, one after the
other. Prints one line per figure (docs/PERFORMANCE.md "Hostile and slow
peers")."""
import argparse
import hashlib
import http.server
import json
import os
import re
import shutil
import socket
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from slow_clients import Daemon, get, idle  # noqa: E402

BLOCK = 65536
COMMIT = "ab" * 20


def head(port, path, timeout=60):
    """The status of a HEAD on a fresh connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(f"HEAD {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
                  .encode())
        data = b""
        while b"\r\n\r\n" not in data:
            c = s.recv(4096)
            if not c:
                break
            data += c
        return int(data.split(b" ", 2)[1]) if data else None
    finally:
        s.close()


def wait_hashed(d, timeout=600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = get(d.port, "/v1/models")
        h = json.loads(body)["hashing"]
        if h["files_pending"] == 0 and h["files_known"] == h["files"]:
            return
        time.sleep(0.5)
    raise RuntimeError("hashing did not end")


def probe(port, seconds):
    """/healthz latencies (s) of a probe every 20 ms for `seconds`."""
    lat = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        get(port, "/healthz", timeout=120)
        lat.append(time.monotonic() - t0)
        time.sleep(0.02)
    lat.sort()
    return {"healthz_probes": len(lat), "healthz_p50_ms": round(1000 * statistics.median(lat), 2),
            "healthz_p99_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 2),
            "healthz_max_ms": round(1000 * lat[-1], 2)}


def hubdocs(args, base):
    root = os.path.join(base, "models")
    repo = os.path.join(root, "org", "big")
    per = 200
    for i in range(args.files):
        d = os.path.join(repo, f"d{i // per:04d}")
        if i % per == 0:
            os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"file-{i:06d}.txt"), "w") as f:
            f.write(f"{i}\n")
    work = os.path.join(base, "hubdocs")
    os.makedirs(work)
    d = Daemon(args.bin, root, work)
    out = {"files": args.files, "conns": args.conns}
    try:
        wait_hashed(d)
        for name, path in (("document", "/api/models/org/big"),
                           ("tree", "/api/models/org/big/tree/main?recursive=true")):
            status, body = get(d.port, path)
            assert status == 200, (status, body[:200])
            d.settle()
            rss0 = d.rss_kib()
            req = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
            result = {}
            t = threading.Thread(target=lambda: result.update(probe(d.port, args.seconds)))
            t.start()
            socks = idle(d.port, req, args.conns)
            t.join()
            d.settle()
            time.sleep(1)
            rss1 = d.rss_kib()
            for s in socks:
                s.close()
            out[name] = {"bytes": len(body), "rss_before_kib": rss0, "rss_after_kib": rss1,
                         "grown_mib": round((rss1 - rss0) / 1024, 1), **result}
            d.settle()
    finally:
        d.stop()
    return out


class Upstream:
    """HEAD and ranged GET of files f{i}.bin of org/r at COMMIT."""

    def __init__(self, files):
        outer = self
        self.files = files

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def answer(self):
                m = re.fullmatch(r"/org/r/resolve/(main|[0-9a-f]{40})/(.+)", self.path)
                data = outer.files(m.group(2)) if m else None
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                sha = hashlib.sha256(data).hexdigest()
                r = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
                if self.command == "HEAD" or not r:
                    self.send_response(200)
                    self.send_header("X-Linked-Etag", f'"{sha}"')
                    self.send_header("X-Linked-Size", str(len(data)))
                    body = b""
                else:
                    a, b = int(r.group(1)), min(int(r.group(2)), len(data) - 1)
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {a}-{b}/{len(data)}")
                    body = data[a:b + 1]
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", f'"{sha}"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = answer

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            request_queue_size = 2048

        self.server = Server(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def file_bytes(name):
    m = re.fullmatch(r"f(\d+)\.bin", name)
    if m:  # three blocks: one past the second by a byte
        return hashlib.sha256(name.encode()).digest() * ((2 * BLOCK + 1) // 32) + b"x"
    if name == "big.bin":
        return hashlib.sha256(b"big").digest() * (4 << 20 >> 5)
    if name == "new.bin":
        return b"new\n"
    return None


def mirror(args, base):
    up = Upstream(file_bytes)
    work = os.path.join(base, "mirror")
    os.makedirs(os.path.join(work, "models"))
    d = Daemon(args.bin, os.path.join(work, "models"), work, "--upstream",
               f"http://127.0.0.1:{up.port}", "--mirror-block-bytes", BLOCK,
               "--mirror-cache-max-bytes", "32M", "--mirror-cache-dir",
               os.path.join(work, "cache"))
    out = {"abandoned": args.abandon}
    try:
        t0 = time.monotonic()
        for i in range(args.abandon):
            s = socket.create_connection(("127.0.0.1", d.port), timeout=30)
            s.sendall(f"GET /org/r/resolve/{COMMIT}/f{i}.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      f"Range: bytes={BLOCK}-\r\n\r\n".encode())
            s.recv(64)  # the status line: the answer has begun
            s.close()
        out["abandon_s"] = round(time.monotonic() - t0, 2)
        t0 = time.monotonic()
        status = head(d.port, f"/org/r/resolve/{COMMIT}/new.bin")
        out["new_client_head_ms"] = round(1000 * (time.monotonic() - t0), 1)
        out["new_client_status"] = status
        time.sleep(2)
        m = json.loads(get(d.port, "/v1/metrics")[1])
        out["connections_open"] = m["connections"]["open"]
        out["cache_bytes"] = m["mirror"]["cache_bytes"]
        out["cache_in_use_bytes"] = m["mirror"].get("in_use_bytes")
        t0 = time.monotonic()
        try:
            status, body = get(d.port, f"/org/r/resolve/{COMMIT}/big.bin", timeout=60)
            out["cold_4mib_download"] = ("whole" if status == 200 and body == file_bytes("big.bin")
                                         else f"{status}, {len(body)} bytes")
        except OSError as e:
            out["cold_4mib_download"] = f"failed: {e}"
        out["cold_4mib_s"] = round(time.monotonic() - t0, 2)
    finally:
        d.stop()
        up.close()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "tensord"))
    ap.add_argument("--files", type=int, default=40000)
    ap.add_argument("--conns", type=int, default=100)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--abandon", type=int, default=1000)
    ap.add_argument("--only", default="hubdocs,mirror")
    ap.add_argument("--json")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="tensord-hostile-bench-")
    out = {"bin": args.bin}
    try:
        for name in args.only.split(","):
            out[name] = {"hubdocs": hubdocs, "mirror": mirror}[name](args, base)
            print(name, json.dumps(out[name]), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
