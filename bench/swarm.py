#!/usr/bin/python3
"""A libtorrent swarm with tensord as its HTTP web seed: `make bench-swarm`
runs this file (as root: it makes network namespaces).

tensord (the origin) serves a generated model (--mib MiB in two shards) in
a network namespace of its own; --peers libtorrent sessions (Debian's
python3-libtorrent), each in a namespace of its own, join one bridge.
Every link is capped with tc tbf at --rate each way, the origin's too. The
torrent is made here from the model's files, named by the repo's commit, with
one web seed (BEP 19): http://ORIGIN/{repo}/resolve/, so a peer asks tensord
for {repo}/resolve/{commit}/{file} with Range, the Hub's immutable URL. No
tracker, no DHT: each peer is told the others' addresses. All peers start
together; each reports when it has every piece (libtorrent checks each
piece's SHA-1) and the bench compares every file with the origin's.

Measured, against issue 26's "Done when": the origin's egress (its access
log's bytes) against the model's size (≤ 1.1x), and each peer's time
against its capped time, size / rate (p50 ≤ 1.2x, p99 ≤ 2x). Results also
go to build/bench/swarm.json.
"""
import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

from tdutil import gen_models  # noqa: E402

import numpy as np  # noqa: E402

BR = "td26br"
NET = "10.227.0"
ORIGIN_IP = f"{NET}.1"
PORT = 18977
REPO = "swarm/model"

# One peer, run inside its namespace: waits for the go file, downloads,
# reports, seeds until the stop file appears.
PEER = r"""
import json, os, sys, time
import libtorrent as lt
ip, torrent, save, go, stop, seeded, others = (sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4],
                                               sys.argv[5], sys.argv[6] == "1", sys.argv[7:])
s = lt.session({"listen_interfaces": ip + ":6881", "enable_dht": False, "enable_lsd": False,
                "enable_upnp": False, "enable_natpmp": False, "alert_mask": 0,
                "allow_multiple_connections_per_ip": True, "connections_limit": 200,
                # a fleet's peers trade at once: no slot limit, no 15 s choke rounds
                "unchoke_slots_limit": -1, "unchoke_interval": 1,
                "optimistic_unchoke_interval": 1})
while not os.path.exists(go):
    time.sleep(0.01)
t0 = time.monotonic()
ti = lt.torrent_info(torrent)
if not seeded:  # this peer learns everything from the others
    ti = lt.torrent_info(ti)
    for w in ti.web_seeds():
        pass
h = s.add_torrent({"ti": ti, "save_path": save})
if not seeded:
    for u in h.url_seeds():
        h.remove_url_seed(u)
for o in others:
    h.connect_peer((o, 6881))
done = None
last_connect = time.monotonic()
while not os.path.exists(stop):
    st = h.status()
    if done is None and st.is_seeding:
        done = time.monotonic() - t0
        print(json.dumps({"ip": ip, "seconds": done,
                          "downloaded": st.total_payload_download,
                          "uploaded": st.total_payload_upload}), flush=True)
    if time.monotonic() - last_connect > 1:  # peers that were not listening yet
        for o in others:
            h.connect_peer((o, 6881))
        last_connect = time.monotonic()
    time.sleep(0.02)
st = h.status()
print(json.dumps({"ip": ip, "final_uploaded": st.total_payload_upload}), flush=True)
"""


def sh(*argv, check=True):
    return subprocess.run(list(argv), check=check, capture_output=True, text=True)


def ns_name(i):
    return "td26-o" if i == 0 else f"td26-p{i}"


def net_down(n):
    for i in range(n + 1):
        sh("ip", "netns", "del", ns_name(i), check=False)
    sh("ip", "link", "del", BR, check=False)


def net_up(n, rate):
    net_down(n)
    sh("ip", "link", "add", BR, "type", "bridge")
    sh("ip", "addr", "add", f"{NET}.254/24", "dev", BR)
    sh("ip", "link", "set", BR, "up")
    for i in range(n + 1):
        name, a, b = ns_name(i), f"td26a{i}", f"td26b{i}"
        ip = ORIGIN_IP if i == 0 else f"{NET}.{10 + i}"
        sh("ip", "netns", "add", name)
        sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        sh("ip", "link", "set", b, "netns", name)
        sh("ip", "link", "set", a, "master", BR)
        sh("ip", "link", "set", a, "up")
        sh("ip", "netns", "exec", name, "ip", "addr", "add", f"{ip}/24", "dev", b)
        sh("ip", "netns", "exec", name, "ip", "link", "set", b, "up")
        sh("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")
        # Up (out of the namespace) and down (out of the bridge's end).
        sh("ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", b, "root", "tbf", "rate",
           rate, "burst", "256kb", "latency", "50ms")
        sh("tc", "qdisc", "add", "dev", a, "root", "tbf", "rate", rate, "burst", "256kb",
           "latency", "50ms")


def rate_bytes(rate):
    units = {"kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8}
    for u, f in units.items():
        if rate.endswith(u):
            return float(rate[:-len(u)]) * f
    raise SystemExit(f"--rate like 200mbit, not {rate}")


def make_model(root, mib):
    d = os.path.join(root, REPO)
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(7)
    per = (mib << 20) // 2 // 4
    names = []
    for s in range(2):
        name = f"model-{s + 1:05d}-of-00002.safetensors"
        a = rng.standard_normal(per, dtype=np.float32)
        gen_models.write_safetensors(os.path.join(d, name), [(f"w{s}", "F32", (per,), a.tobytes())])
        names.append(name)
    return d, names


def make_torrent(model_dir, names, commit, base):
    import libtorrent as lt
    top = os.path.join(base, "torrent-src", commit)
    os.makedirs(top)
    for n in names:
        os.symlink(os.path.join(model_dir, n), os.path.join(top, n))
    fs = lt.file_storage()
    lt.add_files(fs, top)
    t = lt.create_torrent(fs, 1 << 20)
    t.add_url_seed(f"http://{ORIGIN_IP}:{PORT}/{REPO}/resolve/")
    lt.set_piece_hashes(t, os.path.dirname(top))
    path = os.path.join(base, "model.torrent")
    with open(path, "wb") as f:
        f.write(lt.bencode(t.generate()))
    return path


def origin_bytes(log):
    total = 0
    with open(log) as f:
        for line in f:
            p = line.split()
            if len(p) >= 5 and "/resolve/" in p[2]:
                total += int(p[4])
    return total


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", type=int, default=8)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rate", default="200mbit", help="tc cap of every link, each way")
    ap.add_argument("--web-seeded", type=int, default=1,
                    help="peers given the web seed (the others only the peers)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/swarm.py makes network namespaces: run it as root")
    try:
        import libtorrent  # noqa: F401
    except ImportError:
        sys.exit("needs Debian's python3-libtorrent (make deps-bench installs it)")
    base = tempfile.mkdtemp(prefix="tensord-bench-swarm-")
    procs = []
    print(f"load average before: {os.getloadavg()}")
    try:
        root = os.path.join(base, "models")
        model_dir, names = make_model(root, args.mib)
        size = sum(os.path.getsize(os.path.join(model_dir, n)) for n in names)
        digests = {n: hashlib.sha256(open(os.path.join(model_dir, n), "rb").read()).hexdigest()
                   for n in names}
        net_up(args.peers, args.rate)
        log = os.path.join(base, "access.log")
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", ns_name(0), os.path.join(ROOT, "build", "tensord"), "serve",
             "--models", root, "--listen", f"{ORIGIN_IP}:{PORT}", "--insecure-listen",
             "--state-dir", os.path.join(base, "state"), "--access-log", log,
             "--ipc-socket", os.path.join(base, "o.sock")],
            stdout=open(os.path.join(base, "origin.log"), "wb"), stderr=subprocess.STDOUT))
        url = f"http://{ORIGIN_IP}:{PORT}/api/models/{REPO}"
        deadline = time.monotonic() + 120
        while True:
            try:
                commit = json.load(urllib.request.urlopen(url, timeout=5))["sha"]
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        torrent = make_torrent(model_dir, names, commit, base)
        go, stop = os.path.join(base, "go"), os.path.join(base, "stop")
        ips = [f"{NET}.{10 + i}" for i in range(1, args.peers + 1)]
        peers = []
        for i, ip in enumerate(ips, 1):
            save = os.path.join(base, f"peer{i}")
            os.makedirs(save)
            seeded = "1" if i <= args.web_seeded else "0"
            p = subprocess.Popen(["ip", "netns", "exec", ns_name(i), sys.executable, "-c", PEER,
                                  ip, torrent, save, go, stop, seeded] + [o for o in ips if o != ip],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            peers.append((p, save))
            procs.append(p)
        time.sleep(1.5)  # every session listening
        open(go, "w").close()
        results = []
        for p, _ in peers:
            line = p.stdout.readline()
            if not line:
                raise RuntimeError(f"a peer ended without finishing: {p.stderr.read()[-2000:]}")
            results.append(json.loads(line))
        open(stop, "w").close()
        for p, _ in peers:
            p.wait(30)
        exact = 0
        for _, save in peers:
            ok = all(hashlib.sha256(open(os.path.join(save, commit, n), "rb").read()).hexdigest()
                     == digests[n] for n in names)
            exact += ok
        capped = size / rate_bytes(args.rate)
        secs = [r["seconds"] for r in results]
        egress = origin_bytes(log)
        res = {"peers": args.peers, "web_seeded": args.web_seeded, "rate": args.rate,
               "model_bytes": size,
               "peer_uploaded": [r["uploaded"] for r in results],
               "capped_seconds": capped, "peer_seconds": sorted(secs),
               "p50_ratio": statistics.median(secs) / capped, "p99_ratio": pct(secs, 0.99) / capped,
               "origin_egress_bytes": egress, "origin_egress_ratio": egress / size,
               "byte_exact_peers": exact}
        res["verdicts"] = {"origin_egress_le_1.1x": res["origin_egress_ratio"] <= 1.1,
                           "p50_le_1.2x": res["p50_ratio"] <= 1.2,
                           "p99_le_2x": res["p99_ratio"] <= 2.0,
                           "byte_exact": exact == args.peers}
        print(json.dumps(res, indent=1))
        os.makedirs(os.path.join(ROOT, "build", "bench"), exist_ok=True)
        with open(os.path.join(ROOT, "build", "bench", "swarm.json"), "w") as f:
            json.dump(res, f, indent=1)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
        net_down(args.peers)
        shutil.rmtree(base, ignore_errors=True)
        print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
