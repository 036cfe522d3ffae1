"""A model on several devices of the double (CUDA_DOUBLE_DEVICES=2): whole
copies on each device with a worker on each; tensor-parallel partitions
(one request placing every rank, and two ranks on one device) whose bytes
are numpy.array_split's and the fetch's; preloads to two devices that run
at the same time; a reload that reloads every instance. Workers find their
instance by device, by rank, or by their current CUDA device."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

from conftest import CudaDaemon, assert_clean, expected, read_report, worker_env
import tdutil
from tdutil import gen_models

TWO = {"CUDA_DOUBLE_DEVICES": "2"}
ESIZE = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "U8": 1, "I32": 4}
RULES = [{"match": "*.weight", "dim": 0}]


def sha(b):
    return hashlib.sha256(b).hexdigest()


def write_tp(root, seed=3):
    """tp: two shards of weights whose dim 0 does not divide by 2 (7, 5, 3
    rows), a 1-row weight, biases no rule matches and a scalar."""
    rng = np.random.default_rng(seed)

    def data(dt, shape):
        return bytes(gen_models.random_data(rng, dt, shape))
    d = os.path.join(root, "tp")
    os.makedirs(d, exist_ok=True)
    shards = [[("l0.weight", "F32", (7, 5)), ("l0.bias", "F32", (5,)),
               ("l1.weight", "BF16", (5, 9)), ("one.weight", "F16", (1, 6))],
              [("l2.weight", "I64", (3, 2, 2)), ("l2.bias", "U8", (13,)), ("scale", "F32", ())]]
    wm = {}
    for k, ts in enumerate(shards):
        name = f"model-0000{k + 1}-of-00002.safetensors"
        tmp = os.path.join(d, name + ".tmp")
        gen_models.write_safetensors(tmp, [(n, dt, sh, data(dt, sh)) for n, dt, sh in ts],
                                     mtime=None)
        os.replace(tmp, os.path.join(d, name))
        wm.update({n: name for n, _, _ in ts})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wm}, f)


def tensors(root, model):
    out = {}
    for p in sorted(os.listdir(os.path.join(root, model))):
        if p.endswith(".safetensors"):
            with open(os.path.join(root, model, p), "rb") as f:
                out.update(tdutil.read_safetensors_bytes(f.read())[2])
    return out


def rank_part(dt, shape, b, world, rank, cut):
    """numpy.array_split's part of a tensor's bytes along dim 0 (cut), or the
    whole tensor: (shape, bytes)."""
    if not cut or not shape:
        return list(shape), b
    a = np.frombuffer(b, np.uint8).reshape(tuple(shape) + (ESIZE[dt],))
    p = np.array_split(a, world, axis=0)[rank]
    return list(p.shape[:-1]), p.tobytes()


def want_rank(root, world, rank):
    return {k: [dt] + list(rank_part(dt, shape, b, world, rank, k.endswith(".weight")))
            for k, (dt, shape, b) in tensors(root, "tp").items()}


# Opens argv's model with device and rank (JSON null: not named), after
# making device `ctx` current (-1: no context), and prints what it maps.
WORKER = r"""
import ctypes, hashlib, json, sys
import tensord
sock, model, device, rank, ctx = sys.argv[1:6]
device, rank, ctx = json.loads(device), json.loads(rank), int(ctx)
if ctx >= 0:
    cu = ctypes.CDLL("libcuda.so.1")
    def fn(name, *argtypes):
        p = ctypes.c_void_p()
        assert cu.cuGetProcAddress_v2(name.encode(), ctypes.byref(p), 12000, 0, None) == 0
        return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(p.value)
    vp = ctypes.c_void_p
    assert fn("cuInit", ctypes.c_uint)(0) == 0
    mine = vp()
    assert fn("cuDevicePrimaryCtxRetain", ctypes.POINTER(vp), ctypes.c_int)(ctypes.byref(mine), ctx) == 0
    assert fn("cuCtxSetCurrent", vp)(mine) == 0
c = tensord.connect(sock)
try:
    m = c.open(model, device=device, rank=rank)
except tensord.TensordError as e:
    print(json.dumps({"error": str(e)}), flush=True)
    sys.exit(0)
snap = {"device": m.device, "world": m.world, "rank": m.rank, "split": m.split,
        "verify": m.verify(),
        "tensors": {k: [m.info(k)["dtype"], list(m.info(k)["shape"]),
                        hashlib.sha256(m.read(k)).hexdigest()] for k in m},
        "parts": {k: m.info(k)["part"] for k in m}}
print(json.dumps(snap), flush=True)
if sys.stdin.readline() == "again\n":
    print(json.dumps({k: hashlib.sha256(m.read(k)).hexdigest() for k in m}), flush=True)
    sys.stdin.readline()
m.close()
if ctx >= 0:
    fn("cuDevicePrimaryCtxRelease", ctypes.c_int)(ctx)
c.close()
"""


class Worker:
    def __init__(self, d, model, device=None, rank=None, ctx=-1):
        self.work, self.ctx = d.work, ctx
        self.p = subprocess.Popen(
            [sys.executable, "-c", WORKER, d.sock, model, json.dumps(device), json.dumps(rank),
             str(ctx)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=worker_env(d.work, TWO, python=True))
        line = self.p.stdout.readline()
        assert line, self.p.communicate()[1][-3000:]
        self.snap = json.loads(line)

    def again(self):
        self.p.stdin.write("again\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def end(self):
        out, err = self.p.communicate("\n", timeout=60)
        assert self.p.returncode == 0, err[-3000:]
        if "error" not in self.snap or self.ctx >= 0:  # a refused open never loads the driver
            assert_clean(read_report(self.work, self.p.pid), (), err[-2000:])


def post(d, model, body):
    return d.request("POST", f"/v1/models/{tdutil.q(model)}/gpu", body=json.dumps(body).encode())


def gpu_at(d, model, device=None, rank=None):
    q = "&".join(f"{k}={v}" for k, v in (("device", device), ("rank", rank)) if v is not None)
    r = d.get(f"/v1/models/{tdutil.q(model)}/gpu" + ("?" + q if q else ""))
    assert r.status == 200, (r.status, r.body)
    return r.json()


def all_ready(d, model, n, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        s = d.gpu(model)
        states = [i["state"] for i in s.get("instances", [])]
        if len(states) == n and all(x in ("ready", "failed") for x in states):
            assert states == ["ready"] * n, s
            return s
        assert time.monotonic() < deadline, s
        time.sleep(0.02)


def start(workdir, env=None, args=(), more=None):
    root = os.path.join(workdir, "models")
    os.makedirs(root, exist_ok=True)
    write_tp(root)
    if more:
        more(root)
    gen_models.write_safetensors(os.path.join(root, "two.safetensors"), [
        ("w", "F32", (64, 33), bytes(range(256)) * 33), ("b", "I32", (33,), bytes(132))])
    d = CudaDaemon(root, workdir, dict(TWO, **(env or {})),
                   ["--staging-buffers", "3", "--staging-buffer-bytes", "64K", "--watch", "false"]
                   + list(args))
    d.start()
    return d, root


def test_one_model_on_two_devices(workdir):
    d, root = start(workdir)
    for dev in ("cuda:0", "cuda:1"):
        r = post(d, "two", {"device": dev})
        assert r.status == 202, (r.status, r.body)
    s = all_ready(d, "two", 2)
    assert sorted(i["device"] for i in s["instances"]) == ["cuda:0", "cuda:1"], s
    assert s["state"] == "ready" and "allocations" not in s, s  # several: no one instance's
    # The short form per instance in the model list.
    m = [x for x in d.json("/v1/models")["models"] if x["name"] == "two"][0]
    assert sorted(i["device"] for i in m["gpu"]["instances"]) == ["cuda:0", "cuda:1"], m
    want = {k: v[:2] + [v[2]] for k, v in expected(root, "two").items()}
    w0, w1 = Worker(d, "two", "cuda:0"), Worker(d, "two", "cuda:1")
    # The metrics per device: each holds the model once and one lease.
    prom = d.get("/metrics").body.decode()
    for dev in ("cuda:0", "cuda:1"):
        for fam, v in (("resident_bytes", 2 << 20), ("leases_active", 1), ("instances", 1)):
            assert f'tensord_gpu_device_{fam}{{device="{dev}"}} {v}\n' in prom, (fam, dev, prom)
    devs = {x["device"]: x for x in d.json("/v1/metrics")["gpu"]["devices"]}
    assert devs["cuda:1"]["leases_active"] == 1 and devs["cuda:1"]["instances"] == 1, devs
    for w, dev in ((w0, "cuda:0"), (w1, "cuda:1")):
        assert w.snap["device"] == dev and w.snap["verify"], w.snap
        assert w.snap["tensors"] == want
        assert w.snap["world"] == 1 and w.snap["split"] is None
    # Naming no device: the worker's current CUDA device chooses; without
    # one, the worker is told to choose.
    w = Worker(d, "two", ctx=1)
    assert w.snap["device"] == "cuda:1", w.snap
    w.end()
    w = Worker(d, "two")
    assert "ambiguous" in w.snap["error"] and "cuda:0" in w.snap["error"], w.snap
    w.end()
    # Evicting cuda:1 leaves cuda:0 serving; the lease on cuda:1 drains.
    r = d.request("DELETE", "/v1/models/two/gpu?device=cuda:1")
    assert r.status == 202 and r.json()["device"] == "cuda:1", r.body
    assert r.json()["state"] == "draining" and r.json()["leases"] == 1, r.body
    s = d.gpu("two")
    assert s["state"] == "ready" and s["device"] == "cuda:0", s  # one instance: its document
    assert w1.again() == {k: v[2] for k, v in want.items()}  # still mapped
    w1.end()
    w = Worker(d, "two")  # one instance now: no choice to make
    assert w.snap["device"] == "cuda:0" and w.snap["tensors"] == want, w.snap
    w.end()
    assert w0.again() == {k: v[2] for k, v in want.items()}
    w0.end()
    r = d.request("DELETE", "/v1/models/two/gpu?device=cuda:1")
    assert r.status == 404 and r.json()["error"]["code"] == "not_loaded", r.body
    r = d.request("DELETE", "/v1/models/two/gpu?rank=x")
    assert r.status == 400, r.body
    r = d.request("DELETE", "/v1/models/two/gpu")
    assert r.status == 200 and r.json()["state"] == "none", r.body
    d.finish()


def test_partitions_equal_array_split_and_the_fetch(workdir):
    d, root = start(workdir)
    r = post(d, "tp", {"devices": ["cuda:0", "cuda:1"], "split": {"world": 2, "rules": RULES}})
    assert r.status == 202, r.body
    assert [i["rank"] for i in r.json()["instances"]] == [0, 1], r.body
    all_ready(d, "tp", 2)
    for rank, dev in ((0, "cuda:0"), (1, "cuda:1")):
        s = gpu_at(d, "tp", rank=rank)
        assert s["device"] == dev and s["world"] == 2 and s["rank"] == rank, s
        assert s["split"] == {"world": 2, "rank": rank, "rules": RULES}, s
        want = want_rank(root, 2, rank)
        w = Worker(d, "tp", rank=rank)
        assert w.snap["device"] == dev and w.snap["world"] == 2 and w.snap["rank"] == rank
        assert w.snap["split"] == s["split"] and w.snap["verify"], w.snap
        got = {k: [v[0], v[1], v[2]] for k, v in w.snap["tensors"].items()}
        assert got == {k: [dt, sh, sha(b)] for k, (dt, sh, b) in want.items()}
        for k, part in w.snap["parts"].items():  # the cut, for the framework's own check
            if k.endswith(".weight"):
                n = tensors(root, "tp")[k][1][0]
                lo = sum(len(x) for x in np.array_split(np.arange(n), 2)[:rank])
                assert part == {"dim": 0, "start": lo, "stop": lo + want[k][1][0], "length": n}
            else:
                assert part is None, (k, part)
        # The fetch of the same split sends the same bytes.
        f = d.request("POST", "/v1/models/tp/fetch", body=json.dumps(
            {"split": {"world": 2, "rank": rank, "rules": RULES}}).encode())
        assert f.status == 200, f.body
        fetched = tdutil.read_safetensors_bytes(f.body)[2]
        assert {k: [dt, list(sh), sha(b)] for k, (dt, sh, b) in fetched.items()} == got
        w.end()
    # Ranks 1 and 2 of a world of 3 beside rank 0 of the world of 2: three
    # ranks on cuda:0.
    for rank in (1, 2):
        r = post(d, "tp", {"device": "cuda:0", "split": {"world": 3, "rank": rank,
                                                        "rules": RULES}})
        assert r.status == 202, r.body
    all_ready(d, "tp", 4)
    for rank in (1, 2):
        w = Worker(d, "tp", "cuda:0", rank)
        want = want_rank(root, 3, rank)
        assert w.snap.get("world") == 3 and w.snap["tensors"] == {
            k: [dt, sh, sha(b)] for k, (dt, sh, b) in want.items()}, w.snap
        w.end()
    # rank 1 is on both devices now: a rank alone does not say which
    w = Worker(d, "tp", rank=1)
    assert "ambiguous" in w.snap["error"], w.snap
    w.end()
    # The same rank with other rules is refused, as is a malformed split.
    r = post(d, "tp", {"device": "cuda:0", "split": {"world": 3, "rank": 1, "rules": [
        {"match": "*", "dim": 0}]}})
    assert r.status == 409 and r.json()["error"]["code"] == "split_conflict", r.body
    r = post(d, "tp", {"device": "cuda:1", "split": {"world": 4, "rank": 0, "rules": [
        {"match": "*", "dim": 1}]}})
    assert r.status == 400 and r.json()["error"]["code"] == "bad_split", r.body  # the biases
    assert "l0.bias" in r.json()["error"]["message"], r.body
    r = post(d, "tp", {"devices": ["cuda:0", "cuda:7"], "split": {"world": 2, "rules": RULES}})
    assert r.status == 400 and r.json()["error"]["code"] == "bad_device", r.body
    all_ready(d, "tp", 4)  # nothing was started by the refusals
    r = d.request("DELETE", "/v1/models/tp/gpu?device=cuda:0&rank=2")
    assert r.status == 200 and len(r.json()["instances"]) == 1, r.body
    r = d.request("DELETE", "/v1/models/tp/gpu?device=cuda:0")
    assert r.status == 200 and len(r.json()["instances"]) == 2, r.body
    s = d.gpu("tp")
    assert s["device"] == "cuda:1" and s["rank"] == 1 and s["world"] == 2, s
    d.finish()


def bigs(root):
    """big0 and big1, 8 MiB each: at 0.05 GB/s a load takes at least 0.17 s."""
    rng = np.random.default_rng(9)
    for name in ("big0", "big1"):
        gen_models.write_safetensors(os.path.join(root, name + ".safetensors"), [
            ("w", "F32", (2048, 1024), rng.integers(0, 255, 8 << 20, np.uint8).tobytes())])


def test_preloads_to_two_devices_overlap(workdir):
    d, root = start(workdir, {"CUDA_DOUBLE_LINK_GBPS": "0.05"}, more=bigs)
    assert post(d, "big0", {"device": "cuda:0"}).status == 202
    assert post(d, "big1", {"device": "cuda:1"}).status == 202
    both, deadline = False, time.monotonic() + 60
    while True:
        s0, s1 = d.gpu("big0")["state"], d.gpu("big1")["state"]
        both |= s0 == "loading" and s1 == "loading"
        if s0 in ("ready", "failed") and s1 in ("ready", "failed"):
            break
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert (s0, s1) == ("ready", "ready")
    assert both, "the two devices' preloads never ran at the same time"
    # Two to one device queue: the second waits for the first.
    assert post(d, "big1", {"device": "cuda:0"}).status == 202
    assert post(d, "two", {"device": "cuda:0"}).status == 202
    d.wait("two", lambda s: s["state"] == "ready")
    assert gpu_at(d, "big1", device="cuda:0")["state"] == "ready"  # it went first
    d.finish()


def test_reload_reloads_every_instance(workdir):
    d, root = start(workdir)
    assert post(d, "tp", {"devices": ["cuda:0", "cuda:1"],
                          "split": {"world": 2, "rules": RULES}}).status == 202
    assert post(d, "tp", {"device": "cuda:1"}).status == 202
    s = all_ready(d, "tp", 3)
    before = {(i["device"], i.get("rank", 0), i.get("world", 1)): i["generation"]
              for i in s["instances"]}
    write_tp(root, seed=4)
    d.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 60
    while True:
        s = d.gpu("tp")
        now = {(i["device"], i.get("rank", 0), i.get("world", 1)): (i["generation"], i["state"])
               for i in s["instances"]}
        if len(now) == 3 and all(g > before[k] and st == "ready" for k, (g, st) in now.items()):
            break
        assert time.monotonic() < deadline, (before, now)
        time.sleep(0.02)
    for rank in (0, 1):  # a named rank: the partition's, not the whole copy's rank 0
        w = Worker(d, "tp", rank=rank)
        assert w.snap.get("tensors") == {
            k: [dt, sh, sha(b)] for k, (dt, sh, b) in want_rank(root, 2, rank).items()}, w.snap
        w.end()
    w = Worker(d, "tp", device="cuda:1", rank=0)  # the whole copy: rank 0 of a world of 1
    assert w.snap["world"] == 1 and w.snap["tensors"] == {
        k: [dt, list(sh), sha(b)] for k, (dt, sh, b) in tensors(root, "tp").items()}, w.snap
    w.end()
    d.finish()


def test_staging_memory_limit(workdir):
    # 4 copy threads, 3 disk reads: a full ring is 3 + 2 x 4 = 11 buffers
    # of 64 KiB + 8 KiB (O_DIRECT slack), one thread's 5.
    buf = (64 << 10) + 8192
    full, one = 11 * buf, 5 * buf
    d, root = start(workdir, args=["--preload-threads", "4",
                                   "--staging-memory-limit", str(full + one)])
    status = lambda: d.json("/v1/models")["gpu"]
    assert status()["staging_memory_limit"] == full + one
    assert d.preload("two", "cuda:0")["state"] == "ready"
    assert status()["staging_bytes"] == {"cuda:0": full}
    # cuda:1's full ring does not fit beside cuda:0's idle one: that goes.
    r = post(d, "tp", {"device": "cuda:1"})
    assert r.status == 202, r.body
    s = d.wait("tp", lambda s: s["state"] == "ready")
    assert status()["staging_bytes"] == {"cuda:1": full}
    assert "staging ring of 11 x 73728 bytes for 4 copy threads" in d.log_tail()
    assert "freed 1 idle device(s)' staging rings" in d.log_tail()
    d.finish()
    # A limit below a full ring: the ring is made for the threads that fit.
    d, root = start(workdir, args=["--preload-threads", "4",
                                   "--staging-memory-limit", str(one + buf)])
    s = d.preload("two", "cuda:1")
    assert s["state"] == "ready" and s["preload"]["io"]["threads"] == 1, s
    assert status()["staging_bytes"] == {"cuda:1": one}
    assert "staging ring of 5 x 73728 bytes for 1 copy threads" in d.log_tail()
    d.finish()
    # Not even one thread's ring: the preload fails saying so.
    d, root = start(workdir, args=["--preload-threads", "4",
                                   "--staging-memory-limit", str(one - 1)])
    s = d.preload("two", "cuda:0")
    assert s["state"] == "failed" and "staging_memory_limit" in s["reason"], s
    d.finish()


def test_staging_room_is_waited_for(workdir):
    # Room for one copy thread's ring, not two: two devices' preloads at once
    # take turns (the second waits for the first's ring), neither fails.
    buf = (64 << 10) + 8192
    one = 5 * buf
    # 0.008 GB/s: each big load takes a second, the time to see the waits.
    d, root = start(workdir, {"CUDA_DOUBLE_LINK_GBPS": "0.008"}, more=bigs,
                    args=["--preload-threads", "4", "--staging-memory-limit", str(one + buf)])
    assert post(d, "big0", {"device": "cuda:0"}).status == 202
    assert post(d, "big1", {"device": "cuda:1"}).status == 202
    for name in ("big0", "big1"):
        s = d.wait(name, lambda s: s["state"] in ("ready", "failed"))
        assert s["state"] == "ready", s
    assert "waiting for another device's staging ring" in d.log_tail(1 << 20)
    assert sum(d.json("/v1/models")["gpu"]["staging_bytes"].values()) <= one + buf
    # A waiting preload evicted: its wait ends, and the device loads again.
    assert post(d, "big0", {"device": "cuda:1"}).status == 202
    on1 = lambda: [i for i in d.gpu("big0")["instances"] if i["device"] == "cuda:1"][0]
    tdutil.wait_for(lambda: on1()["progress"]["bytes_done"] > 0, 20, "big0 copying on cuda:1")
    assert post(d, "two", {"device": "cuda:0"}).status == 202  # cuda:1's ring in use: waits
    waits = lambda: d.log_tail(1 << 20).count("waiting for another device's staging ring")
    tdutil.wait_for(lambda: waits() >= 2, 20, "the second wait")
    assert on1()["state"] == "loading", on1()  # the wait was for its ring
    r = d.request("DELETE", "/v1/models/two/gpu?device=cuda:0")
    assert r.status in (200, 202), r
    d.wait("big0", lambda s: all(i["state"] == "ready" for i in s.get("instances", [s])))
    assert d.preload("two", "cuda:0")["state"] == "ready"
    d.finish()


def test_config_names_a_model_once_per_device(workdir):
    d, root = start(workdir, args=["--preload", "two@cuda:0,two@cuda:1"])
    s = all_ready(d, "two", 2)  # /readyz waited for both (the daemon started)
    assert sorted(i["device"] for i in s["instances"]) == ["cuda:0", "cuda:1"], s
    d.finish()
