"""The one table `make bench` prints: medians over the runs of bench/run.py.

"x" is tensord's advantage measured within each run, then the median over runs:
tensord/nginx for rates (req/s, GB/s) and nginx/tensord for times, so > 1 always
means tensord is better. "target" is the goal of issue #7 where there is one.
"""
import statistics

TARGETS = {"small": 1.2, "tensor": 1.0, "slice/col": 3.0}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def get(d, *path):
    for p in path:
        if d is None or p not in d:
            return None
        d = d[p]
    return d


def per_run(runs, section, key, server, metric):
    return [get(r, section, key, server, metric) for r in runs]


def ratios(runs, section, key, metric, higher_better=True):
    """tensord's advantage in each run (both servers measured in that run)."""
    out = []
    for r in runs:
        t, n = get(r, section, key, "tensord", metric), get(r, section, key, "nginx", metric)
        if t and n:
            out.append(t / n if higher_better else n / t)
    return out


def fx(xs):
    """Median advantage, with the spread over the runs when there are several."""
    if not xs:
        return "-"
    s = f"{statistics.median(xs):.2f}"
    return s + (f" ({min(xs):.2f}-{max(xs):.2f})" if len(xs) > 1 else "")


def f(v, fmt):
    return "-" if v is None else fmt % v


def verdict(x, target):
    if target is None or x is None:
        return ""
    return f">= {target:g}: {'met' if x >= target else 'MISSED'}"


def table(res):
    runs = res.get("runs", [])
    ceil = res.get("ceilings", {})
    # A ceiling is what the machine can do: the best run, not the median (on a shared
    # VM a median of a few runs can fall below what the servers themselves reach).
    sf = max(get(ceil, "sendfile", "runs") or [0]) or None
    mc = max(get(ceil, "memcpy", "runs") or [0]) or None
    rows = []

    def row(test, unit, t, n, xs=None, note="", target=None):
        rows.append((test, unit, t, n, fx(xs) if xs is not None else "",
                     verdict(med(xs) if xs else None, target), note))

    def rate_rows(section, cases, label_fmt, target, p99):
        """One row per case and connection count of a wrk req/s section."""
        for case, label in cases:
            for c in (1, 16, 256):
                key = f"{case}/c{c}"
                if not any(get(r, section, key) for r in runs):
                    continue
                t = med(per_run(runs, section, key, "tensord", "rps"))
                n = med(per_run(runs, section, key, "nginx", "rps"))
                note = (f"server CPU/req {f(cpu_per_req(runs, section, key, 'tensord'), '%.1f')}"
                        f" / {f(cpu_per_req(runs, section, key, 'nginx'), '%.1f')} us")
                if p99:
                    tp = med(per_run(runs, section, key, "tensord", "lat_p99_us"))
                    npp = med(per_run(runs, section, key, "nginx", "lat_p99_us"))
                    note = (f"p99 {f(tp and tp / 1000, '%.2f')} / "
                            f"{f(npp and npp / 1000, '%.2f')} ms; " + note)
                row(label_fmt.format(label=label, c=c), "req/s", f(t, "%.0f"), f(n, "%.0f"),
                    ratios(runs, section, key, "rps"), note, target)

    hlen = get(res.get("models", {}), "llm", "header_len")
    rate_rows("small", (("range0-7", "`Range: bytes=0-7` of a file"),
                        ("header", f"file header ({hlen} B): tensord `/header`, nginx Range")),
              "{label}, {c} conn", TARGETS["small"], p99=True)
    # Bare libmicrohttpd, per threading mode: "tensord" in these results is the
    # bare server (bench/mhd_modes.c), so x is its advantage over nginx.
    rate_rows("modes", (("pool", "epoll thread pool (tensord's mode)"),
                        ("tpc", "thread per connection"),
                        ("select", "external select loop, 1 thread")),
              "bare libmicrohttpd, {label}, `bytes=0-7`, {c} conn", None, p99=False)

    for name, label in (("bench.4k", "4 KiB"), ("bench.1m", "1 MiB"), ("bench.64m", "64 MiB")):
        if not any(get(r, "tensor", name) for r in runs):
            continue
        conns = get(res, "config", "tensor_conns", name)
        t = med(per_run(runs, "tensor", name, "tensord", "gbps"))
        n = med(per_run(runs, "tensor", name, "nginx", "gbps"))
        x = ratios(runs, "tensor", name, "gbps")
        tp = med(per_run(runs, "tensor", name, "tensord", "lat_p99_us"))
        npp = med(per_run(runs, "tensor", name, "nginx", "lat_p99_us"))
        note = f"p99 {f(tp and tp / 1000, '%.2f')} / {f(npp and npp / 1000, '%.2f')} ms"
        if name == "bench.4k":
            tr = med(per_run(runs, "tensor", name, "tensord", "rps"))
            nr = med(per_run(runs, "tensor", name, "nginx", "rps"))
            note += f"; {f(tr, '%.0f')} / {f(nr, '%.0f')} req/s (bound by requests, not bytes)"
        elif sf:
            note += (f"; of sendfile ceiling {f(t and 100 * t / sf, '%.0f')}% / "
                     f"{f(n and 100 * n / sf, '%.0f')}%")
        row(f"tensor {label} by name vs byte range, {conns} conn", "GB/s", f(t, "%.2f"),
            f(n, "%.2f"), x, note, TARGETS["tensor"])

    for kind, label in (("row", "row block `0:512,:` (32 MiB) of 1 GiB F32"),
                        ("col", "column block `:,0:64` (4 MiB) of 1 GiB F32")):
        if not any(get(r, "slice", kind) for r in runs):
            continue
        t = med(per_run(runs, "slice", kind, "tensord", "wall_s"))
        n = med(per_run(runs, "slice", kind, "nginx", "wall_s"))
        x = ratios(runs, "slice", kind, "wall_s", higher_better=False)
        tb = med(per_run(runs, "slice", kind, "tensord", "bytes"))
        nb = med(per_run(runs, "slice", kind, "nginx", "bytes"))
        note = f"moved {f(tb and tb / 2**20, '%.1f')} / {f(nb and nb / 2**20, '%.1f')} MiB"
        row(f"slice {label}: server-side vs fetch covering range + NumPy", "ms",
            f(t and t * 1000, "%.1f"), f(n and n * 1000, "%.1f"), x, note,
            TARGETS.get(f"slice/{kind}"))

    if any(get(r, "meta") for r in runs):
        t = med([get(r, "meta", "tensord", "wall_s") for r in runs])
        n = med([get(r, "meta", "nginx", "wall_s") for r in runs])
        x = [get(r, "meta", "nginx", "wall_s") / get(r, "meta", "tensord", "wall_s")
             for r in runs if get(r, "meta", "tensord") and get(r, "meta", "nginx")]
        tq, nq = get(runs[0], "meta", "tensord", "requests"), get(runs[0], "meta", "nginx", "requests")
        tb, nb = get(runs[0], "meta", "tensord", "bytes"), get(runs[0], "meta", "nginx", "bytes")
        row("metadata of a 50-shard model, sequential keep-alive client", "ms",
            f(t and t * 1000, "%.2f"), f(n and n * 1000, "%.2f"), x,
            f"requests {f(tq, '%d')} / {f(nq, '%d')}; "
            f"bytes {f(tb and tb / 1024, '%.0f')} / {f(nb and nb / 1024, '%.0f')} KiB")

    rss = res.get("tensord_rss", {})
    if "served" in rss:
        r0, r1 = rss["ready"], rss["served"]
        row("tensord resident set: once ready / after every test above", "MiB",
            f"{r0['VmRSS'] / 1024:.1f} / {r1['VmRSS'] / 1024:.1f}", "", None,
            f"peak {r1['VmHWM'] / 1024:.1f} MiB; the models served are 1.2 GB")

    st = res.get("startup", {})
    for name, label in (("files1000", "start-up, root of 1,000 files"),
                        ("tensors500k", "start-up, one 500k-tensor header")):
        if name in st:
            s = st[name]
            row(label, "s to ready", f"{s['ready_s']:.3f}", "", None,
                f"VmRSS {s['rss_kib'] / 1024:.1f} MiB (peak {s['hwm_kib'] / 1024:.1f})")

    def best(name):
        return max(get(ceil, name, "runs") or [0]) or None

    if mc:
        rows.append(("ceiling: memcpy, 1 thread, 256 MiB (best of 9)", "GB/s", f"{mc:.1f}", "",
                     "", "", f"median {f(get(ceil, 'memcpy', 'median_gbps'), '%.1f')}"))
    if sf:
        rows.append(("ceiling: loopback TCP sendfile -> read(1 MiB), 2 streams (best of 7)",
                     "GB/s", f"{sf:.2f}", "", "", "",
                     f"median {f(get(ceil, 'sendfile', 'median_gbps'), '%.2f')}; best with 1 "
                     f"stream {f(best('sendfile_1stream'), '%.2f')}, with 8 KiB reads as wrk "
                     f"reads {f(best('sendfile_8k'), '%.2f')}"))

    head = ("test", "unit", "tensord", "nginx / client", "x (spread over runs)", "target",
            "notes (tensord / nginx)")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    cfg = res.get("config", {})
    m = res.get("machine", {})
    lines.append("")
    lines.append(f"medians of {cfg.get('runs')} runs x {cfg.get('seconds')} s; tensord "
                 f"--threads {cfg.get('threads')}, nginx worker_processes {cfg.get('threads')}; "
                 f"{m.get('cpu_model')} ({m.get('cpus')} CPUs), kernel {m.get('kernel')}; "
                 f"tensord {m.get('tensord_commit')} (binary sha256 {res.get('tensord_sha256')}); "
                 f"total {res.get('total_s', 0):.0f} s")
    fc = res.get("foreign_cpu") or {}
    if fc.get("median") is not None:
        lines.append(f"CPU taken by other jobs during the wrk runs: median {100 * fc['median']:.0f}%, "
                     f"max {100 * fc['max']:.0f}% of the machine (0% on a quiet machine)")
    return "\n".join(lines)


def cpu_per_req(runs, section, key, server):
    """Server CPU microseconds per request (user+system, all threads/workers)."""
    vals = []
    for r in runs:
        d = get(r, section, key, server)
        if d and d.get("requests"):
            vals.append(d["server_cpu_s"] * 1e6 / d["requests"])
    return med(vals)
