#!/usr/bin/python3
"""The /v1 routes through a pull-through mirror, against the same reads
straight from the upstream: `make bench-mirror-routes` runs this file (no
root: both daemons on loopback, so the link is not the limit and what is
measured is the mirror's own cost).

An upstream tensord serves a generated sharded model (--shards files of
--shard-mib MiB, F32 tensors of --rows x 8192); a mirror (the default
16 MiB blocks and 4 fetchers) starts with an empty cache for each cold
measurement. With the Python client (client/python):

  1. tensord.load_file of the whole model: straight from the upstream (its
     page cache warm: the best it does), through a cold mirror, and again
     through it once cached; the bytes the upstream sent for the cold read
     (the mirror's counter) against the model's, and the upstream's access
     log: each range once;
  2. safe_open and one tensor from the middle of the last shard, cold: the
     time to the tensor, and the bytes fetched (the headers and that
     tensor's blocks) against the file's;
  3. rank 0 of a 2-way split by rows (load_file with split), cold: the
     bytes fetched against half the model.

The load average before and after is printed (the machine is shared);
results also go to build/bench/mirror_routes.json; what was generated is
removed.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "client", "python"))
import tdutil  # noqa: E402
from tdutil import gen_models  # noqa: E402
import tensord  # noqa: E402

REPO_ID = "bench/sharded"


def make_model(root, shards, shard_mib, rows):
    d = os.path.join(root, REPO_ID)
    os.makedirs(d)
    per = shard_mib * (1 << 20) // (rows * 8192 * 4)
    rng = np.random.default_rng(33)
    weight_map = {}
    for s in range(shards):
        name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        tensors = []
        for t in range(per):
            a = rng.standard_normal((rows, 8192), dtype=np.float32)
            tensors.append((f"l{s}.t{t}", "F32", a.shape, a.tobytes()))
            weight_map[f"l{s}.t{t}"] = name
        gen_models.write_safetensors(os.path.join(d, name), tensors)
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d))


def counter(d, name):
    return tdutil.prom_counter(d, name)


def ranges(access_log, since):
    with open(access_log) as f:
        lines = f.readlines()[since:]
    out = []
    for ln in lines:
        p = ln.split()
        if len(p) >= 7 and p[3] == "206" and "/resolve/" in p[2]:
            out.append((p[2], p[6]))
    return out


def lines(path):
    with open(path) as f:
        return len(f.readlines())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--shard-mib", type=int, default=256)
    ap.add_argument("--rows", type=int, default=4096)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="tensord-bench-mirror-routes-")
    out = {"load_before": os.getloadavg()[0]}
    try:
        up_root = os.path.join(base, "up", "models")
        size = make_model(up_root, args.shards, args.shard_mib, args.rows)
        out["model_bytes"] = size
        up_log = os.path.join(base, "up", "access.log")
        up = tdutil.Daemon(up_root, os.path.join(base, "up"), ["--access-log", up_log]).start()
        up.wait_hashed(timeout=300)
        n_mirror = [0]

        def fresh():
            n_mirror[0] += 1
            w = os.path.join(base, f"m{n_mirror[0]}")
            os.makedirs(os.path.join(w, "models"))
            return tdutil.Daemon(os.path.join(w, "models"), w, [
                "--upstream", f"http://127.0.0.1:{up.port}",
                "--mirror-cache-dir", os.path.join(w, "cache")]).start()

        def url(d):
            return f"http://127.0.0.1:{d.port}/v1/models/{REPO_ID}"

        def timed(fn):
            t = time.monotonic()
            r = fn()
            return time.monotonic() - t, r

        try:
            # 1. The whole model.
            tensord.load_file(url(up))  # the upstream's page cache warm
            out["direct_s"] = min(timed(lambda: tensord.load_file(url(up)))[0] for _ in range(3))
            m = fresh()
            since = lines(up_log)
            out["cold_s"], cold = timed(lambda: tensord.load_file(url(m)))
            out["cold_upstream_bytes"] = counter(m, "tensord_mirror_upstream_bytes_total")
            rs = ranges(up_log, since)
            out["cold_ranges"], out["cold_ranges_distinct"] = len(rs), len(set(rs))
            out["cached_s"] = min(timed(lambda: tensord.load_file(url(m)))[0] for _ in range(3))
            out["cached_upstream_bytes"] = counter(m, "tensord_mirror_upstream_bytes_total") - \
                out["cold_upstream_bytes"]
            direct = tensord.load_file(url(up))
            out["byte_exact"] = all(direct[k].tobytes() == cold[k].tobytes() for k in direct)
            m.stop()

            # 2. One tensor from the middle of the last shard, cold.
            m = fresh()
            last = args.shards - 1
            per = args.shard_mib * (1 << 20) // (args.rows * 8192 * 4)
            name = f"l{last}.t{per // 2}"

            def one():
                with tensord.safe_open(url(m), framework="np") as f:
                    return f.get_tensor(name)
            out["one_tensor_cold_s"], t = timed(one)
            out["one_tensor_upstream_bytes"] = counter(m, "tensord_mirror_upstream_bytes_total")
            out["one_tensor_bytes"] = t.nbytes
            with tensord.safe_open(url(up), framework="np") as f:
                out["one_tensor_direct_s"] = min(timed(lambda: f.get_tensor(name))[0]
                                                 for _ in range(3))
            m.stop()

            # 3. Rank 0 of 2, split by rows.
            m = fresh()
            split = {"world": 2, "rank": 0, "rules": [{"match": "*", "dim": 0}]}
            out["rank0_cold_s"], _ = timed(lambda: tensord.load_file(url(m), split=split))
            out["rank0_upstream_bytes"] = counter(m, "tensord_mirror_upstream_bytes_total")
            m.stop()
        finally:
            up.stop()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    out["load_after"] = os.getloadavg()[0]
    os.makedirs(os.path.join(REPO, "build", "bench"), exist_ok=True)
    with open(os.path.join(REPO, "build", "bench", "mirror_routes.json"), "w") as f:
        json.dump(out, f, indent=1)
    mib = size / (1 << 20)
    print(f"model: {size:,} bytes ({args.shards} shards); load {out['load_before']:.2f} before, "
          f"{out['load_after']:.2f} after")
    print(f"load_file direct   {out['direct_s']:.2f} s ({mib / out['direct_s']:.0f} MiB/s)")
    print(f"load_file cold     {out['cold_s']:.2f} s ({mib / out['cold_s']:.0f} MiB/s); upstream sent "
          f"{out['cold_upstream_bytes']:,.0f} bytes ({out['cold_upstream_bytes'] / size:.3f}x); "
          f"{out['cold_ranges']} ranges, {out['cold_ranges_distinct']} distinct; "
          f"byte-exact: {out['byte_exact']}")
    print(f"load_file cached   {out['cached_s']:.2f} s ({mib / out['cached_s']:.0f} MiB/s); upstream "
          f"sent {out['cached_upstream_bytes']:,.0f} more bytes")
    print(f"one tensor cold    {out['one_tensor_cold_s'] * 1000:.0f} ms (direct, open file: "
          f"{out['one_tensor_direct_s'] * 1000:.0f} ms); upstream sent "
          f"{out['one_tensor_upstream_bytes']:,.0f} bytes for a {out['one_tensor_bytes']:,}-byte tensor")
    print(f"rank 0 of 2 cold   {out['rank0_cold_s']:.2f} s; upstream sent "
          f"{out['rank0_upstream_bytes']:,.0f} bytes ({out['rank0_upstream_bytes'] / size:.3f}x the model)")


if __name__ == "__main__":
    main()
