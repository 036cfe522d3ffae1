#!/usr/bin/python3
"""`make bench-hash`: how long tensord takes to hash a sharded repo (2 GB by
default) with an empty state directory ("cold"), and again after a restart
from the state file the first run saved ("restart": should be about 0).

The repo is written by tests/gen/gen_models.py --big's generator: sparse
files, read once before the measurements (as bench/run.py does), so the
figure is SHA-256 plus the copy out of the page cache, as for a repo that is
already cached; a repo on a cold disk takes at least its size over the disk's
read rate. (Without that first read, the kernel's allocating and zeroing the
page-cache pages of the holes dominates: about 0.8 GB/s here.) The repo goes
to a temporary directory (or --dir) and is removed afterwards. The times come from the
daemon's own metrics (/v1/metrics "hashing"), polled every 20 ms: from the
spawn of the process to every file having a hash. The files are left 2.5 s
to age first, so the daemon's racy-ctime wait (2 s) is not in the figure.

  make bench-hash
  .venv/bin/python bench/bench_hash.py --size 2G --shards 4 --threads 1,2
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import gen_models  # noqa: E402

COLS = 65536


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    s = s.strip().upper().rstrip("B").rstrip("I")
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def make_repo(root, size, shards):
    """org/big: `shards` files of size/shards bytes and an index. Returns bytes."""
    model = os.path.join(root, "org", "big")
    rows = max(1, size // shards // COLS)
    total, weight_map = 0, {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        total += gen_models.make_big(os.path.join(model, name), rows, COLS, name=f"w{i}")
        weight_map[f"w{i}"] = name
    with open(os.path.join(model, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return total


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
        return json.load(r)


def run_daemon(binary, models, state, threads, log):
    """Spawns the daemon; returns (seconds to ready, seconds to all hashed,
    the final hashing metrics)."""
    port = free_port()
    argv = [binary, "serve", "--models", models, "--listen", f"127.0.0.1:{port}",
            "--threads", "1", "--access-log", "off", "--watch", "false",
            "--state-dir", state, "--hash-threads", str(threads),
            "--ipc-socket", os.path.join(state, "..", f"s{port}.sock")]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    ready = done = None
    try:
        while time.monotonic() - t0 < 600:
            if p.poll() is not None:
                raise RuntimeError(f"tensord exited with {p.returncode}; see {log.name}")
            try:
                h = get_json(port, "/v1/metrics")["hashing"]
            except OSError:
                time.sleep(0.005)
                continue
            ready = ready or time.monotonic() - t0
            if h["files_pending"] == 0 and h["files_known"] == h["files"]:
                done = time.monotonic() - t0
                return ready, done, h
            time.sleep(0.02)
        raise RuntimeError("hashing did not finish in 600 s")
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="2G", help="repo size (default 2G)")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--threads", default="1,2", help="hash_threads values to measure")
    ap.add_argument("--dir", help="work directory (default: a new temporary one)")
    ap.add_argument("--tensord", default=os.path.join(ROOT, "build", "tensord"))
    args = ap.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="tensord-bench-hash-")
    os.makedirs(work, exist_ok=True)
    results = []
    try:
        models = os.path.join(work, "models")
        total = make_repo(models, parse_size(args.size), args.shards)
        for dirpath, _, names in os.walk(models):
            for n in names:
                with open(os.path.join(dirpath, n), "rb") as f:
                    while f.read(1 << 24):
                        pass
        time.sleep(2.5)  # past the racy-ctime window of every file
        with open(os.path.join(work, "tensord.log"), "ab") as log:
            for threads in [int(t) for t in args.threads.split(",")]:
                state = os.path.join(work, f"state-{threads}")
                shutil.rmtree(state, ignore_errors=True)
                r1, d1, h1 = run_daemon(args.tensord, models, state, threads, log)
                r2, d2, h2 = run_daemon(args.tensord, models, state, threads, log)
                res = {"threads": threads, "bytes": total, "files": h1["files"],
                       "cold": {"ready_s": r1, "hashed_s": d1,
                                "bytes_hashed": h1["bytes_hashed"],
                                "gb_per_s": h1["bytes_hashed"] / max(d1 - r1, 1e-9) / 1e9},
                       "restart": {"ready_s": r2, "hashed_s": d2,
                                   "bytes_hashed": h2["bytes_hashed"],
                                   "files_hashed": h2["files_hashed"]}}
                results.append(res)
                print(f"hash_threads {threads}: {total / 1e9:.2f} GB in {h1['files']} files: "
                      f"cold {d1:.2f} s to all hashed (ready at {r1:.3f} s, "
                      f"{res['cold']['gb_per_s']:.2f} GB/s); after a restart {d2:.3f} s, "
                      f"{h2['bytes_hashed']} bytes and {h2['files_hashed']} files hashed",
                      flush=True)
        load = os.getloadavg()
        print(f"load average during the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
              f"on {os.cpu_count()} CPUs")
        out = os.path.join(ROOT, "build", "bench-hash.json")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            json.dump({"results": results, "loadavg": load}, f, indent=1)
        print(f"results: {out}")
        return 0 if all(r["restart"]["bytes_hashed"] == 0 for r in results) else 1
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
