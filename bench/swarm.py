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
from one instant; each reports when it has every piece (libtorrent checks
each piece's hash) and the bench compares every file with the origin's.

Two swarms (docs/PERFORMANCE.md "A libtorrent swarm" has the measurements):
the default ("tuned") gives every peer the web seed and a run of the pieces
to fetch from it first (--origin-slices), drops the web seed once that run is
in, uses TCP only, short request queues and reno; --stock is libtorrent's
defaults with one web-seeded peer and the host's TCP. Each flag still
overrides either.

Measured, against issue 26's "Done when": the origin's egress (its access
log's body bytes, and its link's bytes on the wire) against the model's size
(<= 1.1x), and each peer's time against its capped time, size / rate (p50 <=
1.2x, p99 <= 2x). Results go to build/bench/swarm.json; --trace adds, per
peer, its progress and connections over time and which source each block came
from (build/bench/swarm-trace/).
"""
import argparse
import fcntl
import hashlib
import json
import os
import selectors
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
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

# Every peer, whatever the profile: no discovery (the peers are told each
# other's addresses).
BASE_SETTINGS = {"enable_dht": False, "enable_lsd": False, "enable_upnp": False,
                 "enable_natpmp": False}
# The tuned swarm's libtorrent settings (each measured, PERFORMANCE.md).
TUNED_SETTINGS = {
    # TCP only: uTP (libtorrent's default) cost 3x the CPU per byte here and
    # the 2 cores ran out.
    "enable_outgoing_utp": False, "enable_incoming_utp": False,
    # Ask any one source for about a second of data, so that pieces are not
    # held in the queue of a slow one (libtorrent: 3 s, and 2,000 requests
    # accepted per peer).
    "request_queue_time": 1, "max_allowed_in_request_queue": 32,
    # The web seed: one 1 MiB request at a time, so that a peer's requests to
    # the origin do not run past its run of pieces (libtorrent: 5 requests
    # of up to 16 MiB).
    "urlseed_pipeline_size": 1, "urlseed_max_request_bytes": 1 << 20,
    # No random first pieces: random picks ignore piece priorities.
    "initial_picker_threshold": 0,
}

# One peer, run inside its namespace, configured by one JSON argument: waits
# for the go file (which holds the controller's monotonic start time, the same
# for every peer), downloads, reports, seeds until the stop file appears. With
# "trace" it also writes what it saw: samples of its progress and of each
# connection every 0.25 s, and the source of every 16 KiB block it received.
PEER = r"""
import json, os, resource, sys, time
import libtorrent as lt
c = json.loads(sys.argv[1])
ip, others = c["ip"], c["others"]
settings = {"listen_interfaces": ip + ":6881",
            "alert_mask": lt.alert_category.block_progress if c["trace"] else 0,
            "alert_queue_size": 1 << 20}
settings.update(c["settings"])
s = lt.session(settings)
ti = lt.torrent_info(c["torrent"])
while not os.path.exists(c["go"]) or os.path.getsize(c["go"]) == 0:
    time.sleep(0.005)
t0 = float(open(c["go"]).read())
h = s.add_torrent({"ti": ti, "save_path": c["save"]})
added = time.monotonic() - t0
mine = []
if c["slice"]:
    # [i, n]: this peer fetches the i-th of n runs of pieces first (the top
    # priority), the others at the lowest; one run, not every n-th piece,
    # because libtorrent asks a web seed for 1 MiB of adjacent pieces at a
    # time whatever their priority.
    i, n = c["slice"]
    np_ = ti.num_pieces()
    mine = [p for p in range(np_) if p * n // np_ == i]
    h.prioritize_pieces([7 if p * n // np_ == i else 1 for p in range(np_)])
web_seed_dropped = None
for o in others:
    h.connect_peer((o, 6881))
done = None
last_connect = time.monotonic()
last_sample = 0.0
samples, blocks, first_block = [], {}, {}
while not os.path.exists(c["stop"]):
    now = time.monotonic()
    st = h.status()
    if done is None and st.is_seeding:
        done = now - t0
        ru = resource.getrusage(resource.RUSAGE_SELF)
        print(json.dumps({"ip": ip, "seconds": done, "downloaded": st.total_payload_download,
                          "uploaded": st.total_payload_upload,
                          "cpu_user": ru.ru_utime, "cpu_sys": ru.ru_stime}), flush=True)
    if mine and web_seed_dropped is None and all(h.have_piece(p) for p in mine):
        # its run is here: the rest comes from the peers, each of which
        # fetched its own run (otherwise the web seed goes on fetching what
        # the peers have, and the origin sends the model again)
        for u in h.url_seeds():
            h.remove_url_seed(u)
        web_seed_dropped = now - t0
    if now - last_connect > 1:  # peers that were not listening yet
        for o in others:
            h.connect_peer((o, 6881))
        last_connect = now
    if c["trace"]:
        for a in s.pop_alerts():
            if isinstance(a, lt.block_finished_alert):
                src = a.endpoint[0]
                blocks[src] = blocks.get(src, 0) + 1
                if a.piece_index not in first_block:  # when each piece began, from whom
                    first_block[a.piece_index] = (round(now - t0, 3), src)
        if now - last_sample >= 0.25:
            last_sample = now
            # ip, kind (0 peer, 1 web seed), uTP, bytes in, bytes out, peer_info flags,
            # pieces it has, blocks we asked of it, blocks it asked of us, our send buffer
            conns = [[p.ip[0], int(p.connection_type), bool(p.flags & 0x20000), p.total_download,
                      p.total_upload, int(p.flags), p.num_pieces, p.download_queue_length,
                      p.upload_queue_length, p.used_send_buffer]
                     for p in h.get_peer_info()]
            samples.append([round(now - t0, 3), st.total_wanted_done, st.total_payload_upload,
                            st.num_pieces, conns])
    time.sleep(0.02)
st = h.status()
if c["trace"]:
    with open(c["trace"], "w") as f:
        json.dump({"ip": ip, "seeded": c["seeded"], "seconds": done, "samples": samples,
                   "web_seed_dropped": web_seed_dropped, "added": added, "mine": mine,
                   "first_block": first_block,
                   "blocks": blocks}, f)
print(json.dumps({"ip": ip, "final_uploaded": st.total_payload_upload}), flush=True)
"""


def sh(*argv, check=True):
    return subprocess.run(list(argv), check=check, capture_output=True, text=True)


def ns_name(i):
    return "td26-o" if i == 0 else f"td26-p{i}"


def net_down(n):
    for i in range(n + 1):
        sh("ip", "netns", "del", ns_name(i), check=False)
        sh("ip", "link", "del", f"td26a{i}", check=False)  # gone with its namespace, or left
    sh("ip", "link", "del", BR, check=False)


def one_at_a_time():
    """The namespaces and the bridge have fixed names: a second run would tear
    down the first's. The lock is held until this process exits."""
    f = open("/run/tensord-bench-swarm.lock", "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit("another bench/swarm.py is running (/run/tensord-bench-swarm.lock)")
    return f


def net_up(n, rate, cc):
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
        if cc:  # a namespace may choose among net.ipv4.tcp_allowed_congestion_control
            sh("ip", "netns", "exec", name, "sysctl", "-qw",
               f"net.ipv4.tcp_congestion_control={cc}")
        # Up (out of the namespace) and down (out of the bridge's end). This
        # kernel has no fq_codel: tbf's queue is one FIFO.
        sh("ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", b, "root", "tbf", "rate",
           rate, "burst", "256kb", "latency", "50ms")
        sh("tc", "qdisc", "add", "dev", a, "root", "tbf", "rate", rate, "burst", "256kb",
           "latency", "50ms")


def origin_wire_bytes():
    """Bytes that left the origin's namespace (its link's tbf counter): the
    bodies with their TCP/IP and HTTP headers."""
    out = sh("ip", "netns", "exec", ns_name(0), "tc", "-s", "qdisc", "show", "dev", "td26b0").stdout
    return int(out.split("Sent ", 1)[1].split()[0])


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


def make_torrent(model_dir, names, commit, base, piece_bytes):
    """Two .torrent files of one torrent (the same info hash): one that names
    the web seed, for the web-seeded peers, one that does not."""
    import libtorrent as lt
    top = os.path.join(base, "torrent-src", commit)
    os.makedirs(top)
    for n in names:
        os.symlink(os.path.join(model_dir, n), os.path.join(top, n))
    fs = lt.file_storage()
    lt.add_files(fs, top)
    t = lt.create_torrent(fs, piece_bytes)
    t.add_url_seed(f"http://{ORIGIN_IP}:{PORT}/{REPO}/resolve/")
    lt.set_piece_hashes(t, os.path.dirname(top))
    seeded = t.generate()
    bare = {k: v for k, v in seeded.items() if k not in (b"url-list", "url-list")}
    paths = []
    for name, d in (("seeded.torrent", seeded), ("bare.torrent", bare)):
        paths.append(os.path.join(base, name))
        with open(paths[-1], "wb") as f:
            f.write(lt.bencode(d))
    return paths


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


class CpuSampler(threading.Thread):
    """The machine's CPU time by kind (/proc/stat) over the swarm's run, so
    that each result says how busy the 2 cores were while it ran."""

    def __init__(self):
        super().__init__(daemon=True)
        self.halt = threading.Event()
        self.first = self.last = self.read()

    @staticmethod
    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        names = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]
        return dict(zip(names, v))

    def run(self):
        while not self.halt.wait(0.5):
            self.last = self.read()

    def shares(self):
        self.halt.set()
        self.last = self.read()
        d = {k: self.last[k] - self.first[k] for k in self.first}
        total = sum(d.values()) or 1
        return {k: round(v / total, 3) for k, v in d.items()}


def proc_cpu(pid):
    """A process's user and system CPU seconds (/proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return [int(v[11]) / tick, int(v[12]) / tick]


def profile(args):
    """The run's swarm: the tuned one or --stock, with the flags given over it."""
    stock = args.stock

    def pick(given, tuned, plain):
        return given if given is not None else (plain if stock else tuned)

    settings = dict(BASE_SETTINGS)
    if not stock:
        settings.update(TUNED_SETTINGS)
    settings.update(json.loads(args.settings))
    return {"profile": "stock" if stock else "tuned",
            "web_seeded": pick(args.web_seeded, args.peers, 1),
            "piece_kib": pick(args.piece_kib, 256, 1024),
            "cc": pick(args.cc, "reno", ""),
            "origin_slices": pick(args.origin_slices, True, False),
            "settings": settings}


def summarise_traces(paths, origin_ip):
    """Per peer: where its blocks came from (the origin or which peer), the
    pieces it began from the origin outside its run (with --origin-slices),
    how many of its connections were uTP, and when it had 25/50/75 %."""
    out = []
    for path in paths:
        with open(path) as f:
            tr = json.load(f)
        total = sum(tr["blocks"].values()) or 1
        from_origin = tr["blocks"].get(origin_ip, 0) / total
        marks = {}
        last = tr["samples"][-1][1] if tr["samples"] else 0
        for t, done, *_ in tr["samples"]:
            for q in (0.25, 0.5, 0.75):
                if q not in marks and last and done >= q * last:
                    marks[q] = t
        # the sample with the most connections (seeds drop each other at the end)
        conns = max((sm[4] for sm in tr["samples"]), key=len, default=[])
        run = set(tr["mine"])
        outside = sum(1 for p, (_, src) in tr["first_block"].items()
                      if src == origin_ip and int(p) not in run) if run else None
        out.append({"ip": tr["ip"], "seeded": tr["seeded"], "seconds": tr["seconds"],
                    "from_origin": round(from_origin, 3),
                    "web_seed_dropped": tr["web_seed_dropped"],
                    "origin_pieces_outside_run": outside,
                    "block_sources": dict(sorted(tr["blocks"].items())),
                    "utp_conns": sum(1 for cn in conns if cn[2]), "conns": len(conns),
                    "t25_50_75": [marks.get(q) for q in (0.25, 0.5, 0.75)]})
    return out


def wait_lines(peers, deadline):
    """The first line of each peer (its result), or an error naming the peers
    that had not finished by the deadline: a stuck swarm never hangs the bench."""
    sel = selectors.DefaultSelector()
    for k, (p, _) in enumerate(peers):
        sel.register(p.stdout, selectors.EVENT_READ, k)
    lines = {}
    while len(lines) < len(peers):
        left = deadline - time.monotonic()
        if left <= 0:
            missing = [k + 1 for k in range(len(peers)) if k not in lines]
            raise RuntimeError(f"peers {missing} had not finished by the deadline")
        for key, _ in sel.select(left):
            k = key.data
            line = peers[k][0].stdout.readline()
            if not line:
                err = peers[k][0].stderr.read()[-2000:]
                raise RuntimeError(f"peer {k + 1} ended without finishing: {err}")
            lines[k] = json.loads(line)
            sel.unregister(key.fileobj)
    return [lines[k] for k in range(len(peers))]


def run_once(args, prof, trace_dir):
    """One swarm from scratch (network, origin, peers); its results."""
    base = tempfile.mkdtemp(prefix="tensord-bench-swarm-")
    procs = []
    load_before = os.getloadavg()
    try:
        root = os.path.join(base, "models")
        model_dir, names = make_model(root, args.mib)
        size = sum(os.path.getsize(os.path.join(model_dir, n)) for n in names)
        digests = {n: hashlib.sha256(open(os.path.join(model_dir, n), "rb").read()).hexdigest()
                   for n in names}
        net_up(args.peers, args.rate, prof["cc"])
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
        seeded_torrent, bare_torrent = make_torrent(model_dir, names, commit, base,
                                                    prof["piece_kib"] << 10)
        go, stop = os.path.join(base, "go"), os.path.join(base, "stop")
        ips = [f"{NET}.{10 + i}" for i in range(1, args.peers + 1)]
        web_seeded = prof["web_seeded"]
        peers, traces = [], []
        for i, ip in enumerate(ips, 1):
            save = os.path.join(base, f"peer{i}")
            os.makedirs(save)
            seeded = i <= web_seeded
            trace = os.path.join(trace_dir, f"peer{i}.json") if args.trace else ""
            cfg = {"ip": ip, "torrent": seeded_torrent if seeded else bare_torrent, "save": save,
                   "go": go, "stop": stop, "seeded": seeded, "settings": prof["settings"],
                   "slice": [i - 1, web_seeded] if seeded and prof["origin_slices"] else None,
                   "trace": trace, "others": [o for o in ips if o != ip]}
            p = subprocess.Popen(["ip", "netns", "exec", ns_name(i), sys.executable, "-c", PEER,
                                  json.dumps(cfg)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            peers.append((p, save))
            procs.append(p)
            traces.append(trace)
        time.sleep(1.5)  # every session listening
        capped = size / rate_bytes(args.rate)
        wire_before = origin_wire_bytes()
        cpu = CpuSampler()
        cpu.start()
        with open(go + ".tmp", "w") as f:  # every peer's clock starts here
            f.write(repr(time.monotonic()))
        os.rename(go + ".tmp", go)
        results = wait_lines(peers, time.monotonic() + max(120, 20 * capped))
        cpu_shares = cpu.shares()
        load_end = os.getloadavg()
        wire = origin_wire_bytes() - wire_before
        origin_cpu = proc_cpu(procs[0].pid)
        open(stop, "w").close()
        for p, _ in peers:
            p.wait(30)
        exact = 0
        for _, save in peers:
            exact += all(hashlib.sha256(open(os.path.join(save, commit, n), "rb").read())
                         .hexdigest() == digests[n] for n in names)
        secs = [r["seconds"] for r in results]
        egress = origin_bytes(log)
        res = {"peers": args.peers, "rate": args.rate, "model_bytes": size, **prof,
               "tcp_cc": prof["cc"] or open("/proc/sys/net/ipv4/tcp_congestion_control")
               .read().strip(),
               "capped_seconds": capped, "peer_seconds": [round(x, 2) for x in secs],
               "p50_ratio": statistics.median(secs) / capped, "p99_ratio": pct(secs, 0.99) / capped,
               "origin_egress_bytes": egress, "origin_egress_ratio": egress / size,
               "origin_wire_ratio": wire / size, "byte_exact_peers": exact,
               "peer_uploaded": [r["uploaded"] for r in results],
               "peer_cpu_seconds": [round(r["cpu_user"] + r["cpu_sys"], 2) for r in results],
               "origin_cpu_seconds": round(sum(origin_cpu), 2),
               "load_before": load_before, "load_at_end": load_end, "cpu_shares": cpu_shares}
        res["verdicts"] = {"origin_egress_le_1.1x": res["origin_egress_ratio"] <= 1.1,
                           "p50_le_1.2x": res["p50_ratio"] <= 1.2,
                           "p99_le_2x": res["p99_ratio"] <= 2.0,
                           "byte_exact": exact == args.peers}
        if args.trace:
            res["peer_traces"] = summarise_traces(traces, ORIGIN_IP)
            shutil.copy(log, os.path.join(trace_dir, "origin-access.log"))
        return res
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


def line(res):
    busy = 1 - res["cpu_shares"]["idle"] - res["cpu_shares"]["iowait"]
    return (f"{res['profile']}: {res['peers']} peers ({res['web_seeded']} web-seeded), "
            f"{res['model_bytes'] / 2**20:.0f} MiB, {res['rate']}: origin egress "
            f"{res['origin_egress_ratio']:.2f}x (wire {res['origin_wire_ratio']:.2f}x), "
            f"p50 {res['p50_ratio']:.2f}x, p99 {res['p99_ratio']:.2f}x "
            f"of {res['capped_seconds']:.1f} s, "
            f"byte-exact {res['byte_exact_peers']}/{res['peers']}, "
            f"load {res['load_before'][0]:.1f}, CPU busy {busy:.0%}, "
            f"peers' CPU {sum(res['peer_cpu_seconds']):.0f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--peers", type=int, default=8)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--rate", default="50mbit", help="tc cap of every link, each way")
    ap.add_argument("--runs", type=int, default=1, help="swarms in a row; medians at the end")
    ap.add_argument("--stock", action="store_true",
                    help="libtorrent's defaults, one web-seeded peer, 1 MiB pieces, the host's TCP")
    ap.add_argument("--web-seeded", type=int,
                    help="peers given the web seed, the others only the peers (tuned: all)")
    ap.add_argument("--origin-slices", action=argparse.BooleanOptionalAction,
                    help="web-seeded peer i of W fetches the i-th W-th of the pieces first and "
                    "drops the web seed once it has them (tuned: on)")
    ap.add_argument("--piece-kib", type=int, help="the torrent's piece size (tuned: 256)")
    ap.add_argument("--cc", help="TCP congestion control in every namespace, among "
                    "net.ipv4.tcp_allowed_congestion_control ('' the host's; tuned: reno)")
    ap.add_argument("--settings", default="{}",
                    help="libtorrent settings for every peer, a JSON object, over the profile's")
    ap.add_argument("--trace", action="store_true",
                    help="record each peer's progress and block sources (build/bench/swarm-trace/)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/swarm.py makes network namespaces: run it as root")
    try:
        import libtorrent  # noqa: F401
    except ImportError:
        sys.exit("needs Debian's python3-libtorrent (make deps-bench installs it)")
    lock = one_at_a_time()  # noqa: F841 (held until exit)
    prof = profile(args)
    if not 1 <= prof["web_seeded"] <= args.peers:
        sys.exit(f"--web-seeded must be 1 to --peers ({args.peers})")
    out_dir = os.path.join(ROOT, "build", "bench")
    trace_dir = os.path.join(out_dir, "swarm-trace")
    if args.trace:
        shutil.rmtree(trace_dir, ignore_errors=True)
        os.makedirs(trace_dir)
    runs = []
    for _ in range(args.runs):
        runs.append(run_once(args, prof, trace_dir))
        print(line(runs[-1]), flush=True)
    med = {k: statistics.median(r[k] for r in runs)
           for k in ("origin_egress_ratio", "origin_wire_ratio", "p50_ratio", "p99_ratio")}
    med["load_before"] = statistics.median(r["load_before"][0] for r in runs)
    med["byte_exact_runs"] = sum(r["byte_exact_peers"] == args.peers for r in runs)
    out = {"runs": runs, "medians": med}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "swarm.json"), "w") as f:
        json.dump(out, f, indent=1)
    if args.runs > 1:
        print("medians: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
    print(f"results: {os.path.join(out_dir, 'swarm.json')}")


if __name__ == "__main__":
    main()
