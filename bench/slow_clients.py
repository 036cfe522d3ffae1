#!/usr/bin/python3
"""Slow and hostile clients against one tensord binary (issue 23's figures).

  describe  /healthz latency (p50, p99, max over a probe every 20 ms) while
            wrk keeps --clients connections polling GET /v1/models/wide, the
            description of a --tensors model whose content hashes are still
            coming in (a 64 MiB blob.bin, first in hashing order, read by one
            thread paced to 1 MiB/s)
  fetch     the daemon's RSS growth with --fetch-conns connections that each
            POST a fetch of every tensor of that model and never read
  uploads   the RSS growth with --uploads connections, auth_token_file set,
            that each send fetch headers announcing a 1 MiB body and no
            token, then all of that body but its last byte

Usage: bench/slow_clients.py [--bin build/tensord] [--only describe,fetch,uploads]
Run it for the old and the new binary on the same machine, one after the
other; the models are generated once per run into a temporary directory.
Prints one line per figure and, with --json FILE, writes them there.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))

import gen_models  # noqa: E402

MiB = 1 << 20
TOKEN = "bench-read-token-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, headers=None, timeout=60):
    """(status, body) of one GET on a fresh connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        head = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        for k, v in (headers or {}).items():
            head += f"{k}: {v}\r\n"
        s.sendall((head + "\r\n").encode())
        data = b""
        while True:
            c = s.recv(1 << 20)
            if not c:
                break
            data += c
        status = int(data.split(b" ", 2)[1]) if data else None
        return status, data.partition(b"\r\n\r\n")[2]
    finally:
        s.close()


class Daemon:
    def __init__(self, binary, models, workdir, *args):
        self.port = free_port()
        self.log = open(os.path.join(workdir, "tensord.log"), "wb")
        cmd = [binary, "serve", "--models", models, "--listen", f"127.0.0.1:{self.port}",
               "--state-dir", os.path.join(workdir, "state"),
               "--ipc-socket", os.path.join(workdir, "tensord.sock"), *map(str, args)]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if get(self.port, "/healthz", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("tensord did not start")

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def settle(self):
        """Waits until the daemon answers a fresh connection promptly 3 times
        in a row (the answers of the idle connections are queued)."""
        ok = 0
        while ok < 3:
            t0 = time.monotonic()
            get(self.port, "/healthz", timeout=300)
            ok = ok + 1 if time.monotonic() - t0 < 0.1 else 0
            time.sleep(0.2)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def make_models(base, tensors):
    root = os.path.join(base, "models")
    gen_models.make_many_tensors(os.path.join(root, "wide", "model.safetensors"), tensors)
    with open(os.path.join(root, "wide", "blob.bin"), "wb") as f:
        for _ in range(64):
            f.write(os.urandom(MiB))
    return root


def describe(args, root, work):
    d = Daemon(args.bin, root, work, "--hash-threads", 1, "--hash-max-bytes-per-second", "1M")
    try:
        status, body = get(d.port, "/v1/models/wide")
        doc = json.loads(body)
        assert status == 200 and not doc["hashes"]["complete"], doc["hashes"]
        size = len(body)
        wrk = subprocess.Popen(["wrk", "-t", "2", "-c", str(args.clients), "-d",
                                f"{args.seconds}s", "--timeout", "60s",
                                f"http://127.0.0.1:{d.port}/v1/models/wide"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(1)  # the clients are connected and asking
        lat = []
        end = time.monotonic() + args.seconds - 2
        while time.monotonic() < end:
            t0 = time.monotonic()
            get(d.port, "/healthz", timeout=120)
            lat.append(time.monotonic() - t0)
            time.sleep(0.02)
        out, _ = wrk.communicate()
        status, body = get(d.port, "/v1/models/wide")
        still_hashing = not json.loads(body)["hashes"]["complete"]
        lat.sort()
        reqs = next((line.split()[0] for line in out.splitlines() if "requests in" in line), "?")
        return {"doc_bytes": size, "healthz_probes": len(lat),
                "healthz_p50_ms": round(1000 * statistics.median(lat), 2),
                "healthz_p99_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 2),
                "healthz_max_ms": round(1000 * lat[-1], 2),
                "descriptions_served": reqs, "still_hashing_at_end": still_hashing}
    finally:
        d.stop()


def idle(port, request, n):
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(30)
        s.connect(("127.0.0.1", port))
        socks.append(s)
        try:
            s.sendall(request)
        except OSError:
            pass
    return socks


def fetch(args, root, work):
    d = Daemon(args.bin, root, work)
    body = b"{}"
    req = (b"POST /v1/models/wide/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    try:
        s = idle(d.port, req, 1)[0]  # one read whole, so the first plan is not measured
        s.settimeout(120)
        got = b""
        while True:
            c = s.recv(1 << 20)
            if not c:
                break
            got += c
            if len(got) > 8 << 20:
                break
        s.close()
        d.settle()
        rss0 = d.rss_kib()
        socks = idle(d.port, req, args.fetch_conns)
        d.settle()
        time.sleep(2)
        rss1 = d.rss_kib()
        for s in socks:
            s.close()
        return {"connections": args.fetch_conns, "rss_before_kib": rss0, "rss_after_kib": rss1,
                "grown_mib": round((rss1 - rss0) / 1024, 1)}
    finally:
        d.stop()


def uploads(args, root, work):
    tokens = os.path.join(work, "tokens")
    with open(tokens, "w") as f:
        f.write(f"read {TOKEN}\n")
    d = Daemon(args.bin, root, work, "--auth-token-file", tokens)
    head = (b"POST /v1/models/wide/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % MiB)
    try:
        d.settle()
        rss0 = d.rss_kib()
        socks = []
        chunk = b" " * (64 << 10)
        for _ in range(args.uploads):
            s = socket.socket()
            s.settimeout(5)
            s.connect(("127.0.0.1", d.port))
            socks.append(s)
            try:
                s.sendall(head)
            except OSError:
                pass
        # Every body but its last byte, a bit at a time on every connection.
        for i in range(MiB // len(chunk)):
            part = chunk if i < MiB // len(chunk) - 1 else chunk[:-1]
            for s in socks:
                try:
                    s.send(part, socket.MSG_DONTWAIT)
                except OSError:
                    pass
        d.settle()
        time.sleep(2)
        rss1 = d.rss_kib()
        for s in socks:
            s.close()
        return {"connections": args.uploads, "rss_before_kib": rss0, "rss_after_kib": rss1,
                "grown_mib": round((rss1 - rss0) / 1024, 1)}
    finally:
        d.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "tensord"))
    ap.add_argument("--tensors", type=int, default=100000)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--fetch-conns", type=int, default=150)
    ap.add_argument("--uploads", type=int, default=400)
    ap.add_argument("--only", default="describe,fetch,uploads")
    ap.add_argument("--json")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="tensord-slow-bench-")
    out = {"bin": args.bin}
    try:
        root = make_models(base, args.tensors)
        for name in args.only.split(","):
            work = os.path.join(base, name)
            os.makedirs(work)
            out[name] = {"describe": describe, "fetch": fetch, "uploads": uploads}[name](
                args, root, work)
            print(name, json.dumps(out[name]), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
