#!/usr/bin/python3
"""Lease throughput and worker memory on the host backend (issue 12).

Starts a daemon on a generated model (64 tensors, 4 MiB), preloads it on
the host backend, then from one worker process (the Python binding over
libtensord-client.so):

- opens and closes the model as fast as it can for --seconds, touching one
  array each time: leases opened and closed per second;
- runs 1,000 open/close cycles (arrays made and dropped each time) and
  samples the worker's and the daemon's VmRSS every 100 cycles: both must
  stay flat.

`make bench-leases` runs it. Figures depend on the machine's load: say
what else ran when quoting them."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "client", "python"))

import numpy as np  # noqa: E402

import tdutil  # noqa: E402
from tdutil import gen_models  # noqa: E402

WORKER = r"""
import json, sys, time, tensord
sock, seconds, cycles = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
def rss():
    with open("/proc/self/status") as f:
        return [int(l.split()[1]) for l in f if l.startswith("VmRSS")][0]
c = tensord.connect(sock)
for _ in range(50):                       # warm up (imports, first maps)
    m = c.open("bench-lease"); m["t.0"].sum(); m.close()
n, t0 = 0, time.monotonic()
while time.monotonic() - t0 < seconds:
    m = c.open("bench-lease"); m["t.0"][0]; m.close(); n += 1
rate = n / (time.monotonic() - t0)
samples = []
for i in range(cycles + 1):
    if i % 100 == 0:
        print(json.dumps({"cycle": i, "rss_kib": rss()}), flush=True)
        sys.stdin.readline()              # the harness samples the daemon
    if i < cycles:
        m = c.open("bench-lease")
        arrays = {k: m[k] for k in m}
        m.close(); del arrays
print(json.dumps({"rate": rate, "opens": n}), flush=True)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--cycles", type=int, default=1000)
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="tensord-bench-leases-")
    try:
        root = os.path.join(base, "models")
        rng = np.random.default_rng(1)
        gen_models.write_safetensors(os.path.join(root, "bench-lease.safetensors"), [
            (f"t.{i}", "F32", (128, 128), bytes(gen_models.random_data(rng, "F32", (128, 128))))
            for i in range(64)])
        work = os.path.join(base, "run")
        os.mkdir(work)
        d = tdutil.Daemon(root, work, extra_args=["--preload", "bench-lease@host",
                                                  "--log-level", "warn"]).start()
        try:
            env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "client", "python"),
                       TENSORD_CLIENT_LIB=os.path.join(REPO, "build", "libtensord-client.so"))
            p = subprocess.Popen([sys.executable, "-c", WORKER, os.path.join(work, "tensord.sock"),
                                  str(args.seconds), str(args.cycles)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, env=env)
            rows = []
            for line in p.stdout:
                o = json.loads(line)
                if "rate" in o:
                    rate = o
                    break
                o["daemon_rss_kib"] = d.rss_kib()
                rows.append(o)
                p.stdin.write("\n")
                p.stdin.flush()
            p.wait()
            leases = d.json("/v1/models/bench-lease/gpu")["leases"]
        finally:
            d.stop()
        print(f"leases opened and closed per second (one worker, host backend): "
              f"{rate['rate']:.0f} ({rate['opens']} in {args.seconds:g} s)")
        print(f"{'cycle':>6} {'worker VmRSS KiB':>17} {'daemon VmRSS KiB':>17}")
        for r in rows:
            print(f"{r['cycle']:>6} {r['rss_kib']:>17} {r['daemon_rss_kib']:>17}")
        print(f"leases held after the run: {leases}")
        growth = rows[-1]["rss_kib"] - rows[1]["rss_kib"]
        print(f"worker VmRSS growth from cycle 100 to {rows[-1]['cycle']}: {growth} KiB")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
