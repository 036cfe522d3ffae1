#!/usr/bin/python3
"""Instructions per request of small answers, counted by callgrind: exact and
repeatable where req/s on this shared 2-core machine varies by 10% from run
to run, so a change that costs 1% shows.

usage: bench/callgrind.py [--runs 3] [--requests 1000] [--cases a,b] TARGET...
TARGET: a tensord binary, or a git commit (built with `make CUDA=no
build/tensord` in an export of that commit under /tmp/tensord-callgrind/,
kept for later runs). Default: build/tensord.

Each run starts each target once under `valgrind --tool=callgrind` with
`--threads 1`, on a generated model (`llm`: a llama-like file with a 23 KB
header and a 4 KiB tensor), and waits until its content hashes are known.
One kept-alive connection (Python's http.client: only the daemon runs under
callgrind) then sends every case a few times (caches warm), and then, for
each case, a GET /healthz, 200 requests of the case, a GET /healthz, 1,200
requests of it and a GET /healthz. callgrind dumps its counters as each
/healthz enters its handler (--dump-before=handle_healthz), so each dump
holds what the daemon did between two of them, all threads together; the
dump of 1,200 requests less the one of 200 is 1,000 requests, with the
start-up, the warm-up and the markers' own cost cancelled exactly. Waiting
for readiness and hashes polls a number of times that varies from run to
run, which a difference of two whole runs (1,200 and 200 requests) would
count. All threads are counted: a request's work done off its connection's
thread is its cost too.

Each figure is the median of the runs, whose spread has two causes: what
the daemon does by the clock (the metrics' snapshot of the request totals,
about 74,000 instructions once a second while requests arrive, lands in a
segment or not: about 70 per request), and glibc's free lists, whose state
depends on the order the daemon's threads allocated at start-up (a whole
run falls in one of two modes, up to about 300 per request apart in
_int_malloc). Differences under about 0.4% are that noise; --runs 5
narrows it.
"""
import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import models  # noqa: E402
import servers  # noqa: E402

BUILDS = "/tmp/tensord-callgrind"
MARK = "/healthz"
FILE = "/v1/models/llm/files/model.safetensors"

# name: (path, request headers, expected status, description)
CASES = {
    "range": (FILE, {"Range": "bytes=0-7"}, 206, "`bytes=0-7` of a file"),
    "header": (FILE + "/header", {}, 200, "the file's header (`/header`, 23 KB)"),
    "tensor": ("/v1/models/llm/tensors/bench.4k", {}, 200, "a 4 KiB tensor"),
    "model": ("/v1/models/llm", {}, 200, "the model's description (`/v1/models/llm`)"),
    "hub": ("/api/models/llm", {}, 200, "the Hub's repo document (`/api/models/llm`)"),
    "404": ("/v1/models/nosuch", {}, 404, "an unknown model (404)"),
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def git(*args):
    return subprocess.run(["git", "-C", ROOT, *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def resolve(target):
    """(label, binary) of a TARGET: a file as it is, else a commit built once
    from an export of its tree (git archive: no worktree to register or prune)."""
    if os.path.isfile(target):
        path = os.path.abspath(target)
        inside = path.startswith(ROOT + os.sep)
        return (os.path.relpath(path, ROOT) if inside else target), path
    try:
        full = git("rev-parse", "--verify", "--quiet", target + "^{commit}")
    except subprocess.CalledProcessError:
        sys.exit(f"callgrind.py: {target} is neither a file nor a commit")
    src = os.path.join(BUILDS, full)
    binary = os.path.join(src, "build", "tensord")
    if not os.path.exists(binary):
        if not os.path.isdir(src):
            tmp = src + f".tmp{os.getpid()}"
            os.makedirs(tmp)
            archive = subprocess.Popen(["git", "-C", ROOT, "archive", full], stdout=subprocess.PIPE)
            subprocess.run(["tar", "-x", "-C", tmp], stdin=archive.stdout, check=True)
            if archive.wait() != 0:
                sys.exit(f"callgrind.py: git archive {full} failed")
            os.rename(tmp, src)
        log(f"building {target} ({full[:12]}) in {src}")
        with open(os.path.join(src, "build.log"), "wb") as out:
            rc = subprocess.run(["nice", "make", "-j2", "CUDA=no", "build/tensord"], cwd=src,
                                stdout=out, stderr=subprocess.STDOUT).returncode
        if rc != 0:
            sys.exit(f"callgrind.py: building {target} failed; see {src}/build.log")
    return git("rev-parse", "--short", full), binary


def make_root(d):
    """The models root: repo and model `llm` (the safetensors file and a config)."""
    stamp = f"{models.GEN_VERSION} callgrind 1"
    if models._stamp_ok(d, stamp):
        return
    models._fresh(d)
    os.makedirs(os.path.join(d, "llm"))
    tensors = models.llm_like_tensors() + [("bench.4k", "F32", (1024,))]
    models.write_safetensors(os.path.join(d, "llm", "model.safetensors"), tensors,
                             models.PatternSource(), {"format": "pt"})
    with open(os.path.join(d, "llm", "config.json"), "w") as f:
        json.dump({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 24}, f)
    models._write_stamp(d, stamp)


class Client:
    """One kept-alive connection; every answer is read whole and its status checked."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)

    def get(self, path, headers=None, status=200):
        self.conn.request("GET", path, headers=headers or {})
        r = self.conn.getresponse()
        body = r.read()
        if r.status != status or r.will_close:
            raise RuntimeError(f"GET {path}: {r.status} (wanted {status}, kept alive), "
                               f"{body[:200]!r}")
        return body

    def close(self):
        self.conn.close()


def wait_for(what, fn, deadline):
    while time.monotonic() < deadline:
        if fn():
            return
        time.sleep(0.2)
    raise RuntimeError(f"tensord: {what} not reached in time")


def hashed(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/v1/models")
        r = c.getresponse()
        doc = json.loads(r.read()) if r.status == 200 else {}
        c.close()
    except (OSError, ValueError, http.client.HTTPException):
        return False
    h = doc.get("hashing")
    return h is None or (h.get("files_pending") == 0 and h.get("files_known") == h.get("files"))


def dump_total(path):
    """The Ir of one callgrind dump (its summary line)."""
    with open(path) as f:
        for line in f:
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError(f"{path}: no summary line")


def measure(binary, root, work, cases, base, n, keep):
    """{case: instructions per request} of one daemon run."""
    out = os.path.join(work, "cg.out")
    port = servers.free_port()
    argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            "--dump-before=handle_healthz", "--dump-instr=yes" if keep else "--dump-instr=no",
            binary, "serve", "--models", root, "--listen", f"127.0.0.1:{port}",
            "--threads", "1", "--access-log", "off"]
    if servers.has_option(binary, "state_dir"):
        argv += ["--state-dir", os.path.join(work, "state")]
    srv = servers.Server("tensord", argv, port, "/readyz", os.path.join(work, "tensord.log"))
    try:
        srv.wait_ready(timeout=300, poll=0.2)
        wait_for("every content hash", lambda: hashed(port), time.monotonic() + 300)
        c = Client(port)
        for path, hdrs, status, _ in CASES.values():
            for _ in range(20):
                c.get(path, hdrs, status)
        segments = []  # (case, requests) between two markers, in dump order
        for name in cases:
            path, hdrs, status, _ = CASES[name]
            for count in (base, base + n):
                c.get(MARK)
                for _ in range(count):
                    c.get(path, hdrs, status)
                segments.append((name, count))
        c.get(MARK)
        c.close()
    finally:
        srv.stop()
    # The first marker's dump holds the start-up and the warm-up; the
    # segments follow in order. Numbered dumps are OUT.1, OUT.2, ...
    dumps = sorted((f for f in os.listdir(work) if f.startswith("cg.out.")),
                   key=lambda f: int(f.rsplit(".", 1)[1]))
    first = len(dumps) - len(segments) - 1  # dumps before the segments: the warm-up's
    if first < 0 or dumps[first] != f"cg.out.{first + 1}":
        raise RuntimeError(f"{work}: {len(dumps)} dumps for {len(segments)} segments")
    ir = {}
    for i, seg in enumerate(segments):
        ir[seg] = dump_total(os.path.join(work, dumps[first + 1 + i]))
    return {name: (ir[(name, base + n)] - ir[(name, base)]) / n for name in cases}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="*", default=[os.path.join(ROOT, "build", "tensord")])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=1000, help="requests counted per case")
    ap.add_argument("--base", type=int, default=200, help="requests of the run subtracted")
    ap.add_argument("--cases", default=",".join(CASES), help="of " + ",".join(CASES))
    ap.add_argument("--json", help="write every run's figures here")
    ap.add_argument("--keep", action="store_true",
                    help="keep the dumps (with per-instruction costs) for callgrind_annotate")
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in CASES:
            sys.exit(f"callgrind.py: unknown case {c} (of {', '.join(CASES)})")
    if not shutil.which("valgrind"):
        sys.exit("callgrind.py: valgrind is not installed (apt-get install valgrind)")
    targets = [resolve(t) for t in args.targets]
    if len({label for label, _ in targets}) < len(targets):
        sys.exit("callgrind.py: a target is named twice")
    base = os.path.join(ROOT, "build", "bench", "callgrind")
    root = os.path.join(base, "models")
    make_root(root)
    work = tempfile.mkdtemp(prefix="run-", dir=base)
    runs = {label: {c: [] for c in cases} for label, _ in targets}
    t0 = time.monotonic()
    for r in range(args.runs):
        for i, (label, binary) in enumerate(targets):  # alternated, run by run
            d = os.path.join(work, f"{i}-{label.replace('/', '_')}-run{r + 1}")
            os.makedirs(d)
            res = measure(binary, root, d, cases, args.base, args.requests, args.keep)
            log(f"run {r + 1} {label}: " + ", ".join(f"{c} {v:,.0f}" for c, v in res.items()))
            for c, v in res.items():
                runs[label][c].append(v)
            if not args.keep:
                shutil.rmtree(d)
    if not args.keep:
        shutil.rmtree(work)
    else:
        log(f"dumps kept in {work}")
    log(f"{args.runs} runs of {len(targets)} targets in {time.monotonic() - t0:.0f} s")

    labels = [label for label, _ in targets]
    print(f"instructions per request (callgrind, median of {args.runs}; "
          f"spread over runs; change from {labels[0]})\n")
    print("| request | " + " | ".join(labels) + " |")
    print("| --- |" + " --- |" * len(labels))
    for c in cases:
        cells = []
        ref = statistics.median(runs[labels[0]][c])
        for label in labels:
            v = runs[label][c]
            med = statistics.median(v)
            cell = f"{med:,.0f}"
            if len(v) > 1:
                cell += f" (±{(max(v) - min(v)) / 2:,.0f})"
            if label != labels[0]:
                cell += f" {100 * (med - ref) / ref:+.2f}%"
            cells.append(cell)
        print(f"| {CASES[c][3]} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"requests": args.requests, "base": args.base,
                       "targets": dict(targets), "runs": runs}, f, indent=1)


if __name__ == "__main__":
    main()
