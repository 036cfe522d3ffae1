#!/usr/bin/python3
"""Preload benchmark: tensord's preload against the machine's limits, measured
in the same run (`make bench-gpu`; docs/PERFORMANCE.md "GPU preload").

For one device (a GPU, the host backend, or the CUDA driver test double) it
generates a sharded model of BF16 tensors (cached in build/bench/preload),
and in each of --runs runs measures, back to back:

  limits   pinned host->device copy through the driver API (GPUs only);
           reading the files from the page cache with pread, one thread and
           as many threads as the preload uses; one thread copying each file
           from a fresh mmap into fresh memory (the host backend's reference);
           O_DIRECT reads at the loader's own queue depth and chunk size;
  tensord  preload cold (the files dropped from the page cache), warm (read
           into it first) and from tmpfs, each as the daemon reports it, with
           the bytes that went each way;
  peer     safetensors.torch.load_file to the GPU where torch with CUDA is
           installed (safetensors.numpy.load_file on the host), files cached;
  open     lease open latency with 1 worker and with 8 opening at once.

and prints one table of medians with the ratios that matter: warm to the
page-cache read rate and to the link, cold to O_DIRECT, tmpfs to the link,
each tensord figure to safetensors, and (host backend) warm to the one-thread
mmap copy. Without a GPU, `make bench-gpu` runs it on the host backend and on
the CUDA driver test double (whose "device" is host memory: its table shows
the code paths' costs, not a GPU's). The double runs with a modelled link
(CUDA_DOUBLE_LINK_GBPS, --link-gbps, default 2 GB/s), after one preload
that fills its pool of populated device memory, and its table measures
tensord against that link, with the CPU its copy engine used.

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

import numpy as np  # noqa: E402

import tdutil  # noqa: E402

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
    p = s["preload"]
    return {"gbps": p["bytes_per_second"] / 1e9, "seconds": p["seconds"], "io": p["io"]}


def safetensors_load(files, device):
    """The safetensors package loading every shard, files cached: to the GPU
    with safetensors.torch.load_file; on the host with
    safetensors.numpy.load_file, which reads the bytes into arrays (torch's
    CPU load maps the file and copies nothing, so it is no peer of a load
    into shared memory). (GB/s, label), or None when what it needs is
    missing (torch with CUDA for a GPU, the safetensors package)."""
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
                return None
            t0 = time.perf_counter()
            keep = [load_file(f, device=device) for f in files]
            torch.cuda.synchronize()
            secs = time.perf_counter() - t0
            label = f"safetensors.torch.load_file(device={device!r})"
    except ImportError:
        return None
    del keep
    return total / secs / 1e9, label


def open_latency(d, workers, n, env):
    """p50, p99 and max open latency (ms) with `workers` processes opening at once."""
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_WORKER, d.sock, MODEL, str(n)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(workers)]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
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


def one_run(helper, files, tmp_files, d_disk, d_tmp, a, threads):
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
    page_cache(files, True)
    row["safetensors"] = safetensors_load(files, a.device)
    return row


def med(rows, key, sub=None):
    vals = [r[key][sub] if sub else r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def table(rows, opens, a, total, threads):
    f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    ratio = lambda x, y: "-" if x is None or not y else f"{x / y:.2f}x"  # noqa: E731
    h2d, pc1, pcn = med(rows, "h2d"), med(rows, "pagecache_1"), med(rows, "pagecache_n")
    mm, direct = med(rows, "mmapcopy_1"), med(rows, "direct")
    mmw = med(rows, "mmapcopy_warm_1")
    peers = [r["safetensors"] for r in rows if r.get("safetensors")]
    st = statistics.median(p[0] for p in peers) if peers else None
    peer = peers[0][1] if peers else "safetensors (not installed)"
    cold, warm = med(rows, "cold", "gbps"), med(rows, "warm", "gbps")
    tmp = med(rows, "tmpfs", "gbps") if any("tmpfs" in r for r in rows) else None
    dev = a.device + (" (CUDA driver test double: host memory, not a GPU)" if a.double else "")
    if a.double:  # the modelled link is the limit; the copy above measures the double
        h2d = a.link_gbps
    lines = [f"tensord preload benchmark: {dev}, {total / 2**30:.2f} GiB in {a.shards} shards, "
             f"{threads} copy threads, {a.depth} disk reads of {a.chunk_mib} MiB in flight, "
             f"medians of {len(rows)} runs (GB/s)", "",
             "| path | GB/s | ratio |", "| --- | --- | --- |"]
    if a.double:
        lines += [f"| modelled link (CUDA_DOUBLE_LINK_GBPS) | {f(h2d)} | limit |",
                  f"| pinned host->device copy through the double, one 256 MiB copy at a time | "
                  f"{f(med(rows, 'h2d'))} | |"]
    elif a.device != "host":
        lines.append(f"| pinned host->device copy ({rows[0].get('h2d_device')}) | {f(h2d)} | limit |")
    lines += [f"| page cache, pread, 1 thread | {f(pc1)} | |",
              f"| page cache, pread, {threads} threads | {f(pcn)} | limit |",
              f"| mmap + memcpy into fresh memory, 1 thread | {f(mm)} | reference (host) |",
              f"| the same copy again, both mappings populated | {f(mmw)} | memory |",
              f"| O_DIRECT io_uring, depth {a.depth} x {a.chunk_mib} MiB | {f(direct)} | limit |",
              f"| {peer}, cached | {f(st)} | peer |",
              f"| **tensord, warm (page cache)** | **{f(warm)}** | {ratio(warm, pcn)} page cache"
              + (f", {ratio(warm, h2d)} link" if h2d
                 else f", {ratio(warm, mm)} mmap copy, {ratio(warm, mmw)} populated")
              + f", {ratio(warm, st)} safetensors |",
              f"| **tensord, cold (disk)** | **{f(cold)}** | {ratio(cold, direct)} O_DIRECT, "
              f"{ratio(cold, st)} safetensors |"]
    if tmp is not None:
        lines.append(f"| **tensord, tmpfs** | **{f(tmp)}** | "
                     + (f"{ratio(tmp, h2d)} link" if h2d else f"{ratio(tmp, mm)} mmap copy")
                     + f", {ratio(tmp, st)} safetensors |")
    if a.double:
        lines.append(f"| the double's copy engine during the warm preload | "
                     f"{med(rows, 'engine_core'):.2f} of a core | its own cost |")
    for w, o in opens.items():
        lines.append(f"| open, {w} worker{'s' if w > 1 else ''} at once (ms) | p50 {o['p50']:.2f}, "
                     f"p99 {o['p99']:.2f}, max {o['max']:.2f} | {o['n']} opens |")
    io = rows[-1]["cold"]["io"], rows[-1]["warm"]["io"]
    lines += ["", f"cold: {io[0]['disk_bytes']} bytes from the disk ({io[0]['disk_reads']}), "
              f"{io[0]['page_cache_bytes']} from the page cache; warm: "
              f"{io[1]['page_cache_bytes']} from the page cache ({io[1]['threads']} threads), "
              f"{io[1]['disk_bytes']} from the disk"]
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
    ap.add_argument("--threads", type=int, default=0, help="preload_threads (0: the daemon's)")
    ap.add_argument("--depth", type=int, default=4, help="staging_buffers: disk reads in flight")
    ap.add_argument("--chunk-mib", type=int, default=64, help="staging_buffer_bytes in MiB")
    ap.add_argument("--opens", type=int, default=200, help="opens per worker")
    ap.add_argument("--tmpfs", default="/dev/shm", help="where the tmpfs copy goes ('' to skip)")
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--json", help="write the raw results here")
    a = ap.parse_args()
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
    threads = a.threads or min(cpus, 16)
    bench_dir = os.path.join(build, "bench", "preload")
    mdir = write_model(os.path.join(bench_dir, "models"), size, a.shards)
    files = shard_files(mdir)
    total = sum(os.path.getsize(f) for f in files)
    args = ["--staging-buffers", str(a.depth), "--staging-buffer-bytes", f"{a.chunk_mib}M",
            "--preload-threads", str(threads), "--log-level", "warn", "--access-log", "off"]
    tmp_root = os.path.join(a.tmpfs, f"tensord-bench-preload-{os.getpid()}") if a.tmpfs else None
    d_disk = d_tmp = None
    try:
        d_disk = start_daemon(os.path.dirname(mdir), os.path.join(bench_dir, "run-disk"), args,
                              env_extra)
        tmp_files = []
        if tmp_root:
            shutil.copytree(mdir, os.path.join(tmp_root, MODEL))
            tmp_files = shard_files(os.path.join(tmp_root, MODEL))
            d_tmp = start_daemon(tmp_root, os.path.join(bench_dir, "run-tmpfs"), args, env_extra)
        if a.double:
            # A GPU's memory is there once allocated; the double's is once
            # one preload has filled its pool (first touch faults otherwise).
            page_cache(files, True)
            for d in (d_disk, d_tmp):
                if d:
                    preload(d, a.device)
                    evict(d)
        rows = []
        for i in range(a.runs):
            log(f"run {i + 1} of {a.runs}")
            rows.append(one_run(helper, files, tmp_files, d_disk, d_tmp, a, threads))
        page_cache(files, True)
        preload(d_disk, a.device)
        wenv = dict(os.environ, PYTHONPATH=os.path.join(REPO, "client", "python"),
                    TENSORD_CLIENT_LIB=os.path.join(build, "libtensord-client.so"))
        opens = {w: open_latency(d_disk, w, a.opens, wenv) for w in (1, 8)}
        evict(d_disk)
    finally:
        for d in (d_disk, d_tmp):
            if d:
                d.stop()
        if tmp_root:
            shutil.rmtree(tmp_root, ignore_errors=True)
    print(table(rows, opens, a, total, threads))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": a.device, "double": a.double, "bytes": total, "threads": threads,
                       "link_gbps": a.link_gbps if a.double else None, "runs": rows,
                       "opens": opens}, f, indent=1)


if __name__ == "__main__":
    main()
