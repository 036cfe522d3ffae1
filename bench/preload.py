#!/usr/bin/python3
"""Preload benchmark: tensord's preload against the machine's limits, measured
in the same run (`make bench-gpu`; docs/PERFORMANCE.md "GPU preload").

For one device (a GPU, the host backend, or the CUDA driver test double) it
generates a sharded model of BF16 tensors (cached in build/bench/preload),
and in each of --runs runs measures, back to back:

  limits   pinned host->device copy through the driver API (GPUs only): the
           link; reading the files from the page cache with pread, one
           thread and as many threads as the preload uses; one thread
           copying each file from a fresh mmap into fresh memory (the host
           backend's reference), and the same copy again into the populated
           memory; O_DIRECT reads at the loader's own queue depth and chunk
           size;
  sweep    the warm preload with each number of copy threads of --sweep
           (default: half, three quarters and all of the CPUs up to 16:
           8, 12, 16 on a 16-core host), the daemon restarted for each;
  tensord  the first preload after a daemon start (files in the page
           cache), asked for over HTTP and as a start-up preload of the
           configuration, then preloads cold (the files dropped from the page
           cache), warm (read into it first) and from tmpfs, each as the
           daemon reports it, with the bytes that went each way and, where
           the daemon reports them, the phases (preload.phases);
  peer     safetensors.torch.load_file to the GPU where torch with CUDA is
           installed (safetensors.numpy.load_file on the host), the files
           cached (the peer of warm, tmpfs and the first preload) and
           dropped from the page cache (the peer of cold);
  open     lease open latency with 1 worker and with 8 opening at once.

It prints one table of medians with the ratios that matter, each against a
named denominator (warm, tmpfs and the first preload to the link, cold to
O_DIRECT, every tensord figure to safetensors from the same place (the
page cache, or the disk for cold); on the host backend, where
there is no link, to the fresh-mmap copy and the populated copy) and the
goal of the targets of tests/gpu/verdict.py. --json writes every figure
for tests/gpu/run.sh, which judges the targets from it. Without a GPU,
`make bench-gpu` runs it on the host backend and on the CUDA driver test
double (whose "device" is host memory: its table shows the code paths'
costs, not a GPU's). The double runs with a
modelled link (CUDA_DOUBLE_LINK_GBPS, --link-gbps, default 2 GB/s), after
one preload that fills its pool of populated device memory, and its table
measures tensord against that link, with the CPU its copy engine used.

Needs only numpy (torch and safetensors optional): it also runs from
tests/gpu/run.sh on a GPU machine with nothing installed but the build.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "client", "python"))
sys.path.insert(0, os.path.join(REPO, "tests", "gpu"))

import numpy as np  # noqa: E402

import tdutil  # noqa: E402
import verdict  # noqa: E402

MODEL = "bench-preload"
TENSOR_BYTES = 64 << 20

# One worker process: opens and closes the model n times, printing the
# latency of each open in ms as one JSON line.
OPEN_WORKER = r"""
import json, sys, time, tensord
sock, model, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = tensord.connect(sock)
c.open(model).close()  # warm up
sys.stdout.write("ready\n"); sys.stdout.flush(); sys.stdin.readline()
lat = []
for _ in range(n):
    t0 = time.perf_counter()
    m = c.open(model)
    lat.append((time.perf_counter() - t0) * 1e3)
    m.close()
print(json.dumps(lat), flush=True)
"""


def log(msg):
    print(f"[preload bench] {msg}", file=sys.stderr, flush=True)


def write_model(root, size_gib, shards):
    """A sharded model of 64 MiB BF16 tensors, size_gib in all; kept when one
    of that size is already there."""
    mdir = os.path.join(root, MODEL)
    stamp = os.path.join(root, f".{MODEL}.{size_gib}x{shards}")
    if os.path.exists(stamp):
        return mdir
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(mdir)
    n_tensors = max(shards, int(size_gib * (1 << 30)) // TENSOR_BYTES)
    rng = np.random.default_rng(21)
    block = rng.integers(0, 1 << 16, TENSOR_BYTES // 2, dtype=np.uint16)
    weight_map = {}
    per = (n_tensors + shards - 1) // shards
    for s in range(shards):
        names = [f"layers.{i}.weight" for i in range(s * per, min(n_tensors, (s + 1) * per))]
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        hdr = {"__metadata__": {"format": "pt"}}
        for k, name in enumerate(names):
            hdr[name] = {"dtype": "BF16", "shape": [4096, TENSOR_BYTES // 8192],
                         "data_offsets": [k * TENSOR_BYTES, (k + 1) * TENSOR_BYTES]}
            weight_map[name] = fname
        h = json.dumps(hdr).encode()
        h += b" " * (-len(h) % 8)
        with open(os.path.join(mdir, fname), "wb") as f:
            f.write(len(h).to_bytes(8, "little") + h)
            for k, name in enumerate(names):
                block[:4] = (s, k, 7, 9)  # every tensor its own bytes
                f.write(block.tobytes())
    with open(os.path.join(mdir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": n_tensors * TENSOR_BYTES}, "weight_map": weight_map}, f)
    open(stamp, "w").close()
    return mdir


def shard_files(mdir):
    return sorted(os.path.join(mdir, f) for f in os.listdir(mdir) if f.endswith(".safetensors"))


def page_cache(files, cached):
    """Reads the files into the page cache, or writes them back and drops them."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            if cached:
                while os.read(fd, 16 << 20):
                    pass
            else:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def ceil(helper, *argv):
    out = subprocess.run([helper] + [str(a) for a in argv], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{helper} {argv[0]}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def gpu_json(d):
    return d.json(f"/v1/models/{MODEL}/gpu")


def preload(d, device):
    r = d.request("POST", f"/v1/models/{MODEL}/gpu", body=json.dumps({"device": device}).encode())
    if r.status not in (200, 202):
        raise RuntimeError(f"preload: {r.status} {r.body[:300]!r}")
    deadline = time.monotonic() + 600
    while True:
        s = gpu_json(d)
        if s["state"] in ("ready", "failed"):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"preload still {s['state']} after 600 s")
        time.sleep(0.01)
    if s["state"] != "ready":
        raise RuntimeError(f"preload failed: {s.get('reason')}")
    return s


def evict(d):
    d.request("DELETE", f"/v1/models/{MODEL}/gpu")
    deadline = time.monotonic() + 60
    while gpu_json(d)["state"] != "none" and time.monotonic() < deadline:
        time.sleep(0.01)


def engine_cpu(d):
    """CPU seconds the CUDA driver test double's copy engine thread (named
    cd-copy-engine) has used in the daemon so far: 0 before it started."""
    task = f"/proc/{d.proc.pid}/task"
    for tid in os.listdir(task):
        try:
            with open(f"{task}/{tid}/comm") as f:
                if f.read().strip() != "cd-copy-engine":
                    continue
            with open(f"{task}/{tid}/schedstat") as f:
                return int(f.read().split()[0]) / 1e9
        except OSError:
            continue
    return 0.0


def tensord_row(s):
    """A preload as GET reports it: GB/s, seconds, where the bytes came from,
    and the phases (None where the daemon does not report them)."""
    p = s["preload"]
    return {"gbps": p["bytes_per_second"] / 1e9, "seconds": p["seconds"], "io": p["io"],
            "phases": p.get("phases")}


def safetensors_load(files, device):
    """The safetensors package loading every shard, files cached: to the GPU
    with safetensors.torch.load_file; on the host with
    safetensors.numpy.load_file, which reads the bytes into arrays (torch's
    CPU load maps the file and copies nothing, so it is no peer of a load
    into shared memory). (GB/s, label), or (None, why) when what it needs
    is missing (torch with CUDA for a GPU, the safetensors package)."""
    total = sum(os.path.getsize(f) for f in files)
    try:
        if device == "host":
            try:
                import ml_dtypes  # noqa: F401  (NumPy's bfloat16, which safetensors asks for)
            except ImportError:
                pass
            from safetensors.numpy import load_file
            t0 = time.perf_counter()
            keep = [load_file(f) for f in files]
            secs = time.perf_counter() - t0
            label = "safetensors.numpy.load_file"
        else:
            import torch
            from safetensors.torch import load_file
            if not torch.cuda.is_available():
                return None, "torch sees no CUDA device"
            t0 = time.perf_counter()
            keep = [load_file(f, device=device) for f in files]
            torch.cuda.synchronize()
            secs = time.perf_counter() - t0
            label = f"safetensors.torch.load_file(device={device!r})"
    except ImportError as e:
        return None, f"{e.name or e} is not installed (pip install safetensors" + \
            ("" if device == "host" else " torch") + ")"
    del keep
    return total / secs / 1e9, label


def open_latency(d, workers, n, env):
    """p50, p99 and max open latency (ms) with `workers` processes opening at once."""
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_WORKER, d.sock, MODEL, str(n)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(workers)]
    for p in procs:
        if p.stdout.readline().strip() != "ready":
            for q in procs:
                q.kill()
            raise RuntimeError(f"an open worker did not start: {p.stderr.read()[-600:]}")
    for p in procs:  # start them together
        p.stdin.write("\n")
        p.stdin.flush()
    lat = []
    for p in procs:
        lat += json.loads(p.stdout.readline())
        p.wait()
    lat.sort()
    return {"p50": lat[len(lat) // 2], "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
            "max": lat[-1], "n": len(lat)}


def start_daemon(root, work, args, env_extra):
    os.makedirs(work, exist_ok=True)
    os.environ.update(env_extra)
    d = tdutil.Daemon(root, work, extra_args=args)
    d.start()
    d.sock = os.path.join(work, "tensord.sock")
    d.wait_hashed(timeout=1800)  # the hasher reads every file once; then the page cache is ours
    return d


def restart(d, args):
    """The same daemon (models, state directory: the hashes it keeps) started
    again with `args`, its hashes known."""
    d.stop()
    d.extra_args = list(args)
    d.start()
    d.wait_hashed(timeout=1800)


def with_threads(args, threads):
    return args + ["--preload-threads", str(threads)] if threads else args


def sweep_default(cpus):
    """Half, three quarters and all of the CPUs (at most 16): 8, 12, 16 on a
    16-core host; 1, 2 on 2 cores."""
    n = min(cpus, 16)
    return sorted({max(1, n // 2), max(1, 3 * n // 4), n})


def limits(helper, files, a, threads):
    row = {}
    if a.device != "host":
        h = ceil(helper, "h2d", 256, 5, a.device.split(":")[1] if ":" in a.device else 0)
        row["h2d"] = h.get("median_gbps")
        row["h2d_device"] = h.get("device") or h.get("error")
    page_cache(files, True)
    row["pagecache_1"] = ceil(helper, "pagecache", 1, a.chunk_mib << 20, *files)["gbps"]
    row["pagecache_n"] = ceil(helper, "pagecache", threads, a.chunk_mib << 20, *files)["gbps"]
    mm = ceil(helper, "mmapcopy", *files)
    row["mmapcopy_1"], row["mmapcopy_warm_1"] = mm["gbps"], mm["warm_gbps"]
    page_cache(files, False)
    row["direct"] = ceil(helper, "direct", a.depth, a.chunk_mib << 20, *files)["gbps"]
    return row


def one_run(helper, files, d_disk, d_tmp, a, args, threads):
    """One run: the limits, the copy-thread sweep, then tensord's preloads
    (first after a start, cold, warm, tmpfs) and the peer, back to back."""
    row = limits(helper, files, a, threads)
    row["sweep"] = {}
    for t in a.sweep:
        restart(d_disk, with_threads(args, t))
        page_cache(files, True)
        preload(d_disk, a.device)  # the first after the start: the ring is pinned by now
        evict(d_disk)
        row["sweep"][str(t)] = tensord_row(preload(d_disk, a.device))
        evict(d_disk)
    # The first preload after a start, asked for over HTTP (the ring is
    # pinned as it is queued), then as a start-up preload of the
    # configuration (the ring pinned at start).
    restart(d_disk, with_threads(args, a.threads))
    page_cache(files, True)
    row["first"] = tensord_row(preload(d_disk, a.device))
    evict(d_disk)
    restart(d_disk, with_threads(args, a.threads) + ["--preload", f"{MODEL}@{a.device}"])
    s = gpu_json(d_disk)  # /readyz answered: the start-up preload has ended
    if s["state"] != "ready":
        raise RuntimeError(f"start-up preload ended {s['state']}: {s.get('reason')}")
    row["first_configured"] = tensord_row(s)
    evict(d_disk)
    page_cache(files, False)
    row["cold"] = tensord_row(preload(d_disk, a.device))
    evict(d_disk)
    page_cache(files, True)
    cpu = engine_cpu(d_disk) if a.double else 0
    row["warm"] = tensord_row(preload(d_disk, a.device))
    if a.double:
        row["engine_core"] = (engine_cpu(d_disk) - cpu) / row["warm"]["seconds"]
    evict(d_disk)
    if d_tmp:
        row["tmpfs"] = tensord_row(preload(d_tmp, a.device))
        evict(d_tmp)
    page_cache(files, False)
    row["safetensors_cold"] = safetensors_load(files, a.device)
    page_cache(files, True)
    row["safetensors"] = safetensors_load(files, a.device)
    return row


def med(rows, key, sub=None):
    vals = [r[key][sub] if sub else r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def median_row(rows, key):
    """The run whose `key` preload is the median one (its phases and I/O
    are shown with the median figure)."""
    runs = sorted((r for r in rows if r.get(key)), key=lambda r: r[key]["gbps"])
    return runs[(len(runs) - 1) // 2][key] if runs else None


def summary(rows, opens, a, total, threads, seconds):
    """Everything the table and tests/gpu/verdict.py read: the medians by
    row name, why a row is missing, the sweep, the open latencies."""
    peers = [r["safetensors"] for r in rows if r["safetensors"][0] is not None]
    cold_peers = [r["safetensors_cold"][0] for r in rows if r["safetensors_cold"][0] is not None]
    m = {k: med(rows, k) for k in ("h2d", "pagecache_1", "pagecache_n", "mmapcopy_1",
                                   "mmapcopy_warm_1", "direct")}
    m.update({k: med(rows, k, "gbps")
              for k in ("first", "first_configured", "cold", "warm", "tmpfs")})
    if a.double:  # the modelled link is the limit; the copy above measures the double
        m["h2d_double"], m["h2d"] = m["h2d"], a.link_gbps
        m["engine_core"] = med(rows, "engine_core")
    m["safetensors"] = statistics.median(p[0] for p in peers) if peers else None
    m["safetensors_cold"] = statistics.median(cold_peers) if cold_peers else None
    missing = {}
    if a.device == "host":
        missing["h2d"] = "needs a GPU: the host backend has no link"
    elif m["h2d"] is None:
        missing["h2d"] = f"no pinned copy: {rows[0].get('h2d_device')}"
    if not peers:
        missing["safetensors"] = missing["safetensors_cold"] = rows[0]["safetensors"][1]
    if not a.tmpfs:
        missing["tmpfs"] = "no tmpfs copy (--tmpfs '')"
    sweep = {t: statistics.median(r["sweep"][t]["gbps"] for r in rows) for t in rows[0]["sweep"]}
    warm = median_row(rows, "warm")
    return {
        "device": a.device, "double": a.double, "link_gbps": a.link_gbps if a.double else None,
        "device_name": rows[0].get("h2d_device") if a.device != "host" else "host backend",
        "bytes": total, "shards": a.shards, "threads": threads, "depth": a.depth,
        "chunk_bytes": a.chunk_mib << 20, "runs_n": len(rows), "seconds": seconds,
        "median": m, "missing": missing,
        "peer": peers[0][1] if peers else f"safetensors ({missing['safetensors']})",
        "warm_preload": warm and {k: warm[k] for k in ("gbps", "seconds", "phases", "io")},
        "first_preload": median_row(rows, "first"),
        "sweep": sweep, "sweep_best": max(sweep, key=sweep.get) if sweep else None,
        "opens": {str(w): o for w, o in opens.items()},
        "runs": rows,
    }


DENOMINATOR = {"h2d": "link", "direct": "O_DIRECT", "safetensors": "safetensors",
               "safetensors_cold": "safetensors from the disk",
               "mmapcopy_1": "fresh-mmap copy", "mmapcopy_warm_1": "populated copy",
               "pagecache_n": "page cache"}


def ratios(s, key, dens):
    """'0.58x link, 6.40x safetensors' for row `key` against the rows
    `dens` that were measured."""
    m = s["median"]
    return ", ".join(f"{m[key] / m[d]:.2f}x {DENOMINATOR[d]}" for d in dens
                     if m.get(key) is not None and m.get(d))


def table(s):
    """The benchmark's table: one row per path, GB/s, the ratios against
    named denominators, and the targets' goals (tests/gpu/verdict.py)."""
    m, a_host = s["median"], s["device"] == "host"
    f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    goal = lambda k: ", ".join(f"{g}x {DENOMINATOR[d]}" for d, g in verdict.goals(k))  # noqa: E731
    # The denominators a tensord row is shown against: the link on a GPU,
    # the host backend's two references where there is none.
    link = ["mmapcopy_1", "mmapcopy_warm_1"] if a_host else ["h2d"]
    rows = []  # (path, GB/s, ratios, goal)
    if s["double"]:
        rows += [("modelled link (CUDA_DOUBLE_LINK_GBPS)", f(m["h2d"]), "limit: the link", ""),
                 ("pinned host->device copy through the double, one 256 MiB copy at a time",
                  f(m["h2d_double"]), "", "")]
    elif not a_host:
        rows.append((f"pinned host->device copy ({s['device_name']})", f(m["h2d"]),
                     "limit: the link", ""))
    rows += [
        ("page cache, pread, 1 thread", f(m["pagecache_1"]), "", ""),
        (f"page cache, pread, {s['threads']} threads", f(m["pagecache_n"]), "limit of the reads", ""),
        ("mmap + memcpy into fresh memory, 1 thread", f(m["mmapcopy_1"]),
         "reference (host): a process loading the files", ""),
        ("the same copy again, both mappings populated", f(m["mmapcopy_warm_1"]),
         "the memory's rate", ""),
        (f"O_DIRECT io_uring, depth {s['depth']} x {s['chunk_bytes'] >> 20} MiB", f(m["direct"]),
         "limit of the disk", ""),
        (f"{s['peer']}, cached", f(m["safetensors"]), "peer of warm, tmpfs, first", ""),
        (f"{s['peer']}, files dropped from the page cache", f(m["safetensors_cold"]),
         "peer of cold", ""),
        ("**tensord, warm (page cache)**", f"**{f(m['warm'])}**",
         ratios(s, "warm", link + ["pagecache_n", "safetensors"]), goal("warm")),
        ("**tensord, first preload after a start (page cache)**", f"**{f(m['first'])}**",
         ratios(s, "first", link + ["safetensors"]), goal("first")),
        ("tensord, the same as a start-up preload (`preload =`)", f(m["first_configured"]),
         ratios(s, "first_configured", link + ["safetensors"]), ""),
        ("**tensord, cold (disk)**", f"**{f(m['cold'])}**",
         ratios(s, "cold", ["direct", "safetensors_cold"]), goal("cold")),
    ]
    if m["tmpfs"] is not None:
        rows.append(("**tensord, tmpfs**", f"**{f(m['tmpfs'])}**",
                     ratios(s, "tmpfs", link + ["safetensors"]), goal("tmpfs")))
    if s["double"] and m.get("engine_core") is not None:
        rows.append(("the double's copy engine during the warm preload",
                     f"{m['engine_core']:.2f} of a core", "its own cost", ""))
    for t, g in s["sweep"].items():
        rows.append((f"tensord, warm, {t} copy thread{'s' if int(t) > 1 else ''}", f(g),
                     "best of the sweep" if t == s["sweep_best"] else "", ""))
    for w, o in s["opens"].items():
        rows.append((f"open, {w} worker{'s' if int(w) > 1 else ''} at once (ms)",
                     f"p50 {o['p50']:.2f}, p99 {o['p99']:.2f}, max {o['max']:.2f}",
                     f"{o['n']} opens", "p50 < 5, p99 < 20"))
    dev = s["device"] + (" (CUDA driver test double: host memory, not a GPU)" if s["double"] else "")
    lines = [f"tensord preload benchmark: {dev}, {s['bytes'] / 2**30:.2f} GiB in {s['shards']} "
             f"shards, {s['threads']} copy threads, {s['depth']} disk reads of "
             f"{s['chunk_bytes'] >> 20} MiB in flight, medians of {s['runs_n']} runs (GB/s), "
             f"{s['seconds']:.0f} s", "",
             "| path | GB/s | ratio | goal |", "| --- | --- | --- | --- |"]
    lines += [f"| {p} | {g} | {r} | {o} |" for p, g, r, o in rows]
    last = s["runs"][-1]
    io = last["cold"]["io"], last["warm"]["io"]
    lines += ["", f"cold: {io[0]['disk_bytes']} bytes from the disk ({io[0]['disk_reads']}), "
              f"{io[0]['page_cache_bytes']} from the page cache; warm: "
              f"{io[1]['page_cache_bytes']} from the page cache ({io[1]['threads']} threads), "
              f"{io[1]['disk_bytes']} from the disk",
              f"warm preload (median run): {verdict.phases_text((s['warm_preload'] or {}).get('phases'))}",
              f"first preload after a start (median run): "
              f"{verdict.phases_text((s['first_preload'] or {}).get('phases'))}"]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="host", help="host, cuda:N (default host)")
    ap.add_argument("--double", action="store_true",
                    help="run cuda:0 on the CUDA driver test double (build/cuda-double)")
    ap.add_argument("--link-gbps", type=float, default=2.0,
                    help="the double's modelled host->device link in GB/s (default 2)")
    ap.add_argument("--size-gib", type=float, default=None,
                    help="model size (default 16 on a GPU, 2 on the host, 1 on the double)")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0,
                    help="preload_threads of the main rows (0: the daemon's own rule)")
    ap.add_argument("--sweep", default=None,
                    help="preload_threads values to sweep, comma-separated ('' for none; "
                         "default: half, three quarters and all of the CPUs, at most 16)")
    ap.add_argument("--depth", type=int, default=4, help="staging_buffers: disk reads in flight")
    ap.add_argument("--chunk-mib", type=int, default=64, help="staging_buffer_bytes in MiB")
    ap.add_argument("--opens", type=int, default=200, help="opens per worker")
    ap.add_argument("--tmpfs", default="/dev/shm", help="where the tmpfs copy goes ('' to skip)")
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--json", help="write every figure here (tests/gpu/verdict.py reads it)")
    a = ap.parse_args()
    t_start = time.monotonic()
    if a.double:
        a.device = "cuda:0"
    size = a.size_gib or (1 if a.double else 2 if a.device == "host" else 16)
    build = os.path.join(REPO, a.build)
    helper = os.path.join(build, "bench", "ceil_preload")
    os.environ["TENSORD_BIN"] = os.path.join(build, "tensord")
    env_extra = {}
    if a.double:
        env_extra = {"LD_LIBRARY_PATH": os.path.join(build, "cuda-double"),
                     "CUDA_DOUBLE_MEM_MB": str(int(size * 1024 * 2 + 1024)),
                     "CUDA_DOUBLE_LINK_GBPS": str(a.link_gbps)}
    cpus = len(os.sched_getaffinity(0))
    a.sweep = sweep_default(cpus) if a.sweep is None else \
        [int(t) for t in a.sweep.split(",") if t.strip()]
    bench_dir = os.path.join(build, "bench", "preload")
    mdir = write_model(os.path.join(bench_dir, "models"), size, a.shards)
    files = shard_files(mdir)
    total = sum(os.path.getsize(f) for f in files)
    # Hashing is waited for before anything is timed: half the CPUs make
    # that wait short on a big host.
    args = ["--staging-buffers", str(a.depth), "--staging-buffer-bytes", f"{a.chunk_mib}M",
            "--hash-threads", str(max(2, cpus // 2)),
            "--log-level", "warn", "--access-log", "off"]
    tmp_root = os.path.join(a.tmpfs, f"tensord-bench-preload-{os.getpid()}") if a.tmpfs else None
    d_disk = d_tmp = None
    try:
        d_disk = start_daemon(os.path.dirname(mdir), os.path.join(bench_dir, "run-disk"),
                              with_threads(args, a.threads), env_extra)
        if tmp_root:
            shutil.copytree(mdir, os.path.join(tmp_root, MODEL))
            d_tmp = start_daemon(tmp_root, os.path.join(bench_dir, "run-tmpfs"),
                                 with_threads(args, a.threads), env_extra)
            # Its first preload pins the ring (and, on the double, fills its
            # pool of device memory): not one of the timed ones.
            preload(d_tmp, a.device)
            evict(d_tmp)
        # The copy threads the daemon's own rule gives (the page-cache limit
        # is measured with as many). On the double this first preload also
        # fills the pool: a GPU's memory is there once allocated, the
        # double's once touched.
        page_cache(files, True)
        threads = preload(d_disk, a.device)["preload"]["io"]["threads"]
        evict(d_disk)
        rows = []
        for i in range(a.runs):
            log(f"run {i + 1} of {a.runs}")
            rows.append(one_run(helper, files, d_disk, d_tmp, a, args, threads))
        page_cache(files, True)
        preload(d_disk, a.device)
        wenv = dict(os.environ, PYTHONPATH=os.pathsep.join(
                        p for p in (os.path.join(REPO, "client", "python"),
                                    os.environ.get("PYTHONPATH")) if p),
                    TENSORD_CLIENT_LIB=os.path.join(build, "libtensord-client.so"))
        opens = {w: open_latency(d_disk, w, a.opens, wenv) for w in (1, 8)}
        evict(d_disk)
    finally:
        for d in (d_disk, d_tmp):
            if d:
                d.stop()
        if tmp_root:
            shutil.rmtree(tmp_root, ignore_errors=True)
    s = summary(rows, opens, a, total, threads, time.monotonic() - t_start)
    print(table(s))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(s, f, indent=1)


if __name__ == "__main__":
    main()
