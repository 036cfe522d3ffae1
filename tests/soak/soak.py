#!/usr/bin/python3
"""Load and soak: `make soak SOAK_SECONDS=N`.

Starts the daemon on the test models (plus a 4 MiB tensor for the sendfile
and streamed paths) on a loopback port and drives it with wrk: 256+
keep-alive connections cycling through headers, whole tensors, slices,
npy/safetensors answers, single and multipart ranges, files, model
documents and metrics, for --seconds. Meanwhile a few verifier threads send
the same kinds of requests and compare every body they get byte for byte
with what the generator wrote (an independent NumPy reference for slices).

Reports requests, errors (socket errors, unexpected statuses, wrong bodies:
all must be 0) and the daemon's resident memory and open descriptors before
the run (after a short warm-up at the same concurrency, so allocator arenas
and thread caches exist) and after it (once the connections are closed):
they must be flat. Exit status 0 only when everything holds."""
import argparse
import http.client
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "tests", "gen"))

import numpy as np  # noqa: E402

import gen_models  # noqa: E402
import tdutil  # noqa: E402

RSS_SLACK_KIB = 16 * 1024      # allowed growth of VmRSS over the run, plus 10 %


def q(name):
    return urllib.parse.quote(name, safe="")


def build_requests(man, big):
    """[(method, path, headers, expected status, expected body)]."""
    reqs = []
    valid = [m for m in man.models if m not in man.invalid]
    for m in valid:
        info = man.models[m]
        reqs.append(("GET", f"/v1/models/{q(m)}", {}, 200, None))
        reqs.append(("GET", f"/v1/models/{q(m)}/header", {}, 200, None))
        for fname, blob in sorted(info.files.items()):
            url = f"/v1/models/{q(m)}/files/{q(fname)}"
            reqs.append(("GET", url, {}, 200, blob))
            if len(blob) > 40:
                reqs.append(("GET", url, {"Range": "bytes=3-30"}, 206, blob[3:31]))
        for tname, t in sorted(man[m].items()):
            url = f"/v1/models/{q(m)}/tensors/{q(tname)}"
            reqs.append(("GET", url, {}, 200, bytes(t.data)))
            reqs.append(("HEAD", url, {}, 200, b""))
            if len(t.data) > 8:
                reqs.append(("GET", url, {"Range": "bytes=2-5"}, 206, bytes(t.data[2:6])))
                reqs.append(("GET", url, {"Range": "bytes=-3"}, 206, bytes(t.data[-3:])))
            if len(t.shape) >= 1 and t.shape[0] >= 2 and t.dtype not in gen_models.SUB_BYTE:
                body, _ = tdutil.numpy_slice(t.dtype, t.shape, bytes(t.data),
                                             (slice(1, None, 1),))
                reqs.append(("GET", url + "?slice=1:", {}, 200, body))
            if gen_models.numpy_dtype(t.dtype):
                reqs.append(("GET", url + "?format=npy", {}, 200, None))
            reqs.append(("GET", url + "?format=safetensors", {}, 200, None))
    bdata, rows, cols = big
    burl = "/v1/models/soak-big/tensors/w"
    reqs.append(("GET", burl, {}, 200, bdata))
    reqs.append(("GET", burl, {"Range": "bytes=1000-2000000"}, 206, bdata[1000:2000001]))
    cut = b"".join(bdata[r * cols + 7:r * cols + 1000] for r in range(rows))
    reqs.append(("GET", burl + "?slice=:,7:1000", {}, 200, cut))
    reqs.append(("GET", burl, {"Range": "bytes=0-9,100000-100009,-10"}, 206, None))
    for _ in range(8):
        reqs.append(("GET", "/v1/metrics", {}, 200, None))
        reqs.append(("GET", "/metrics", {}, 200, None))
        reqs.append(("GET", "/v1/models", {}, 200, None))
    reqs.append(("GET", "/healthz", {}, 200, None))
    return reqs


def lua_script(reqs, path):
    """A wrk script cycling through the requests, each thread from its own
    offset, counting every status other than the expected 200/206."""
    def lstr(s):
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    rows = []
    for method, url, hdrs, status, _ in reqs:
        h = ", ".join(f"[{lstr(k)}] = {lstr(v)}" for k, v in hdrs.items())
        rows.append(f"  {{{lstr(method)}, {lstr(url)}, {{{h}}}}},")
    script = """
local reqs = {
%s
}
local threads = {}
function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end
local formatted = {}
local i = 0
bad = 0
function init(args)
  for k, r in ipairs(reqs) do
    formatted[k] = wrk.format(r[1], r[2], r[3])
  end
  i = (tid or 0) * 7919
end
function request()
  i = i + 1
  return formatted[(i %% #formatted) + 1]
end
function response(status, headers, body)
  if status ~= 200 and status ~= 206 then
    bad = bad + 1
  end
end
function done(summary, latency, requests)
  local b = 0
  for _, t in ipairs(threads) do b = b + (t:get("bad") or 0) end
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %%d, "bytes": %%d, "duration_us": %%d, "bad_status": %%d, ' ..
    '"connect": %%d, "read": %%d, "write": %%d, "status": %%d, "timeout": %%d, ' ..
    '"p50_us": %%d, "p99_us": %%d, "max_us": %%d}\\n',
    summary.requests, summary.bytes, summary.duration, b, e.connect, e.read, e.write,
    e.status, e.timeout, latency:percentile(50), latency:percentile(99), latency.max))
end
""" % "\n".join(rows)
    with open(path, "w") as f:
        f.write(script)


def run_wrk(port, script, seconds, connections, threads):
    cmd = ["wrk", "-t", str(threads), "-c", str(connections), "-d", f"{seconds}s",
           "--timeout", "30s", "-s", script, f"http://127.0.0.1:{port}"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 120)
    for line in p.stdout.splitlines():
        if line.startswith("WRKJSON "):
            return json.loads(line[8:]), p.stdout
    raise RuntimeError(f"wrk failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")


class Verifier(threading.Thread):
    """Sends requests with known bodies on a keep-alive connection and
    compares them byte for byte."""

    def __init__(self, port, reqs, stop, seed):
        super().__init__(daemon=True)
        self.port = port
        self.reqs = [r for r in reqs if r[4] is not None]
        self.stop = stop
        self.rng = random.Random(seed)
        self.checked = 0
        self.bytes = 0
        self.failures = []

    def run(self):
        conn = None
        while not self.stop.is_set():
            method, url, hdrs, status, body = self.rng.choice(self.reqs)
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                conn.request(method, url, headers=hdrs)
                r = conn.getresponse()
                got = r.read()
                if r.status != status or got != body:
                    self.failures.append(f"{method} {url} {hdrs}: {r.status}, {len(got)} bytes "
                                         f"(want {status}, {len(body)} bytes)")
                self.checked += 1
                self.bytes += len(got)
                if r.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                self.failures.append(f"{method} {url}: {e!r}")
                conn = None
        if conn:
            conn.close()


def measure(d):
    return {"rss_kib": d.rss_kib(), "fds": len(os.listdir(f"/proc/{d.pid}/fd"))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--connections", type=int, default=256)
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--verifiers", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    if not shutil.which("wrk"):
        print("soak: wrk is not installed (make deps installs it)", file=sys.stderr)
        return 2

    base = tempfile.mkdtemp(prefix="tensord-soak-")
    d = None
    try:
        models = os.path.join(base, "models")
        man = gen_models.make_test_models(models)
        rows, cols = 256, 16384
        bdata = np.random.default_rng(7).integers(0, 256, rows * cols, dtype=np.uint8).tobytes()
        gen_models.write_safetensors(os.path.join(models, "soak-big", "model.safetensors"),
                                     [("w", "U8", (rows, cols), bdata)], {"format": "pt"})
        reqs = build_requests(man, (bdata, rows, cols))
        script = os.path.join(base, "mix.lua")
        # wrk cannot tell a HEAD answer has no body (it waits for Content-Length
        # bytes): HEAD goes through the verifiers only.
        lua_script([r for r in reqs if r[0] != "HEAD"], script)

        d = tdutil.Daemon(models, base, ["--max-connections", str(max(1024, args.connections * 2)),
                                         "--access-log", os.path.join(base, "access.log")])
        d.start()
        print(f"soak: daemon {tdutil.tensord_bin()} pid {d.pid} on port {d.port}, "
              f"{len(reqs)} distinct requests, {args.connections} connections, "
              f"{args.seconds}s", flush=True)
        start = measure(d)
        run_wrk(d.port, script, args.warmup, args.connections, args.wrk_threads)
        time.sleep(1.0)
        before = measure(d)

        stop = threading.Event()
        verifiers = [Verifier(d.port, reqs, stop, i) for i in range(args.verifiers)]
        for v in verifiers:
            v.start()
        t0 = time.monotonic()
        res, raw = run_wrk(d.port, script, args.seconds, args.connections, args.wrk_threads)
        stop.set()
        for v in verifiers:
            v.join(90)
        elapsed = time.monotonic() - t0
        # Connections close asynchronously: wait for the descriptors to settle.
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and measure(d)["fds"] > before["fds"]:
            time.sleep(0.2)
        time.sleep(1.0)
        after = measure(d)
        alive = d.alive()

        checked = sum(v.checked for v in verifiers)
        vbytes = sum(v.bytes for v in verifiers)
        failures = [f for v in verifiers for f in v.failures]
        sock_errors = res["connect"] + res["read"] + res["write"] + res["timeout"]
        errors = sock_errors + res["bad_status"] + len(failures)
        rss_ok = after["rss_kib"] <= before["rss_kib"] * 1.10 + RSS_SLACK_KIB
        fds_ok = after["fds"] <= before["fds"]

        print(raw.strip())
        print(f"requests: {res['requests']} by wrk ({res['requests'] / (res['duration_us'] / 1e6):.0f}/s, "
              f"{res['bytes'] / 1e9:.2f} GB, p50 {res['p50_us'] / 1000:.1f} ms, "
              f"p99 {res['p99_us'] / 1000:.1f} ms) + {checked} verified byte for byte "
              f"({vbytes / 1e6:.0f} MB) in {elapsed:.0f}s")
        print(f"errors: {errors} (socket: connect {res['connect']} read {res['read']} "
              f"write {res['write']} timeout {res['timeout']}; unexpected status "
              f"{res['bad_status']}; wrong bodies {len(failures)})")
        for f in failures[:10]:
            print("  " + f)
        print(f"daemon RSS: {start['rss_kib'] / 1024:.1f} MiB at start, "
              f"{before['rss_kib'] / 1024:.1f} MiB after warm-up (before), "
              f"{after['rss_kib'] / 1024:.1f} MiB after the run: {'flat' if rss_ok else 'GREW'}")
        print(f"daemon fds: {start['fds']} at start, {before['fds']} before, {after['fds']} after: "
              f"{'flat' if fds_ok else 'GREW'}")
        ok = alive and errors == 0 and rss_ok and fds_ok and checked > 0
        if not alive:
            print(f"daemon died:\n{d.log_tail()}")
        print("soak: " + ("PASS" if ok else "FAIL"))
        return 0 if ok else 1
    finally:
        if d is not None:
            d.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
