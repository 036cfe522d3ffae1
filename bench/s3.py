#!/usr/bin/python3
"""S3 API benchmark: `make bench-s3` runs this file.

The Run:ai Model Streamer (runai-model-streamer-s3, its native AWS CRT
client) loading a sharded model through tensord's S3 API, against the same
streamer reading the same files from the local file system, and a plain
sequential read of the files, in one run on one machine with the files in
the page cache (each run reads them once first). The model is generated
(--gib GiB of F32 in --shards shards) into a temporary directory and
removed. Medians over --runs alternating runs; the load average before and
after is printed, the machine being shared (docs/PERFORMANCE.md).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import tdutil  # noqa: E402
from tdutil import gen_models  # noqa: E402

import numpy as np  # noqa: E402

# One load in a child process (the streamer keeps native threads and
# buffers): prints seconds and bytes.
CHILD = r"""
import os, sys, time
from runai_model_streamer import SafetensorsStreamer
urls = sys.argv[1:]
t0 = time.monotonic()
n = 0
with SafetensorsStreamer() as s:
    s.stream_files(urls)
    for name, t in s.get_tensors():
        n += t.numel() * t.element_size()
print(time.monotonic() - t0, n)
"""


def make_model(root, gib, shards):
    rng = np.random.default_rng(5)
    per = int(gib * (1 << 30)) // shards // 4
    rows = max(1, per // 1024)
    for s in range(shards):
        a = rng.standard_normal((rows, 1024), dtype=np.float32)
        gen_models.write_safetensors(
            os.path.join(root, "bench", "s3model", f"model-{s + 1:05d}-of-{shards:05d}.safetensors"),
            [(f"layer{s}.weight", "F32", a.shape, a.tobytes())], {"format": "pt"})
    return sorted(os.listdir(os.path.join(root, "bench", "s3model")))


def run_child(urls, env):
    p = subprocess.run([sys.executable, "-c", CHILD] + urls, env=env, capture_output=True,
                       text=True, check=True)
    secs, n = p.stdout.split()
    return float(secs), int(n)


def plain_read(paths):
    t0 = time.monotonic()
    n = 0
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while True:
                b = f.read(16 << 20)
                if not b:
                    break
                n += len(b)
    return time.monotonic() - t0, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="tensord-bench-s3-")
    try:
        root = os.path.join(base, "models")
        names = make_model(root, args.gib, args.shards)
        paths = [os.path.join(root, "bench", "s3model", n) for n in names]
        d = tdutil.Daemon(root, base, ["--threads", "4"]).start()
        d.wait_hashed(timeout=600)
        env = dict(os.environ, AWS_ENDPOINT_URL=f"http://127.0.0.1:{d.port}/s3",
                   RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING="0", AWS_ACCESS_KEY_ID="x",
                   AWS_SECRET_ACCESS_KEY="x", AWS_EC2_METADATA_DISABLED="true",
                   AWS_DEFAULT_REGION="us-east-1")
        s3_urls = [f"s3://bench--s3model/{n}" for n in names]
        print(f"load average before: {os.getloadavg()}")
        res = {"s3": [], "local": [], "read": []}
        for _ in range(args.runs):
            plain_read(paths)  # into the page cache
            res["s3"].append(run_child(s3_urls, env))
            res["local"].append(run_child(paths, env))
            res["read"].append(plain_read(paths))
        d.stop_checked()
        size = sum(os.path.getsize(p) for p in paths)
        print(f"model: {size / 1e9:.2f} GB in {len(paths)} shards; medians of {args.runs} runs")
        for k, label in (("s3", "runai streamer via tensord S3 API"),
                         ("local", "runai streamer, local files"),
                         ("read", "plain sequential read, local files")):
            secs = statistics.median(s for s, _ in res[k])
            print(f"  {label:40s} {secs:7.3f} s  {size / secs / 1e9:6.2f} GB/s")
        print(f"load average after: {os.getloadavg()}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
