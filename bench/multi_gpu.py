#!/usr/bin/python3
"""Preloads to several devices at once (`make bench-multi-gpu`; docs/PERFORMANCE.md
"Several devices"): one loader per device, measured against each device's
link in the same run.

On the CUDA driver test double with --devices N (default 2) devices, each
with a modelled link of --link-gbps (CUDA_DOUBLE_LINK_GBPS: every device its
own link), or on a GPU host's first N GPUs, it generates a sharded model
(bench/preload.py's, --size-gib per device) with its files in the page cache
and measures, in each of --runs runs:

  alone     the warm preload of the whole model to each device in turn: its
            GB/s over the link;
  together  the same model preloaded to every device at once (one POST per
            device, back to back: data-parallel copies): each device's GB/s
            over its link, how long the preloads overlapped (the intervals
            GET reports, start to ready), and the wall time against the
            slowest alone;
  split     world N with every *.weight cut on dim 0, one rank per device
            ({"devices": [...], "split": ...}): each rank holds 1/N of the
            bytes; the wall time to all ranks ready against the whole model
            on one device.

Medians of the runs. On the double, the "device" is host memory and its
copy engine a thread of this machine: the table shows the loaders' and the
engine's behaviour together, not a GPU's.
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

import preload as pb  # noqa: E402  (bench/preload.py: its model and helpers)
import tdutil  # noqa: E402

MODEL = pb.MODEL


def post(d, body):
    r = d.request("POST", f"/v1/models/{MODEL}/gpu", body=json.dumps(body).encode())
    if r.status not in (200, 202):
        raise RuntimeError(f"preload {body}: {r.status} {r.body[:300]!r}")


def instances(d):
    s = d.json(f"/v1/models/{MODEL}/gpu")
    return s.get("instances", [])


def wait_ready(d, n, timeout=900):
    """Polls until n instances are ready; returns each one's (device, rank,
    first seen loading, ready) times from this process's clock, and its GET
    document."""
    seen, done = {}, {}
    deadline = time.monotonic() + timeout
    while True:
        now = time.monotonic()
        for i in instances(d):
            key = (i["device"], i.get("rank", 0))
            if i["state"] == "loading":
                seen.setdefault(key, now)
            if i["state"] == "failed":
                raise RuntimeError(f"{key} failed: {i.get('reason')}")
            if i["state"] == "ready" and key not in done:
                done[key] = now
                seen.setdefault(key, now)
        if len(done) == n:
            break
        if now > deadline:
            raise RuntimeError(f"not ready after {timeout} s: {instances(d)}")
        time.sleep(0.002)
    docs = {}
    for key in done:
        q = f"?device={key[0]}&rank={key[1]}"
        docs[key] = d.json(f"/v1/models/{MODEL}/gpu{q}")
    return seen, done, docs


def evict_all(d):
    d.request("DELETE", f"/v1/models/{MODEL}/gpu")
    deadline = time.monotonic() + 120
    while instances(d) and time.monotonic() < deadline:
        time.sleep(0.01)


def one_run(d, devices, link, files, total):
    pb.page_cache(files, True)
    row = {"alone": {}, "together": {}, "split": {}}
    for dev in devices:
        post(d, {"device": dev})
        _, _, docs = wait_ready(d, 1)
        doc = next(iter(docs.values()))
        row["alone"][dev] = doc["preload"]["bytes_per_second"] / 1e9
        evict_all(d)
    t0 = time.monotonic()
    for dev in devices:
        post(d, {"device": dev})
    seen, done, docs = wait_ready(d, len(devices))
    wall = time.monotonic() - t0
    for (dev, _), doc in docs.items():
        row["together"][dev] = doc["preload"]["bytes_per_second"] / 1e9
    start, first_end = max(seen.values()), min(done.values())
    row["overlap_s"] = max(0.0, first_end - start)
    row["together_wall_s"] = wall
    evict_all(d)
    rules = [{"match": "*.weight", "dim": 0}]
    t0 = time.monotonic()
    post(d, {"devices": devices, "split": {"world": len(devices), "rules": rules}})
    _, _, docs = wait_ready(d, len(devices))
    row["split_wall_s"] = time.monotonic() - t0
    row["split_bytes"] = sorted(doc["progress"]["bytes_total"] for doc in docs.values())
    evict_all(d)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", type=int, default=2)
    ap.add_argument("--gpu", action="store_true", help="real GPUs (cuda:0..N-1), not the double")
    ap.add_argument("--link-gbps", type=float, default=1.0, help="the double's link per device")
    ap.add_argument("--size-gib", type=float, default=0.5)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    a = ap.parse_args()
    build = os.path.join(REPO, a.build)
    os.environ["TENSORD_BIN"] = os.path.join(build, "tensord")
    env = {}
    if not a.gpu:
        env = {"LD_LIBRARY_PATH": os.path.join(build, "cuda-double"),
               "CUDA_DOUBLE_DEVICES": str(a.devices),
               "CUDA_DOUBLE_MEM_MB": str(int(a.size_gib * 1024 * 2 + 1024)),
               "CUDA_DOUBLE_LINK_GBPS": str(a.link_gbps)}
    bench_dir = os.path.join(build, "bench", "multi_gpu")
    mdir = pb.write_model(os.path.join(bench_dir, "models"), a.size_gib, a.shards)
    files = pb.shard_files(mdir)
    total = sum(os.path.getsize(f) for f in files)
    devices = [f"cuda:{i}" for i in range(a.devices)]
    args = ["--staging-buffers", "4", "--staging-buffer-bytes", "16M", "--log-level", "warn",
            "--access-log", "off"]
    d = pb.start_daemon(os.path.dirname(mdir), os.path.join(bench_dir, "run"), args, env)
    try:
        # One preload per device first: the double's pool of populated
        # device memory, the staging rings pinned.
        for dev in devices:
            post(d, {"device": dev})
        wait_ready(d, len(devices))
        evict_all(d)
        rows = []
        for r in range(a.runs):
            pb.log(f"run {r + 1} of {a.runs}")
            rows.append(one_run(d, devices, a.link_gbps, files, total))
    finally:
        d.stop()
    med = statistics.median
    link = a.link_gbps
    print(f"\n{len(devices)} devices{' (the CUDA driver test double)' if not a.gpu else ''}, "
          f"{total / 2**30:.2f} GiB model, link {link} GB/s per device, "
          f"{a.runs} runs, medians\n")
    print("| preload | device | GB/s | / link |")
    print("| --- | --- | --- | --- |")
    for kind in ("alone", "together"):
        for dev in devices:
            v = med(r[kind][dev] for r in rows)
            print(f"| {kind} | {dev} | {v:.2f} | {v / link:.2f}x |")
    alone_s = total / 1e9 / min(med(r["alone"][dev] for r in rows) for dev in devices)
    print(f"\ntogether: {med(r['together_wall_s'] for r in rows):.2f} s for all "
          f"({alone_s:.2f} s the slowest device alone), the preloads overlapping "
          f"{med(r['overlap_s'] for r in rows):.2f} s")
    print(f"split over {len(devices)} devices: {med(r['split_wall_s'] for r in rows):.2f} s to "
          f"every rank ready, ranks of {rows[0]['split_bytes']} bytes "
          f"(the whole model {total} bytes)")
    if a.devices and os.environ.get("BENCH_JSON"):
        with open(os.environ["BENCH_JSON"], "w") as f:
            json.dump(rows, f)


if __name__ == "__main__":
    main()
