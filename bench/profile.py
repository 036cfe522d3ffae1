#!/usr/bin/python3
"""Where tensord's time goes, per benchmark case: syscalls per request (strace -c)
and the hottest symbols (perf record -e cpu-clock; this VM has no hardware counters).

usage: /usr/bin/python3 bench/profile.py [--server tensord|nginx] [CASE...]
CASE: small header tensor4k tensor64m colslice meta (default: all)

Uses the models bench/run.py generated (run it once first). Writes the full perf
and strace reports to bench/out/profile-SERVER-CASE-*.txt and prints a summary.
strace slows the server down several times: its counts are exact, its times are not.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import clients  # noqa: E402
import models  # noqa: E402
import servers  # noqa: E402


def cases(info):
    llm, f = info["llm"], info["llm"]["file"]
    t = llm["tensors"]

    def rng(name):
        return f"bytes={t[name]['begin']}-{t[name]['begin'] + t[name]['nbytes'] - 1}"
    # name: (tensord path, tensord range, nginx path, nginx range, connections) for wrk,
    # or a callable(port, seconds) -> requests for the Python-driven cases.
    return {
        "small": (f"/v1/models/llm/files/{f}", "bytes=0-7", f"/llm/{f}", "bytes=0-7", 16),
        "header": (f"/v1/models/llm/files/{f}/header", None, f"/llm/{f}",
                   f"bytes=8-{7 + llm['header_len']}", 16),
        "tensor4k": ("/v1/models/llm/tensors/bench.4k", None, f"/llm/{f}", rng("bench.4k"), 16),
        "tensor64m": ("/v1/models/llm/tensors/bench.64m", None, f"/llm/{f}", rng("bench.64m"), 2),
        "colslice": colslice_loop,
        "meta": ("/v1/models/shard50/header", None, None, None, 1),
    }


def colslice_loop(port, seconds):
    buf = np.empty(64 << 20, dtype=np.uint8)
    conn = clients.Conn(port)
    n, t_end = 0, time.monotonic() + seconds
    while time.monotonic() < t_end:
        clients.slice_fetch_tensord(conn, "big", "w", ":,0:64", buf, (16384, 16384))
        n += 1
    conn.close()
    return n


def drive(case, port, seconds, use_nginx):
    if callable(case):
        return case(port, seconds)
    tp, tr, npth, nr, conns = case
    path, rng = (npth, nr) if use_nginx else (tp, tr)
    return clients.run_wrk(port, path, conns, seconds, rng)["requests"]


def pids_of(srv):
    return [srv.proc.pid] + servers.children(srv.proc.pid)


def with_tool(argv, case, port, seconds, use_nginx):
    """Runs `argv` (a tracer attached to the server) around one load run."""
    tool = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    n = drive(case, port, seconds, use_nginx)
    tool.send_signal(signal.SIGINT)
    tool.wait(30)
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", choices=("tensord", "nginx"), default="tensord")
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    data = os.path.join(ROOT, "build", "bench", "models", "data")
    info = models.make_data_root(data, lambda m: print(m, file=sys.stderr))
    all_cases = cases(info)
    names = args.cases or list(all_cases)
    out = os.path.join(HERE, "out")
    os.makedirs(out, exist_ok=True)
    work = os.path.join(ROOT, "build", "bench", f"prof-{os.getpid()}")
    os.makedirs(work)
    if args.server == "nginx":
        srv = servers.start_nginx(data, os.cpu_count(), work)
    else:
        srv = servers.start_tensord(os.path.join(ROOT, "build", "tensord"), data,
                                    os.cpu_count(), work)
    srv.wait_ready()
    try:
        for name in names:
            case = all_cases[name]
            if args.server == "nginx" and (callable(case) or case[2] is None):
                continue
            stamp = f"{args.server}-{name}"
            pids = pids_of(srv)
            st_path = os.path.join(out, f"profile-{stamp}-strace.txt")
            n = with_tool(["strace", "-f", "-c", "-o", st_path] +
                          [a for p in pids for a in ("-p", str(p))],
                          case, srv.port, args.seconds, args.server == "nginx")
            per_req = {}
            with open(st_path) as f:
                for line in f:
                    m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
                    if m and m.group(2) != "total":
                        per_req[m.group(2)] = int(m.group(1)) / max(n, 1)
            pf_path = os.path.join(out, f"profile-{stamp}.perf")
            n2 = with_tool(["perf", "record", "-q", "-e", "cpu-clock", "-F", "2000", "-g",
                            "-o", pf_path, "-p", ",".join(map(str, pids))],
                           case, srv.port, args.seconds, args.server == "nginx")
            rep = subprocess.run(["perf", "report", "-i", pf_path, "--stdio", "--no-children",
                                  "--sort", "dso,sym", "-g", "none"],
                                 capture_output=True, text=True).stdout
            dso = subprocess.run(["perf", "report", "-i", pf_path, "--stdio", "--no-children",
                                  "--sort", "dso", "-g", "none"],
                                 capture_output=True, text=True).stdout
            with open(os.path.join(out, f"profile-{stamp}-perf.txt"), "w") as f:
                f.write(dso + "\n" + rep)
            top = [ln.strip() for ln in rep.splitlines() if re.match(r"\s+\d+\.\d+%", ln)][:12]
            dsos = [ln.strip() for ln in dso.splitlines() if re.match(r"\s+\d+\.\d+%", ln)][:5]
            print(f"== {stamp}: {n} requests under strace, {n2} under perf")
            print("syscalls per request: " + ", ".join(
                f"{k} {v:.2f}" for k, v in sorted(per_req.items(), key=lambda kv: -kv[1])
                if v >= 0.01))
            print("CPU by object: " + "; ".join(re.sub(r"\s+", " ", d) for d in dsos))
            print("hottest symbols:\n  " + "\n  ".join(re.sub(r"\s+", " ", t) for t in top))
            sys.stdout.flush()
    finally:
        srv.stop()
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    threading.current_thread().name = "profile"
    main()
