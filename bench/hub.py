#!/usr/bin/python3
"""Hugging Face endpoint benchmark: `make bench-hub` runs this file.

snapshot_download (huggingface_hub, 8 parallel downloads, its default) of
the 2 GiB sharded repo of `make bench-remote` (4 shards and an index, cached
in build/bench/models/remote/bench/sharded2g), on one machine in one run,
with every file in the page cache, from:

- tensord serving the models root (the repo "bench/sharded2g": revision,
  tree and files computed by tensord);
- nginx serving the same files in a static Hub-shaped layout: the JSON
  documents tensord answered, saved as files, the files under
  /bench/sharded2g/resolve/<commit>/ (symlinks), and the X-Repo-Commit
  header added by nginx (what the client needs; ETags are nginx's own).

Each download goes to a fresh cache directory, whose files are removed and
written back before the next run. Medians over --runs alternating runs;
the load average before and after is recorded, the machine being shared.
Results in bench/out/hub-DATE.json and bench/out/hub-latest.md. See
docs/PERFORMANCE.md.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import models  # noqa: E402
import remote  # noqa: E402
import run as benchrun  # noqa: E402
import servers  # noqa: E402

REPO = remote.REPO
log = benchrun.log

STATIC_LOCATIONS = """\
        location /api/ {{
            default_type application/json;
            try_files $uri.json =404;
        }}
        location ~ "^/{repo}/resolve/(?<commit>[0-9a-f]{{40}})/" {{
            add_header X-Repo-Commit $commit always;
        }}
        location / {{ }}"""


def fetch(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=120) as r:
        return r.read()


def static_layout(td_port, mdir, static):
    """The Hub-shaped tree nginx serves, from tensord's own answers."""
    shutil.rmtree(static, ignore_errors=True)
    info = fetch(td_port, f"/api/models/{REPO}")
    commit = json.loads(info)["sha"]
    docs = {f"/api/models/{REPO}": info,
            f"/api/models/{REPO}/revision/main": fetch(td_port, f"/api/models/{REPO}/revision/main"),
            f"/api/models/{REPO}/revision/{commit}":
                fetch(td_port, f"/api/models/{REPO}/revision/{commit}"),
            f"/api/models/{REPO}/tree/{commit}":
                fetch(td_port, f"/api/models/{REPO}/tree/{commit}?recursive=true")}
    for path, body in docs.items():
        p = static + path + ".json"
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(body)
    d = os.path.join(static, REPO, "resolve", commit)
    os.makedirs(d)
    for name in os.listdir(mdir):
        os.symlink(os.path.join(mdir, name), os.path.join(d, name))
    return commit


def start_static_nginx(static, workers, workdir):
    prefix = os.path.join(workdir, "nginx")
    for sub in ("body", "proxy", "fastcgi", "uwsgi", "scgi"):
        os.makedirs(os.path.join(prefix, sub), exist_ok=True)
    port = servers.free_port()
    conf = servers.NGINX_CONF.replace("        location / {{ }}",
                                      STATIC_LOCATIONS.replace("{repo}", REPO))
    with open(os.path.join(prefix, "nginx.conf"), "w") as f:
        f.write(conf.format(workers=workers, prefix=prefix, port=port, root=static))
    argv = [servers.NGINX, "-p", prefix, "-c", os.path.join(prefix, "nginx.conf"),
            "-e", os.path.join(prefix, "error.log")]
    return servers.Server("nginx", argv, port, f"/api/models/{REPO}", os.path.join(workdir,
                                                                                   "nginx.log"))


CHILD = """
import json, os, sys, time
from huggingface_hub import snapshot_download
t0 = time.monotonic()
d = snapshot_download(sys.argv[1])
t = time.monotonic() - t0
n = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)
print(json.dumps({"seconds": t, "bytes": n, "dir": d}))
"""


def snapshot(port, cache):
    env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HUB_CACHE=cache,
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_XET="1")
    env.pop("HF_TOKEN", None)
    p = subprocess.run([sys.executable, "-c", CHILD, REPO], env=env, capture_output=True,
                       text=True, check=True, timeout=600)
    return json.loads(p.stdout.strip().splitlines()[-1])


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2, help="tensord --threads, nginx workers")
    ap.add_argument("--quiet-wait", type=float, default=30)
    ap.add_argument("--tensord", default=os.path.join(ROOT, "build", "tensord"))
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    args = ap.parse_args()
    bindir = os.path.join(ROOT, "build", "bench")
    os.makedirs(bindir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="hub-", dir=bindir)
    private = os.path.join(work, "tensord")
    shutil.copy2(args.tensord, private)  # others rebuild build/tensord: measure a copy
    root = os.path.join(bindir, "models", "remote")
    mdir = remote.make_sharded2g(root)
    log("warming the page cache")
    models.warm_page_cache([mdir])
    res = {"machine": benchrun.machine_info(private), "runs": args.runs,
           "threads": args.threads, "load_before": loadavg(), "seconds": {}}
    td = ng = None
    try:
        td = servers.start_tensord(private, root, args.threads, work,
                                   extra=("--state-dir", os.path.join(work, "state")))
        td.wait_ready()
        t0 = time.monotonic()
        commit = json.loads(fetch(td.port, f"/api/models/{REPO}"))["sha"]  # waits for hashes
        res["first_answer_s"] = time.monotonic() - t0
        log(f"tensord: revision {commit} after {res['first_answer_s']:.2f} s (hashing 2 GiB)")
        static_layout(td.port, mdir, os.path.join(work, "static"))
        ng = start_static_nginx(os.path.join(work, "static"), args.threads, work)
        ng.wait_ready()
        contenders = [("tensord", td.port), ("nginx (static Hub layout)", ng.port)]
        want = sum(os.path.getsize(os.path.join(mdir, f)) for f in os.listdir(mdir))
        for name, _ in contenders:
            res["seconds"][name] = []
        benchrun.wait_for_quiet(args.quiet_wait)
        for r in range(args.runs):
            for name, port in contenders if r % 2 == 0 else contenders[::-1]:
                cache = os.path.join(work, "hf")
                shutil.rmtree(cache, ignore_errors=True)
                os.sync()
                out = snapshot(port, cache)
                assert out["bytes"] == want, f"{name}: {out['bytes']} bytes, want {want}"
                res["seconds"][name].append(out["seconds"])
                log(f"run {r + 1}: {name}: {out['seconds']:.2f} s")
        res["bytes"] = want
    finally:
        for s in (td, ng):
            if s:
                s.stop()
        shutil.rmtree(os.path.join(work, "hf"), ignore_errors=True)
    res["load_after"] = loadavg()
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"hub-{stamp}.json"), "w") as f:
        json.dump(res, f, indent=1)
    lines = ["| server | snapshot_download of 2 GiB, median | GB/s |", "| --- | --- | --- |"]
    for name, ts in res["seconds"].items():
        m = statistics.median(ts)
        lines.append(f"| {name} | {m:.2f} s | {res['bytes'] / m / 1e9:.2f} |")
    lines.append("")
    lines.append(f"{args.runs} runs, alternating; tensord --threads {args.threads}, nginx "
                 f"{args.threads} workers; load average {res['load_before']} before, "
                 f"{res['load_after']} after; first answer (hashing the repo from an empty "
                 f"state directory) {res['first_answer_s']:.2f} s.")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "hub-latest.md"), "w") as f:
        f.write(text)
    print(text)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
