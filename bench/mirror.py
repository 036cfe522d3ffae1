#!/usr/bin/python3
"""Pull-through mirror benchmark: `make bench-mirror` runs this file (as
root: it makes network namespaces).

Two tensords on one machine, each in a network namespace of its own joined
by a veth pair whose both ends are capped with tc (tbf at --rate each way;
netem --delay-ms where the kernel has it): the upstream serves a generated models root, the
mirror has `upstream = http://UPSTREAM`. Every client runs in the
mirror's namespace (this process moves there with setns once the daemons
are up), so all traffic crosses the capped link the way a fleet host's
pull from a registry would. In one run it measures, against the issue 26
"Done when" figures:

  1. the link's TCP rate, iperf3 (Debian's) in the same namespaces, one
     stream from the upstream's side to the mirror's (-R);
  2. a cold --gib GiB file through the mirror: time to its first byte
     against the upstream's own first byte (the same file straight from the
     upstream, whose page cache holds it: the upstream's time is its best),
     the pull's rate against the TCP rate, and the bytes the upstream sent
     (its access log and the mirror's counter) against the file's size;
  3. 64 clients on one cold file: every one byte-exact, and the upstream's
     ranges for it (from its access log) each block once;
  4. --cuts downloads cut at random offsets (the file cold at the first)
     resumed with Range and If-Range: byte-exact, and the upstream bytes;
  5. the cache's size under a cap (a second mirror, --cap-mib): its files'
     disk usage sampled every 20 ms while files of a third of the cap each
     are pulled one after another, against cap + one block;
  6. an upstream file replaced mid-pull (--changes times): no client gets a
     mixed file, no complete blob hashes to another name;
  7. a host-backend preload of a cold --preload-gib GiB model (two shards)
     from the mirror: when the preload ended against when the mirror had
     the last byte (its upstream-bytes counter, polled every 5 ms).

The machine is shared: the load average before and after is printed, and
what was generated is removed. Results also go to build/bench/mirror.json.
"""
import argparse
import ctypes
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

from tdutil import gen_models  # noqa: E402

import numpy as np  # noqa: E402

NS_UP, NS_MIR = "td26-up", "td26-mir"
IF_UP, IF_MIR = "td26u", "td26m"
IP_UP, IP_MIR = "10.226.0.1", "10.226.0.2"
UP_PORT, MIR_PORT, MIR2_PORT = 18877, 18878, 18879
BLOCK = 16 << 20
CLONE_NEWNET = 0x40000000


def sh(*argv, check=True, capture=False):
    return subprocess.run(list(argv), check=check, capture_output=capture, text=True)


def ns(name, *argv, **kw):
    return sh("ip", "netns", "exec", name, *argv, **kw)


# ---- the network ------------------------------------------------------------


def net_down():
    for n in (NS_UP, NS_MIR):
        sh("ip", "netns", "del", n, check=False, capture=True)


def net_up(rate, delay_ms):
    net_down()
    sh("ip", "netns", "add", NS_UP)
    sh("ip", "netns", "add", NS_MIR)
    sh("ip", "link", "add", IF_UP, "type", "veth", "peer", "name", IF_MIR)
    sh("ip", "link", "set", IF_UP, "netns", NS_UP)
    sh("ip", "link", "set", IF_MIR, "netns", NS_MIR)
    for n, i, ip in ((NS_UP, IF_UP, IP_UP), (NS_MIR, IF_MIR, IP_MIR)):
        ns(n, "ip", "addr", "add", f"{ip}/24", "dev", i)
        ns(n, "ip", "link", "set", i, "up")
        ns(n, "ip", "link", "set", "lo", "up")
        # Each way: tbf for the rate, under netem for a delay when one is
        # asked for (this project's machines have no sch_netem: 0 by default).
        if delay_ms > 0:
            ns(n, "tc", "qdisc", "add", "dev", i, "root", "handle", "1:", "netem", "delay",
               f"{delay_ms}ms", "limit", "100000")
        ns(n, "tc", "qdisc", "add", "dev", i, *(("parent", "1:1", "handle", "10:")
                                                if delay_ms > 0 else ("root",)),
           "tbf", "rate", rate, "burst", "1mb", "latency", "100ms")


def enter(name):
    """Moves this process (its one thread so far) into namespace name."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")
    os.close(fd)


def iperf(seconds=5):
    srv = subprocess.Popen(["ip", "netns", "exec", NS_UP, "iperf3", "-s", "-1", "-B", IP_UP],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    try:
        out = ns(NS_MIR, "iperf3", "-c", IP_UP, "-R", "-t", str(seconds), "-J",
                 capture=True).stdout
    finally:
        srv.wait(10)
    return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 8


# ---- the daemons -------------------------------------------------------------


class Proc:
    def __init__(self, netns, args, log):
        self.log = log
        self.p = subprocess.Popen(["ip", "netns", "exec", netns] + args,
                                  stdout=open(log, "ab"), stderr=subprocess.STDOUT)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()


def request(host, port, method, path, headers=None, body=None, timeout=600):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def wait_ready(host, port, timeout=600):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if request(host, port, "GET", "/readyz", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{host}:{port} not ready")


def metric(port, name):
    body = request("127.0.0.1", port, "GET", "/metrics")[2].decode()
    m = re.search(rf"^{name} (\S+)$", body, re.M)
    return float(m.group(1)) if m else 0.0


def upstream_bytes_for(log, part):
    """Bytes and ranges the upstream sent for URLs holding part (its access log)."""
    total, ranges = 0, []
    with open(log) as f:
        for line in f:
            p = line.split()
            if len(p) >= 7 and part in p[2] and p[3] in ("200", "206"):
                total += int(p[4])
                m = re.match(r"bytes=(\d+)-(\d+)$", p[6])
                if m:
                    ranges.append((int(m.group(1)), int(m.group(2))))
    return total, sorted(ranges)


# ---- the files ------------------------------------------------------------------


def write_random(path, size, seed):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    rng = np.random.default_rng(seed)
    h = hashlib.sha256()
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, 64 << 20)
            b = rng.bytes(n)
            h.update(b)
            f.write(b)
            left -= n
    return h.hexdigest()


def write_model(d, gib, seed):
    rng = np.random.default_rng(seed)
    per = int(gib * (1 << 30)) // 2 // 4
    names = []
    for s in range(2):
        name = f"model-{s + 1:05d}-of-00002.safetensors"
        a = rng.standard_normal(per, dtype=np.float32)
        gen_models.write_safetensors(os.path.join(d, name),
                                     [(f"w{s}", "F32", (per,), a.tobytes())])
        names.append(name)
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": {"w0": names[0], "w1": names[1]}}, f)
    return names


def commit(port, repo):
    st, _, body = request("127.0.0.1", port, "GET", f"/api/models/{repo}")
    assert st == 200, (st, body[:300])
    return json.loads(body)["sha"]


def stream_sha(port, path, headers=None, first_byte=None):
    """GETs path from the mirror; returns (status, sha256, bytes, seconds,
    seconds to the first body byte)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.monotonic()
    c.request("GET", path, headers=headers or {})
    r = c.getresponse()
    h, n, ttfb = hashlib.sha256(), 0, None
    while True:
        b = r.read1(1 << 20) if hasattr(r, "read1") else r.read(1 << 20)
        if not b:
            break
        if ttfb is None:
            ttfb = time.monotonic() - t0
        h.update(b)
        n += len(b)
    secs = time.monotonic() - t0
    c.close()
    return r.status, h.hexdigest(), n, secs, ttfb


# ---- the phases -------------------------------------------------------------------


def phase_cold(args, files, up_log):
    repo, name, digest, size = files["big"]
    url = f"/{repo}/resolve/{commit(MIR_PORT, repo)}/{name}"
    # The upstream's own first byte (a Range of one byte), best of 5.
    up_ttfb = min(stream_sha_direct(url) for _ in range(5))
    before = metric(MIR_PORT, "tensord_mirror_upstream_bytes_total")
    st, got, n, secs, ttfb = stream_sha(MIR_PORT, url)
    sent = metric(MIR_PORT, "tensord_mirror_upstream_bytes_total") - before
    log_bytes, _ = upstream_bytes_for(up_log, f"/{repo}/")
    return {"file_bytes": size, "status": st, "byte_exact": got == digest and n == size,
            "mirror_first_byte_s": ttfb, "upstream_first_byte_s": up_ttfb,
            "pull_seconds": secs, "pull_bytes_per_second": size / secs,
            "upstream_bytes_counter": sent, "upstream_bytes_log": log_bytes,
            "upstream_bytes_ratio": log_bytes / size}


def stream_sha_direct(url):
    c = http.client.HTTPConnection(IP_UP, UP_PORT, timeout=60)
    t0 = time.monotonic()
    c.request("GET", url, headers={"Range": "bytes=0-0"})
    r = c.getresponse()
    r.read()
    c.close()
    return time.monotonic() - t0


def phase_64(files, up_log):
    repo, name, digest, size = files["many"]
    url = f"/{repo}/resolve/{commit(MIR_PORT, repo)}/{name}"
    out = [None] * 64
    ts = [threading.Thread(target=lambda i=i: out.__setitem__(i, stream_sha(MIR_PORT, url)))
          for i in range(64)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = time.monotonic() - t0
    _, ranges = upstream_bytes_for(up_log, f"/{repo}/")
    covered, overlaps = 0, 0
    for a, b in ranges:
        overlaps += a < covered
        covered = max(covered, b + 1)
    return {"clients": 64, "file_bytes": size, "seconds": secs,
            "byte_exact": sum(o[1] == digest and o[2] == size for o in out),
            "upstream_ranges": len(ranges), "blocks": (size + BLOCK - 1) // BLOCK,
            "overlapping_ranges": overlaps, "covered_bytes": covered}


def phase_cuts(args, files, up_log):
    repo, name, digest, size = files["cut"]
    url = f"/{repo}/resolve/{commit(MIR_PORT, repo)}/{name}"
    data = open(files["cut_path"], "rb").read()
    rnd = random.Random(26)
    ok = 0
    etag = None
    for _ in range(args.cuts):
        cut = rnd.randrange(1, size)
        c = http.client.HTTPConnection("127.0.0.1", MIR_PORT, timeout=600)
        c.request("GET", url)
        r = c.getresponse()
        etag = r.getheader("ETag")
        got = bytearray()
        while len(got) < cut:
            b = r.read1(min(1 << 20, cut - len(got)))
            if not b:
                break
            got += b
        c.close()  # cut
        st, _, rest = request("127.0.0.1", MIR_PORT, "GET", url,
                              {"Range": f"bytes={len(got)}-", "If-Range": etag})
        ok += st == 206 and len(got) + len(rest) == size and \
            data[:len(got)] == got and data[len(got):] == rest
    sent, _ = upstream_bytes_for(up_log, f"/{repo}/")
    return {"downloads": args.cuts, "byte_exact": ok, "file_bytes": size,
            "upstream_bytes": sent, "upstream_bytes_ratio": sent / size}


def du(path):
    total = 0
    for d, _, names in os.walk(path):
        for n in names:
            try:
                total += os.lstat(os.path.join(d, n)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def phase_cap(args, files, cache):
    cap = args.cap_mib << 20
    peak, stop = [0], [False]

    def sample():
        while not stop[0]:
            peak[0] = max(peak[0], du(cache))
            time.sleep(0.02)
    t = threading.Thread(target=sample)
    t.start()
    ok = 0
    for repo, name, digest, size in files["cap"]:
        st, got, n, _, _ = stream_sha(MIR2_PORT, f"/{repo}/resolve/{commit(MIR2_PORT, repo)}/{name}")
        ok += st == 200 and got == digest
    stop[0] = True
    t.join()
    return {"cap_bytes": cap, "block_bytes": BLOCK, "files": len(files["cap"]),
            "byte_exact": ok, "peak_disk_bytes": peak[0], "limit": cap + BLOCK,
            "within": peak[0] <= cap + BLOCK}


def phase_changes(args, files, up_root, cache):
    """The file is replaced while the mirror pulls it. Each download asks
    for main with an Authorization of its own (the upstream has no tokens
    and takes any), so the mirror resolves main afresh each time instead of
    reusing its answer (mirror_auth_ttl)."""
    repo, name, _, size = files["chg"]
    path = os.path.join(up_root, repo, name)
    versions = {hashlib.sha256(open(path, "rb").read()).hexdigest()}
    mixed, whole, cut, wrong_version = 0, 0, 0, 0
    for k in range(args.changes):
        new = np.random.default_rng(1000 + k).bytes(size)
        auth = {"Authorization": f"Bearer bench-change-{k}-{time.monotonic_ns()}"}
        url, named = None, None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not url:
            st, h, _ = request("127.0.0.1", MIR_PORT, "HEAD", f"/{repo}/resolve/main/{name}", auth)
            if st == 302:
                url, named = h.get("Location"), h.get("X-Linked-Etag", "").strip('"')
            time.sleep(0.1)
        res = {}
        t = threading.Thread(target=lambda: res.update(r=stream_sha(MIR_PORT, url, auth)))
        t.start()
        time.sleep(random.uniform(0.05, 0.5))
        tmp = path + ".new"
        with open(tmp, "wb") as f:
            f.write(new)
        os.rename(tmp, path)
        versions.add(hashlib.sha256(new).hexdigest())
        t.join()
        st, got, n, _, _ = res["r"]
        if st == 200 and n == size:
            whole += 1
            mixed += got not in versions
            wrong_version += got != named  # the commit URL's bytes are that commit's
        else:
            cut += 1
    blobs = os.path.join(cache, "blobs")
    wrong = 0
    for n in os.listdir(blobs):
        if n.startswith("sha256-") and not os.path.exists(os.path.join(blobs, n + ".state")):
            h = hashlib.sha256()
            with open(os.path.join(blobs, n), "rb") as f:
                for b in iter(lambda: f.read(1 << 20), b""):
                    h.update(b)
            wrong += h.hexdigest() != n[7:]
    return {"changes": args.changes, "whole_files": whole, "cut_answers": cut,
            "mixed_files": mixed, "whole_files_of_another_commit": wrong_version,
            "complete_blobs_with_wrong_hash": wrong}


def phase_preload(files):
    repo, size = files["model"]
    before = metric(MIR_PORT, "tensord_mirror_upstream_bytes_total")
    t0 = time.monotonic()
    st, _, body = request("127.0.0.1", MIR_PORT, "POST", f"/v1/models/{repo}/gpu",
                          body=b'{"device": "host"}')
    assert st in (200, 202), (st, body[:300])
    last_byte = None
    while True:
        got = metric(MIR_PORT, "tensord_mirror_upstream_bytes_total") - before
        if last_byte is None and got >= size:
            last_byte = time.monotonic() - t0
        st, _, body = request("127.0.0.1", MIR_PORT, "GET", f"/v1/models/{repo}/gpu")
        doc = json.loads(body)
        if doc["state"] != "loading":
            break
        time.sleep(0.005)
    ready = time.monotonic() - t0
    if last_byte is None:
        last_byte = ready
    return {"model_bytes": size, "state": doc["state"], "last_byte_s": last_byte,
            "ready_s": ready, "ratio": ready / last_byte if last_byte else None,
            "io": doc.get("preload", {}).get("io")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=4.0, help="the cold big file")
    ap.add_argument("--rate", default="1gbit", help="tc cap of the link, each way")
    ap.add_argument("--delay-ms", type=float, default=0, help="netem delay, each way (needs "
                    "the sch_netem module)")
    ap.add_argument("--many-mib", type=int, default=256, help="the 64 clients' file")
    ap.add_argument("--cut-mib", type=int, default=128)
    ap.add_argument("--cuts", type=int, default=100)
    ap.add_argument("--cap-mib", type=int, default=512)
    ap.add_argument("--changes", type=int, default=5)
    ap.add_argument("--preload-gib", type=float, default=2.0)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/mirror.py makes network namespaces: run it as root")
    binary = os.path.join(ROOT, "build", "tensord")
    base = tempfile.mkdtemp(prefix="tensord-bench-mirror-")
    procs = []
    print(f"load average before: {os.getloadavg()}")
    try:
        up_root = os.path.join(base, "up", "models")
        files = {}
        print("generating the upstream's files ...", flush=True)
        size = int(args.gib * (1 << 30))
        files["big"] = ("bench/big", "big.bin",
                        write_random(os.path.join(up_root, "bench/big/big.bin"), size, 1), size)
        size = args.many_mib << 20
        files["many"] = ("bench/many", "many.bin",
                         write_random(os.path.join(up_root, "bench/many/many.bin"), size, 2), size)
        size = args.cut_mib << 20
        files["cut_path"] = os.path.join(up_root, "bench/cut/cut.bin")
        files["cut"] = ("bench/cut", "cut.bin", write_random(files["cut_path"], size, 3), size)
        size = (args.cap_mib << 20) // 3
        files["cap"] = [(f"cap/f{i}", "w.bin",
                         write_random(os.path.join(up_root, f"cap/f{i}/w.bin"), size, 10 + i), size)
                        for i in range(6)]
        size = 128 << 20
        files["chg"] = ("bench/chg", "chg.bin",
                        write_random(os.path.join(up_root, "bench/chg/chg.bin"), size, 4), size)
        mdir = os.path.join(up_root, "bench", "model")
        os.makedirs(mdir, exist_ok=True)
        names = write_model(mdir, args.preload_gib, 5)
        files["model"] = ("bench/model", sum(os.path.getsize(os.path.join(mdir, n))
                                             for n in names + ["model.safetensors.index.json"]))
        net_up(args.rate, args.delay_ms)
        up_log = os.path.join(base, "up", "access.log")
        procs.append(Proc(NS_UP, [binary, "serve", "--models", up_root, "--listen",
                                  f"{IP_UP}:{UP_PORT}", "--insecure-listen", "--state-dir",
                                  os.path.join(base, "up", "state"), "--access-log", up_log,
                                  "--ipc-socket", os.path.join(base, "up.sock")],
                          os.path.join(base, "up.log")))
        for port, sub, cap in ((MIR_PORT, "m1", "100G"), (MIR2_PORT, "m2", f"{args.cap_mib}M")):
            procs.append(Proc(NS_MIR, [binary, "serve", "--models", os.path.join(base, sub, "models"),
                                       "--listen", f"127.0.0.1:{port}", "--state-dir",
                                       os.path.join(base, sub, "state"), "--ipc-socket",
                                       os.path.join(base, f"{sub}.sock"), "--upstream",
                                       f"http://{IP_UP}:{UP_PORT}", "--mirror-cache-max-bytes",
                                       cap, "--mirror-cache-dir", os.path.join(base, sub, "cache"),
                                       "--access-log", "off"],
                              os.path.join(base, f"{sub}.log")))
            os.makedirs(os.path.join(base, sub, "models"), exist_ok=True)
        enter(NS_MIR)
        wait_ready(IP_UP, UP_PORT)
        wait_ready("127.0.0.1", MIR_PORT)
        wait_ready("127.0.0.1", MIR2_PORT)
        print("waiting for the upstream's hashes ...", flush=True)
        for repo in ("bench/big", "bench/many", "bench/cut", "bench/chg", "bench/model") + \
                tuple(f"cap/f{i}" for i in range(6)):
            while request(IP_UP, UP_PORT, "GET", f"/api/models/{repo}")[0] != 200:
                time.sleep(0.5)
        res = {"rate": args.rate, "delay_ms": args.delay_ms}
        print("iperf3 ...", flush=True)
        res["tcp_bytes_per_second"] = iperf()
        print(f"  TCP {res['tcp_bytes_per_second'] / 1e6:.1f} MB/s", flush=True)
        for label, fn in (("cold", lambda: phase_cold(args, files, up_log)),
                          ("clients_64", lambda: phase_64(files, up_log)),
                          ("cuts", lambda: phase_cuts(args, files, up_log)),
                          ("cap", lambda: phase_cap(args, files, os.path.join(base, "m2", "cache"))),
                          ("changes", lambda: phase_changes(args, files, up_root,
                                                            os.path.join(base, "m1", "cache"))),
                          ("preload", lambda: phase_preload(files))):
            print(f"{label} ...", flush=True)
            res[label] = fn()
            print("  " + json.dumps(res[label]), flush=True)
        c = res["cold"]
        res["verdicts"] = {
            "first_byte_within_1s_plus_upstream": c["mirror_first_byte_s"] <= 1 + c["upstream_first_byte_s"],
            "upstream_bytes_le_1.02x": c["upstream_bytes_ratio"] <= 1.02,
            "pull_ge_0.8x_tcp": c["pull_bytes_per_second"] >= 0.8 * res["tcp_bytes_per_second"],
            "64_clients_one_fetch_per_block": res["clients_64"]["byte_exact"] == 64 and
            res["clients_64"]["overlapping_ranges"] == 0 and
            res["clients_64"]["upstream_ranges"] == res["clients_64"]["blocks"],
            "cuts_resume_byte_exact": res["cuts"]["byte_exact"] == args.cuts,
            "cache_within_cap_plus_block": res["cap"]["within"],
            "no_mixed_file": res["changes"]["mixed_files"] == 0 and
            res["changes"]["whole_files_of_another_commit"] == 0 and
            res["changes"]["complete_blobs_with_wrong_hash"] == 0,
            "preload_ends_within_10pct_of_last_byte": res["preload"]["state"] == "ready" and
            res["preload"]["ratio"] <= 1.10,
        }
        print(json.dumps(res["verdicts"], indent=1))
        os.makedirs(os.path.join(ROOT, "build", "bench"), exist_ok=True)
        with open(os.path.join(ROOT, "build", "bench", "mirror.json"), "w") as f:
            json.dump(res, f, indent=1)
    finally:
        for p in procs:
            p.stop()
        net_down()
        shutil.rmtree(base, ignore_errors=True)
        print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
