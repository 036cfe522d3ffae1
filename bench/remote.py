#!/usr/bin/python3
"""Remote tensors benchmark: `make bench-remote` runs this file.

On one machine, in one run, with every file in the page cache:

1. Whole-model load of a 2 GiB sharded model (4 shards, llama-like F16
   tensors) into NumPy arrays:
   - tensord.load_file against tensord (parallel ranged reads);
   - (a) huggingface_hub.hf_hub_download of each shard (8 at a time, as
     snapshot_download does) from nginx made to look like the Hub (the
     resolve route and X-Repo-Commit), then safetensors.numpy.load_file;
   - (b) aria2c -x8 -s8 of the shards from nginx, then safetensors.numpy.load_file;
   - (c) safetensors.numpy.load_file of the local files: the ceiling of any
     loader that ends with NumPy arrays;
   and the loopback sendfile ceiling (bench/ceil_sendfile.c, 2 streams).
2. Tensor-parallel fetch, world 4: tensord.load_file(split=...) for each
   rank (bytes on the wire, time) against fetching the whole model with
   tensord.load_file and cutting it with numpy.array_split.
3. get_slice of a column block (":, 0:64" of the 1 GiB F32 [16384, 16384]
   tensor of `make bench`) through tensord.safe_open, against fetching the
   covering byte range from nginx and slicing it with NumPy.

Medians over --runs runs; raw results in bench/out/remote-DATE.json and the
table in bench/out/remote-latest.md. See docs/PERFORMANCE.md.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "client", "python"))

import clients  # noqa: E402
import models  # noqa: E402
import run as benchrun  # noqa: E402
import servers  # noqa: E402
import tensord  # noqa: E402

REPO = "bench/sharded2g"          # the Hub repo id nginx pretends to serve
COMMIT = "0123456789abcdef0123456789abcdef01234567"
HIDDEN, FFN, VOCAB, LAYERS = 4096, 8192, 8192, 6
# Tensor parallelism, Megatron style: column-parallel weights cut on dim 0,
# row-parallel ones on dim 1, norms replicated.
RULES = [{"match": "model.layers.*.self_attn.[qkv]_proj.weight", "dim": 0},
         {"match": "model.layers.*.self_attn.o_proj.weight", "dim": 1},
         {"match": "model.layers.*.mlp.gate_proj.weight", "dim": 0},
         {"match": "model.layers.*.mlp.up_proj.weight", "dim": 0},
         {"match": "model.layers.*.mlp.down_proj.weight", "dim": 1},
         {"match": "model.embed_tokens.weight", "dim": 0},
         {"match": "lm_head.weight", "dim": 0}]
WORLD = 4
log = benchrun.log


def sharded2g_tensors():
    t = [("model.embed_tokens.weight", "F16", (VOCAB, HIDDEN))]
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        t += [(p + "input_layernorm.weight", "F32", (HIDDEN,)),
              (p + "self_attn.q_proj.weight", "F16", (HIDDEN, HIDDEN)),
              (p + "self_attn.k_proj.weight", "F16", (HIDDEN, HIDDEN)),
              (p + "self_attn.v_proj.weight", "F16", (HIDDEN, HIDDEN)),
              (p + "self_attn.o_proj.weight", "F16", (HIDDEN, HIDDEN)),
              (p + "post_attention_layernorm.weight", "F32", (HIDDEN,)),
              (p + "mlp.gate_proj.weight", "F16", (FFN, HIDDEN)),
              (p + "mlp.up_proj.weight", "F16", (FFN, HIDDEN)),
              (p + "mlp.down_proj.weight", "F16", (HIDDEN, FFN))]
    t += [("model.norm.weight", "F32", (HIDDEN,)), ("lm_head.weight", "F16", (VOCAB, HIDDEN))]
    return t


def make_sharded2g(d):
    """The 2 GiB model in 4 shards with an index, as <d>/bench/sharded2g (the
    Hub-like path nginx serves) with <d>/sharded2g -> it for tensord."""
    stamp = f"{models.GEN_VERSION} sharded2g {HIDDEN} {FFN} {VOCAB} {LAYERS}"
    mdir = os.path.join(d, REPO)
    if models._stamp_ok(d, stamp):
        return mdir
    log(f"generating the 2 GiB sharded model in {mdir} (cached for later runs)")
    models._fresh(d)
    os.makedirs(mdir)
    tensors = sharded2g_tensors()
    per = -(-len(tensors) // 4)
    src = models.PatternSource(seed=21)
    weight_map, total = {}, 0
    for s in range(4):
        part = tensors[s * per:(s + 1) * per]
        fname = f"model-{s + 1:05d}-of-00004.safetensors"
        models.write_safetensors(os.path.join(mdir, fname), part, src, {"format": "pt"})
        for name, dt, shape in part:
            weight_map[name] = fname
            total += models.tensor_nbytes(dt, shape)
    with open(os.path.join(mdir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    models._write_stamp(d, stamp)
    return mdir


HUB_LOCATION = """\
        location ~ ^/(?<repo>[^/]+/[^/]+)/resolve/[^/]+/(?<path>.+)$ {{
            alias {root}/$repo/$path;
            add_header X-Repo-Commit {commit} always;
        }}
        location / {{ }}"""


def start_hub_nginx(root, workers, workdir):
    """nginx over root, with the Hub's resolve route and X-Repo-Commit header
    (what hf_hub_download needs), and plain paths for aria2c."""
    prefix = os.path.join(workdir, "nginx")
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.makedirs(os.path.join(prefix, sub), exist_ok=True)
    port = servers.free_port()
    conf = servers.NGINX_CONF.replace("        location / {{ }}", HUB_LOCATION)
    with open(os.path.join(prefix, "nginx.conf"), "w") as f:
        f.write(conf.format(workers=workers, prefix=prefix, port=port, root=os.path.abspath(root),
                            commit=COMMIT))
    argv = [servers.NGINX, "-p", prefix, "-c", os.path.join(prefix, "nginx.conf"),
            "-e", os.path.join(prefix, "error.log")]
    return servers.Server("nginx", argv, port, f"/{REPO}/model.safetensors.index.json",
                          os.path.join(workdir, "nginx.log"))


def shard_names(mdir):
    return sorted(f for f in os.listdir(mdir) if f.endswith(".safetensors"))


def load_local(paths):
    import safetensors.numpy
    out = {}
    for p in paths:
        out.update(safetensors.numpy.load_file(p))
    return out


def check_same(got, want):
    assert got.keys() == want.keys(), "different tensor names"
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, k
        assert np.array_equal(got[k].view(np.uint8), want[k].view(np.uint8)), k


def nbytes(d):
    return sum(a.nbytes for a in d.values())


# ---- the contenders ---------------------------------------------------------

def via_tensord(td_url, connections):
    return tensord.load_file(td_url, connections=connections, progress=False)


def via_hub(ng_port, mdir, scratch):
    from huggingface_hub import hf_hub_download
    shutil.rmtree(scratch, ignore_errors=True)
    endpoint = f"http://127.0.0.1:{ng_port}"
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        paths = list(ex.map(lambda fn: hf_hub_download(
            REPO, fn, endpoint=endpoint, cache_dir=scratch, token=False), shard_names(mdir)))
    return load_local(paths)


def via_aria2(ng_port, mdir, scratch):
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    urls = os.path.join(scratch, "urls.txt")
    with open(urls, "w") as f:
        for fn in shard_names(mdir):
            f.write(f"http://127.0.0.1:{ng_port}/{REPO}/{fn}\n")
    p = subprocess.run(["aria2c", "-q", "-x8", "-s8", "-k1M", "-j4", "--file-allocation=none",
                        "--allow-overwrite=true", "--auto-file-renaming=false", "-d", scratch,
                        "-i", urls], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"aria2c failed: {p.stdout} {p.stderr}")
    return load_local(os.path.join(scratch, fn) for fn in shard_names(mdir))


def split_whole(whole, rules, world, rank):
    import fnmatch
    out = {}
    for k, a in whole.items():
        r = next((r for r in rules if fnmatch.fnmatchcase(k, r["match"])), None)
        out[k] = np.ascontiguousarray(np.array_split(a, world, axis=r["dim"])[rank]) \
            if r and a.ndim else a
    return out


def timed(fn, *a):
    t0 = time.perf_counter()
    out = fn(*a)
    return time.perf_counter() - t0, out


def metric(td, endpoint):
    c = clients.Conn(td.port)
    _, _, body = c.get("/metrics")
    c.close()
    for line in bytes(body).decode().splitlines():
        if line.startswith(f'tensord_http_response_bytes_total{{endpoint="{endpoint}"}}'):
            return float(line.split()[-1])
    return 0.0


def med(xs):
    return statistics.median(xs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="tensord --threads, nginx workers")
    ap.add_argument("--connections", type=int, default=8, help="tensord.load_file connections")
    ap.add_argument("--quiet-wait", type=float, default=30)
    ap.add_argument("--tensord", default=os.path.join(ROOT, "build", "tensord"))
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    ap.add_argument("--skip", default="", help="comma-separated: hub,aria2,slice")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    if shutil.which("aria2c") is None and "aria2" not in skip:
        ap.error("aria2c is not installed (make deps installs aria2), or pass --skip aria2")

    bindir = os.path.join(ROOT, "build", "bench")
    work = tempfile.mkdtemp(prefix="remote-", dir=bindir if os.path.isdir(bindir) else None)
    private = os.path.join(work, "tensord")
    shutil.copy2(args.tensord, private)  # others rebuild build/tensord: measure a copy
    benchrun.build_helpers(bindir)
    cache = os.path.join(bindir, "models")
    root = os.path.join(cache, "remote")
    mdir = make_sharded2g(root)
    info = models.make_data_root(os.path.join(cache, "data"), log) if "slice" not in skip else None
    # tensord serves the cache: the model is "remote/bench/sharded2g" and the
    # slice test's tensor make bench's "data/big"
    troot = cache
    log("warming the page cache")
    models.warm_page_cache([mdir] + ([os.path.join(cache, "data", "big")] if info else []))
    paths = [os.path.join(mdir, f) for f in shard_names(mdir)]
    results = {"machine": benchrun.machine_info(private), "runs": args.runs,
               "connections": args.connections, "threads": args.threads,
               "model_bytes": sum(os.path.getsize(p) for p in paths), "whole": {}, "tp": {},
               "slice": {}}
    benchrun.wait_for_quiet(args.quiet_wait)
    sf = os.path.join(bindir, "ceil_sendfile")
    ceil = json.loads(subprocess.run([sf, paths[0], "7", "1024", "2", "512"], capture_output=True,
                                     text=True, check=True).stdout)
    # The best run is the ceiling, as make bench reports it (the loopback
    # figure swings with the VM's neighbours); the median is kept too.
    results["ceil_sendfile_gbps"] = max(ceil["runs"])
    results["ceil_sendfile_median_gbps"] = ceil["median_gbps"]
    log(f"loopback sendfile ceiling: {max(ceil['runs']):.2f} GB/s (median {ceil['median_gbps']:.2f})")

    td = ng = None
    try:
        td = servers.start_tensord(private, troot, args.threads, work)
        td.wait_ready()
        ng = start_hub_nginx(root, args.threads, work)
        ng.wait_ready()
        td_url = f"http://127.0.0.1:{td.port}/v1/models/remote/{REPO}"
        ref = load_local(paths)
        nb = nbytes(ref)
        results["tensor_bytes"] = nb
        check_same(via_tensord(td_url, args.connections), ref)
        contenders = [("tensord.load_file", lambda: via_tensord(td_url, args.connections)),
                      ("local safetensors.numpy.load_file (c)", lambda: load_local(paths))]
        if "hub" not in skip:
            check_same(via_hub(ng.port, mdir, os.path.join(work, "hf")), ref)
            contenders.append(("hf_hub_download + safetensors (a)",
                               lambda: via_hub(ng.port, mdir, os.path.join(work, "hf"))))
        if "aria2" not in skip:
            check_same(via_aria2(ng.port, mdir, os.path.join(work, "aria2")), ref)
            contenders.append(("aria2c -x8 + safetensors (b)",
                               lambda: via_aria2(ng.port, mdir, os.path.join(work, "aria2"))))
        del ref
        times = {name: [] for name, _ in contenders}

        def settle():
            # The downloaders leave 2 GiB of dirty page cache behind: drop
            # their files (an unlinked file's dirty pages are not written
            # back) and let writeback finish, so that none of it lands in the
            # next contender's time.
            for d in ("hf", "aria2"):
                shutil.rmtree(os.path.join(work, d), ignore_errors=True)
            os.sync()
            benchrun.wait_for_quiet(args.quiet_wait)
        for r in range(args.runs):
            order = contenders if r % 2 == 0 else contenders[::-1]
            for name, fn in order:
                settle()
                t, out = timed(fn)
                times[name].append(t)
                del out
                log(f"run {r + 1}: {name}: {t:.3f} s")
        settle()
        for name, ts in times.items():
            results["whole"][name] = {"s": ts, "median_s": med(ts), "gbps": nb / med(ts) / 1e9}

        # Tensor parallelism: each rank's fetch against the whole model
        # (tensord.load_file), then cut with numpy.array_split into contiguous
        # parts (what a rank does without the split fetch).
        split = {"world": WORLD, "rank": 0, "rules": RULES}
        load_ts, split_ts, rank_ts, rank_bytes = [], [], {r: [] for r in range(WORLD)}, {}
        for r in range(args.runs):
            benchrun.wait_for_quiet(args.quiet_wait)
            t0 = time.perf_counter()
            whole = via_tensord(td_url, args.connections)
            t1 = time.perf_counter()
            parts = [split_whole(whole, RULES, WORLD, k) for k in range(WORLD)]
            load_ts.append(t1 - t0)
            split_ts.append(time.perf_counter() - t0)
            want = parts if r == 0 else None
            del whole, parts
            for rank in range(WORLD):
                b0 = metric(td, "fetch")
                t, got = timed(tensord.load_file, td_url, "numpy", None,
                               dict(split, rank=rank), "cpu")
                rank_ts[rank].append(t)
                rank_bytes[rank] = metric(td, "fetch") - b0
                log(f"run {r + 1}: rank {rank}: {t:.3f} s, {rank_bytes[rank] / 2**20:.0f} MiB")
                if want:
                    check_same(got, want[rank])
                del got
            del want
        results["tp"] = {"whole_load_s": load_ts, "whole_median_s": med(load_ts),
                         "whole_then_split_s": split_ts, "split_median_s": med(split_ts),
                         "ranks": {rank: {"s": rank_ts[rank], "median_s": med(rank_ts[rank]),
                                          "bytes": rank_bytes[rank],
                                          "x_of_whole": med(rank_ts[rank]) / med(load_ts)}
                                   for rank in range(WORLD)}}

        if info:
            big = info["big"]
            rows, cols = big["rows"], big["cols"]
            burl = f"http://127.0.0.1:{td.port}/v1/models/data/big"
            a_ts, b_ts = [], []
            with tensord.safe_open(burl, "numpy", connections=args.connections) as f:
                s = f.get_slice("w")
                for r in range(args.runs * 3):
                    t, block = timed(lambda: s[:, 0:64])
                    a_ts.append(t)
            # the covering byte range from nginx over make bench's data root
            buf = np.empty(rows * cols * 4, np.uint8)
            buf[::4096] = 0
            ng2 = servers.start_nginx(os.path.join(cache, "data"), args.threads,
                                      os.path.join(work, "n2"))
            try:
                ng2.wait_ready()
                conn = clients.Conn(ng2.port)
                for r in range(args.runs * 3):
                    t, blk = timed(clients.slice_fetch_static, conn, "/big/model.safetensors",
                                   big["data_begin"], (rows, cols), (0, rows), (0, 64), buf)
                    b_ts.append(t)
                conn.close()
                assert np.array_equal(blk.view(np.uint8), block.view(np.uint8))
            finally:
                ng2.stop()
            results["slice"] = {"tensord_get_slice_s": a_ts, "covering_range_s": b_ts,
                                "x": med(b_ts) / med(a_ts), "moved_tensord": rows * 64 * 4,
                                "moved_covering": ((rows - 1) * cols + 64) * 4}
    finally:
        for srv in (td, ng):
            if srv:
                srv.stop()
    results["foreign_cpu"] = benchrun.FOREIGN
    table = report(results)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    with open(os.path.join(args.out, f"remote-{stamp}.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "remote-latest.md"), "w") as f:
        f.write(table + "\n")
    shutil.rmtree(work, ignore_errors=True)


def report(res):
    nb = res["tensor_bytes"]
    ceil = res["ceil_sendfile_gbps"]
    lines = ["| test | time (median) | GB/s | notes |", "| --- | --- | --- | --- |"]
    w = res["whole"]
    td = w["tensord.load_file"]
    for name, r in w.items():
        note = ""
        if name != "tensord.load_file":
            note = f"tensord.load_file is {r['median_s'] / td['median_s']:.2f}x faster"
        else:
            note = (f"{r['gbps'] / ceil:.2f}x the loopback sendfile ceiling ({ceil:.2f} GB/s, "
                    f"best of 7; median {res['ceil_sendfile_median_gbps']:.2f}); best run "
                    f"{nb / min(r['s']) / 1e9:.2f} GB/s; {res['connections']} connections")
        lines.append(f"| whole model ({nb / 2**30:.2f} GiB, 4 shards) into NumPy: {name} | "
                     f"{r['median_s']:.3f} s | {r['gbps']:.2f} | {note} |")
    tp = res["tp"]
    for rank, r in tp["ranks"].items():
        lines.append(f"| tensor-parallel fetch, world {WORLD}, rank {rank} | {r['median_s']:.3f} s | "
                     f"{r['bytes'] / r['median_s'] / 1e9:.2f} | {r['bytes'] / 2**20:.0f} MiB moved "
                     f"({r['bytes'] / nb:.3f} of the model); {r['x_of_whole']:.2f}x the whole "
                     f"model's load ({tp['whole_median_s']:.3f} s; whole then array_split "
                     f"into contiguous parts {tp['split_median_s']:.3f} s) |")
    if res.get("slice"):
        s = res["slice"]
        lines.append(f"| get_slice `[:, 0:64]` of F32 [16384, 16384] vs covering range from "
                     f"nginx + NumPy | {med(s['tensord_get_slice_s']) * 1e3:.1f} ms vs "
                     f"{med(s['covering_range_s']) * 1e3:.1f} ms |  | {s['x']:.1f}x; moved "
                     f"{s['moved_tensord'] / 2**20:.1f} / {s['moved_covering'] / 2**20:.1f} MiB |")
    m = res["machine"]
    lines.append("")
    lines.append(f"{res['runs']} runs; tensord --threads {res['threads']}, nginx "
                 f"worker_processes {res['threads']}; {m.get('cpu_model')} ({m.get('cpus')} CPUs), "
                 f"kernel {m.get('kernel')}; tensord {m.get('tensord_commit')}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
