#!/usr/bin/python3
"""tensord benchmark: `make bench` runs this file.

Generates its own models (cached in build/bench/models), starts tensord and a static
nginx on loopback ports over the same files, drives both with wrk and with small
Python clients, and prints ONE table of medians over --runs runs. Each run measures
both servers back to back, and every tensord/nginx ratio is taken within one run
before the median is taken, so slow drift of the machine cancels out.

Raw results go to bench/out/ (gitignored) as JSON, with the table as Markdown.
See docs/PERFORMANCE.md for what each figure means and what limits it.
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import clients  # noqa: E402
import models  # noqa: E402
import report  # noqa: E402
import servers  # noqa: E402

SECTIONS = ("ceil", "small", "modes", "tensor", "slice", "meta", "startup")
SMALL_CONNS = (1, 16, 256)
# Connections per tensor size: enough to keep both cores busy, few enough that the
# 64 MiB case measures streaming rather than 2 x N buffers fighting for the cache.
TENSOR_CONNS = {"bench.4k": 16, "bench.1m": 4, "bench.64m": 2}
SLICES = {"row": ("0:512,:", (0, 512), (0, models.BIG_COLS)),
          "col": (":,0:64", (0, models.BIG_ROWS), (0, 64))}
T0 = time.monotonic()
FOREIGN = []  # foreign_cpu of every wrk run, for the table's footer
RUN_INDEX = [0]  # the run in progress, 0-based


def log(msg):
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


def sh(argv):
    return subprocess.run(argv, capture_output=True, text=True).stdout.strip()


def first_line(argv):
    """First line a tool prints about itself (nginx and wrk print to stderr)."""
    p = subprocess.run(argv, capture_output=True, text=True)
    return ((p.stdout or p.stderr).strip().splitlines() or ["?"])[0]


def machine_info(tensord_bin):
    lscpu = {}
    for line in sh(["lscpu"]).splitlines():
        k, _, v = line.partition(":")
        lscpu[k.strip()] = v.strip()
    mem_kib = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    head = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    dirty = bool(sh(["git", "-C", ROOT, "status", "--porcelain", "--", "core", "server"]))
    return {
        "cpu_model": lscpu.get("Model name", "?"),
        "cpus": os.cpu_count(),
        "hypervisor": lscpu.get("Hypervisor vendor", ""),
        "kernel": platform.release(),
        "mem_gib": round(mem_kib / 2**20, 1),
        "nginx": first_line(["/usr/sbin/nginx", "-v"]),
        "wrk": first_line([clients.WRK, "--version"]),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "tensord_commit": head + ("+dirty" if dirty else ""),
        "tensord_bin": tensord_bin,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def build_helpers(outdir):
    os.makedirs(outdir, exist_ok=True)
    for name, libs in (("ceil_memcpy", []), ("ceil_sendfile", []), ("mhd_modes", ["-lmicrohttpd"])):
        src, exe = os.path.join(HERE, name + ".c"), os.path.join(outdir, name)
        deps = [src, os.path.join(HERE, "ceil.h")]
        if not os.path.exists(exe) or os.path.getmtime(exe) < max(map(os.path.getmtime, deps)):
            subprocess.run(["cc", "-O2", "-Wall", "-Wextra", "-pthread", "-o", exe, src] + libs,
                           check=True)


def ceilings(bindir, tensor_file):
    """memcpy, and loopback sendfile over 2 streams (one per core, as the servers are
    loaded) with 1 MiB reads, each stream sending the 70 MB tensor file over and over
    (512 MiB a run: long enough for TCP's buffers to grow as they do under wrk); also
    1 stream, and 8 KiB reads (wrk reads 8 KiB at a time)."""
    def run(*argv):
        return json.loads(subprocess.run(argv, capture_output=True, text=True,
                                         check=True).stdout)
    sf = os.path.join(bindir, "ceil_sendfile")
    out = {"memcpy": run(os.path.join(bindir, "ceil_memcpy"), "256", "9"),
           "sendfile": run(sf, tensor_file, "7", "1024", "2", "512"),
           "sendfile_1stream": run(sf, tensor_file, "7", "1024", "1", "512"),
           "sendfile_8k": run(sf, tensor_file, "7", "8", "2", "512")}
    log("ceilings: memcpy %.1f GB/s, loopback sendfile %.2f GB/s (1 stream %.2f, 8 KiB reads %.2f)"
        % (out["memcpy"]["median_gbps"], out["sendfile"]["median_gbps"],
           out["sendfile_1stream"]["median_gbps"], out["sendfile_8k"]["median_gbps"]))
    return out


def verify(td, ng, info):
    """The two servers must return the same bytes, or the comparison means nothing."""
    ct, cn = clients.Conn(td.port), clients.Conn(ng.port)
    llm = info["llm"]
    fpath = f"/llm/{llm['file']}"
    for name, t in llm["tensors"].items():
        _, _, a = ct.get(f"/v1/models/llm/tensors/{name}")
        _, _, b = cn.get(fpath, f"bytes={t['begin']}-{t['begin'] + t['nbytes'] - 1}")
        assert len(a) == t["nbytes"] and a == b, f"tensor {name}: tensord and nginx differ"
    _, _, a = ct.get(f"/v1/models/llm/files/{llm['file']}/header")
    _, _, b = cn.get(fpath, f"bytes=8-{7 + llm['header_len']}")
    assert a == b, "file header: tensord and nginx differ"
    _, _, a = ct.get(f"/v1/models/llm/files/{llm['file']}", "bytes=0-7")
    assert int.from_bytes(a, "little") == llm["header_len"]
    ct.close()
    cn.close()


def machine_busy_s():
    """CPU seconds the whole machine has been busy (all CPUs, steal included)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle + iowait
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def children_cpu_s():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def wait_for_quiet(max_wait_s, threshold=0.15):
    """Other people's jobs share this machine. Waits (up to max_wait_s) until the
    machine has been below `threshold` of its CPUs busy for 2 s in a row."""
    t_end = time.monotonic() + max_wait_s
    quiet = 0
    while time.monotonic() < t_end:
        b0 = machine_busy_s()
        time.sleep(1)
        frac = (machine_busy_s() - b0) / os.cpu_count()
        quiet = quiet + 1 if frac < threshold else 0
        if quiet >= 2:
            return True
    log(f"machine still busy after {max_wait_s:.0f} s of waiting; measuring anyway")
    return False


def ordered(pairs):
    """The servers in this run's order: ABBA over the runs, so drift of a shared
    machine does not always favour the one measured first."""
    pairs = list(pairs)
    return pairs[::-1] if RUN_INDEX[0] % 2 else pairs


def wrk_once(tag, srv, path, conns, seconds, rng):
    """One wrk run, with the CPU the server, wrk and everything else used meanwhile."""
    c0, b0, w0, t0 = srv.cpu_seconds(), machine_busy_s(), children_cpu_s(), time.monotonic()
    r = clients.run_wrk(srv.port, path, conns, seconds, rng)
    r["server_cpu_s"] = srv.cpu_seconds() - c0
    r["wrk_cpu_s"] = children_cpu_s() - w0
    foreign = machine_busy_s() - b0 - r["server_cpu_s"] - r["wrk_cpu_s"]
    r["foreign_cpu"] = max(0.0, foreign) / ((time.monotonic() - t0) * os.cpu_count())
    errs = sum(r["errors"].values())
    if errs:
        log(f"  WARNING {tag} {path} c={conns}: {r['errors']}")
    return r


def wrk_pair(td, ng, tpath, npath, conns, seconds, t_range=None, n_range=None):
    """Both servers for `seconds` each, interleaved in 1-second wrk runs (t n t n ...,
    or n t n t ... on odd runs), so that load from other jobs on a shared machine
    falls on both alike; a server's rate is its median slice. Server CPU is sampled around each
    slice so CPU per request can be compared, and the machine's busy time too, so
    CPU used by anything but this benchmark shows as `foreign_cpu` (fraction of all
    CPUs). Latency percentiles are the median over the slices."""
    slices = {}
    pair = ordered([("tensord", td, tpath, t_range), ("nginx", ng, npath, n_range)])
    for _ in range(seconds):
        for tag, srv, path, rng in pair:
            if srv is not None:
                slices.setdefault(tag, []).append(wrk_once(tag, srv, path, conns, 1, rng))
    out = {}
    for tag, rs in slices.items():
        r = {k: sum(x[k] for x in rs) for k in ("requests", "duration_us", "bytes",
                                                 "server_cpu_s", "wrk_cpu_s")}
        # The median slice, not the sum: one slice hit by a burst of other work (or a
        # stall) must not move the figure.
        r["rps"] = statistics.median(x["rps"] for x in rs)
        for k in ("lat_mean_us", "lat_p50_us", "lat_p90_us", "lat_p99_us", "lat_max_us"):
            r[k] = statistics.median(x[k] for x in rs)
        r["errors"] = {k: sum(x["errors"][k] for x in rs) for k in rs[0]["errors"]}
        r["foreign_cpu"] = statistics.mean(x["foreign_cpu"] for x in rs)
        r["slices"] = [{k: x[k] for k in ("requests", "duration_us", "rps", "lat_p99_us",
                                          "foreign_cpu")} for x in rs]
        r["argv"] = rs[0]["argv"]
        FOREIGN.append(r["foreign_cpu"])
        out[tag] = r
    return out


def small_reads(td, ng, info, seconds):
    llm = info["llm"]
    f = llm["file"]
    cases = {
        "range0-7": (f"/v1/models/llm/files/{f}", "bytes=0-7", f"/llm/{f}", "bytes=0-7"),
        "header": (f"/v1/models/llm/files/{f}/header", None,
                   f"/llm/{f}", f"bytes=8-{7 + llm['header_len']}"),
    }
    res = {}
    for case, (tp, tr, npth, nr) in cases.items():
        for c in SMALL_CONNS:
            key = f"{case}/c{c}"
            res[key] = wrk_pair(td, ng, tp, npth, c, seconds, tr, nr)
            log("  small %-14s %s" % (key, fmt_pair(res[key], "rps", "%.0f req/s")))
    return res


MHD_MODES = ("pool", "tpc", "select")


def mhd_modes(bindir, data_root, ng, info, threads, seconds, workdir):
    """A bare libmicrohttpd server (bench/mhd_modes.c) in each threading mode,
    answering what tensord answers to `bytes=0-7`, against nginx in the same
    interleaved slices: what libmicrohttpd itself allows on this machine."""
    f = info["llm"]["file"]
    path = os.path.join(data_root, "llm", f)
    res = {}
    for mode in MHD_MODES:
        port = servers.free_port()
        srv = servers.Server("mhd-" + mode,
                             [os.path.join(bindir, "mhd_modes"), mode, str(port), str(threads),
                              path], port, "/", os.path.join(workdir, f"mhd-{mode}.log"))
        try:
            srv.wait_ready(timeout=10, poll=0.01, ok=(206,))
            for c in SMALL_CONNS:
                key = f"{mode}/c{c}"
                res[key] = wrk_pair(srv, ng, "/", f"/llm/{f}", c, seconds, "bytes=0-7",
                                    "bytes=0-7")
                log("  modes %-11s %s" % (key, fmt_pair(res[key], "rps", "%.0f req/s")))
        finally:
            srv.stop()
    return res


def tensor_reads(td, ng, info, seconds):
    llm = info["llm"]
    res = {}
    for name, t in llm["tensors"].items():
        c = TENSOR_CONNS[name]
        rng = f"bytes={t['begin']}-{t['begin'] + t['nbytes'] - 1}"
        r = wrk_pair(td, ng, f"/v1/models/llm/tensors/{name}", f"/llm/{llm['file']}", c, seconds,
                     None, rng)
        for v in r.values():
            v["gbps"] = v["rps"] * t["nbytes"] / 1e9
        res[name] = r
        log("  tensor %-10s %s" % (name, fmt_pair(r, "gbps", "%.2f GB/s")))
    return res


def slices(td, ng, info, buf, reps):
    big = info["big"]
    shape = (big["rows"], big["cols"])
    res = {}
    for kind, (spec, rows, cols) in SLICES.items():
        entry = {}
        for tag, srv in ordered((("tensord", td), ("nginx", ng))):
            if srv is None:
                continue
            conn = clients.Conn(srv.port)
            times, rx = [], []
            for _ in range(reps):
                rx0 = conn.rx
                if tag == "tensord":
                    dt, arr = clients.timed(clients.slice_fetch_tensord, conn, "big", "w", spec,
                                            buf, shape)
                else:
                    dt, arr = clients.timed(clients.slice_fetch_static, conn,
                                            f"/big/{big['file']}", big["data_begin"], shape,
                                            rows, cols, buf)
                times.append(dt)
                rx.append(conn.rx - rx0)
                assert arr.shape == (rows[1] - rows[0], cols[1] - cols[0])
            conn.close()
            entry[tag] = {"wall_s": statistics.median(times), "times": times,
                          "bytes": statistics.median(rx), "out_bytes": arr.nbytes}
        res[kind] = entry
        log("  slice %-4s %s" % (kind, fmt_pair(entry, "wall_s", "%.4f s")))
    return res


def check_slices(td, ng, info, buf):
    """tensord's slice must equal NumPy's slice of nginx's bytes."""
    big = info["big"]
    shape = (big["rows"], big["cols"])
    ct, cn = clients.Conn(td.port), clients.Conn(ng.port)
    for kind, (spec, rows, cols) in SLICES.items():
        a = clients.slice_fetch_tensord(ct, "big", "w", spec, buf, shape).copy()
        b = clients.slice_fetch_static(cn, f"/big/{big['file']}", big["data_begin"], shape,
                                       rows, cols, buf)
        assert a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32)), \
            f"slice {spec}: tensord and NumPy-over-nginx differ"
    ct.close()
    cn.close()


def metadata(td, ng, info, reps):
    res = {}
    for tag, srv in ordered((("tensord", td), ("nginx", ng))):
        if srv is None:
            continue
        conn = clients.Conn(srv.port)
        times = []
        for _ in range(reps):
            rx0, q0 = conn.rx, conn.requests
            if tag == "tensord":
                dt, merged = clients.timed(clients.metadata_tensord, conn, "shard50")
                merged.pop("__metadata__", None)
            else:
                dt, merged = clients.timed(clients.metadata_static, conn, "/shard50",
                                           info["shard50"]["index"])
            times.append(dt)
            assert len(merged) == info["shard50"]["tensors"], (tag, len(merged))
        res[tag] = {"wall_s": statistics.median(times), "times": times,
                    "requests": conn.requests - q0, "bytes": conn.rx - rx0}
        conn.close()
    log("  meta %s" % fmt_pair(res, "wall_s", "%.4f s"))
    return res


def startup(binary, roots, workdir, threads, reps):
    res = {}
    for name, root in roots.items():
        rs = []
        for i in range(reps):
            srv = servers.start_tensord(binary, root, threads, workdir, tag=f"start-{name}-{i}")
            try:
                ready = srv.wait_ready(timeout=300)
                st = srv.proc_status()
            finally:
                srv.stop()
            rs.append({"ready_s": ready, "rss_kib": st.get("VmRSS", 0), "hwm_kib": st.get("VmHWM", 0)})
        res[name] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        res[name]["runs"] = rs
        log("  startup %-12s ready %.3f s, VmRSS %.1f MiB" % (
            name, res[name]["ready_s"], res[name]["rss_kib"] / 1024))
    return res


def fmt_pair(pair, key, fmt):
    return "  ".join(f"{k} {fmt % v[key]}" for k, v in pair.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="runs of every test (default 3)")
    ap.add_argument("--seconds", type=int, default=3, help="seconds per wrk run (default 3)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="tensord --threads and nginx worker_processes (default: CPUs)")
    ap.add_argument("--nginx-only", action="store_true", help="measure nginx alone (no tensord)")
    ap.add_argument("--only", default=",".join(SECTIONS),
                    help="comma-separated sections: " + ",".join(SECTIONS))
    ap.add_argument("--quiet-wait", type=float, default=30,
                    help="seconds to wait, before each run, for other jobs to leave the CPUs")
    ap.add_argument("--quick", action="store_true", help="1 run of 1 s: a smoke test")
    ap.add_argument("--tensord", default=os.path.join(ROOT, "build", "tensord"))
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    args = ap.parse_args()
    if args.quick:
        args.runs, args.seconds = 1, 1
    only = set(args.only.split(","))
    if only - set(SECTIONS):
        ap.error(f"unknown section(s): {sorted(only - set(SECTIONS))}")
    if not args.nginx_only and not os.access(args.tensord, os.X_OK):
        ap.error(f"{args.tensord} does not exist: run `make` first, or pass --nginx-only")

    bindir = os.path.join(ROOT, "build", "bench")
    cache = os.path.join(bindir, "models")
    work = os.path.join(bindir, "work-%d" % os.getpid())
    os.makedirs(work)
    if not args.nginx_only:
        # Others rebuild build/tensord in this checkout: measure one fixed copy.
        private = os.path.join(work, "tensord")
        shutil.copy2(args.tensord, private)
        with open(private, "rb") as f:
            tensord_sha = hashlib.sha256(f.read()).hexdigest()[:16]
        log(f"measuring {args.tensord} (sha256 {tensord_sha}, built "
            f"{time.ctime(os.path.getmtime(args.tensord))}) from a private copy")
        args.tensord = private
    build_helpers(bindir)
    info = models.make_data_root(os.path.join(cache, "data"), log)
    data_root = os.path.join(cache, "data")
    start_roots = None
    if "startup" in only and not args.nginx_only:
        start_roots = models.make_start_roots(os.path.join(cache, "start"), log)
    log("warming the page cache")
    models.warm_page_cache([data_root])

    results = {"machine": machine_info(args.tensord),
               "tensord_sha256": None if args.nginx_only else tensord_sha,
               "config": {"runs": args.runs, "seconds": args.seconds, "threads": args.threads,
                          "small_conns": SMALL_CONNS, "tensor_conns": TENSOR_CONNS,
                          "nginx_only": args.nginx_only, "sections": sorted(only)},
               "models": info, "runs": []}
    if "ceil" in only:
        wait_for_quiet(args.quiet_wait)
        results["ceilings"] = ceilings(bindir, os.path.join(data_root, "llm", info["llm"]["file"]))

    td = ng = None
    try:
        ng = servers.start_nginx(data_root, args.threads, work)
        ng.wait_ready()
        if not args.nginx_only:
            td = servers.start_tensord(args.tensord, data_root, args.threads, work)
            td.wait_ready()
            servers.wait_hashed(td)
            results["tensord_rss"] = {"ready": td.proc_status()}
            verify(td, ng, info)
        buf = None
        if "slice" in only:
            # Big enough for the covering range of a column block (the whole tensor).
            buf = np.empty(info["big"]["rows"] * info["big"]["cols"] * 4, dtype=np.uint8)
            buf[::4096] = 0  # fault it in once, outside the timings
            if td:
                check_slices(td, ng, info, buf)
        for r in range(args.runs):
            wait_for_quiet(args.quiet_wait)
            RUN_INDEX[0] = r
            log(f"run {r + 1}/{args.runs}")
            run = {}
            if "small" in only:
                run["small"] = small_reads(td, ng, info, args.seconds)
            if "modes" in only:
                run["modes"] = mhd_modes(bindir, data_root, ng, info, args.threads, args.seconds, work)
            if "tensor" in only:
                run["tensor"] = tensor_reads(td, ng, info, args.seconds)
            if "slice" in only:
                run["slice"] = slices(td, ng, info, buf, reps=5)
            if "meta" in only:
                run["meta"] = metadata(td, ng, info, reps=10)
            results["runs"].append(run)
        if td:
            # Memory held after serving every test (1.2 GB of models, 1 GiB slices):
            # it must not grow with what was served.
            results["tensord_rss"]["served"] = td.proc_status()
    finally:
        for s in (td, ng):
            if s:
                s.stop()
    if start_roots:
        log("start-up")
        results["startup"] = startup(args.tensord, start_roots, work, args.threads, reps=3)

    results["total_s"] = time.monotonic() - T0
    results["foreign_cpu"] = {"median": statistics.median(FOREIGN) if FOREIGN else None,
                              "max": max(FOREIGN) if FOREIGN else None}
    table = report.table(results)
    print(table)
    os.makedirs(args.out, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    for name in (f"results-{stamp}.json", "latest.json"):
        with open(os.path.join(args.out, name), "w") as f:
            json.dump(results, f, indent=1)
    with open(os.path.join(args.out, "latest.md"), "w") as f:
        f.write(table + "\n")
    log(f"done in {results['total_s']:.0f} s; raw results in {args.out}/results-{stamp}.json")
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
