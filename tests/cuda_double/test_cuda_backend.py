"""The daemon's CUDA backend and the client's CUDA import path, end to end,
against the driver test double: preload (a small staging ring, verify,
legacy IPC), two worker processes (the C client and the Python binding with
NumPy over the double's memory) compared byte for byte with the files,
leases, evict while leased, reload generations, start-up preloads."""
import base64
import ctypes
import json
import os
import signal
import struct
import subprocess
import sys

import numpy as np
import pytest

import tdutil
from conftest import (CudaDaemon, ask, c_client, c_holder, end_worker, expected, model_tensors,
                      py_worker, rand, read_line, read_report, assert_clean, worker_env, kill,
                      gen_models, DOUBLE_DIR)

UUID0 = "GPU-5d6e7f90-a1b2-c3d4-e5f6-0718293a4b00"


def test_probe_lists_the_double(start):
    d = start()
    g = d.json("/v1/models")["gpu"]
    assert g["available"] is True and "cuda" in g["backends"]
    assert [x["index"] for x in g["devices"]] == [0]
    dev = g["devices"][0]
    assert dev["uuid"] == UUID0 and "test double" in dev["name"] and "error" not in dev
    d.finish()


@pytest.mark.parametrize("link", [None, "4"], ids=["deferred", "link"])
def test_preload_two_workers_evict_while_leased(start, tmp_path, link):
    """Preload through a 3 x 64 KiB ring with verify and legacy IPC; the C
    client and the Python binding open every model at once and read exactly
    the files' bytes; evict while both hold leases: draining, the memory
    stays valid in both, released with the last lease. Both ways the double
    runs copies: when waited for, and on its copy engine over a link."""
    d = start(env={"CUDA_DOUBLE_LINK_GBPS": link} if link else None,
              args=["--verify", "true", "--legacy-ipc", "true"])
    for model in ("cm-small", "cm-sharded", "cm-big"):
        s = d.preload(model)
        assert s["state"] == "ready", s
        assert s["backend"] == "cuda" and s["device"] == "cuda:0" and s["device_uuid"] == UUID0
        assert s["preload"]["verified"] is True
        nshards = 3 if model == "cm-sharded" else 1
        assert len(s["allocations"]) == nshards
        for a in s["allocations"]:
            assert a["alloc_size"] % (2 << 20) == 0 and a["alloc_size"] >= a["byte_size"]
            assert a["handle_types"] == ["posix_fd", "cuda_ipc"]
    holders = []
    try:
        for model in ("cm-small", "cm-sharded", "cm-big"):
            c = c_holder(d, model)
            py = py_worker(d, model)
            holders += [(c, None), (py, model)]
            snap = read_line(py)
            assert snap["backend"] == "cuda" and snap["verify"] is True
            assert snap["uuid"] == UUID0 and snap["index"] == 0 and snap["dlpack"] == [2, 0]
            assert snap["tensors"] == expected(d.root, model)
            assert d.gpu(model)["leases"] == 2
            dump = tmp_path / model
            dump.mkdir()
            out = c_client(d, model, "--dump", str(dump))
            assert out.returncode == 0 and "checksum: ok" in out.stdout, out
            assert_clean(read_report(d.work, out.pid), (), out.stderr)
            for name, (_dt, _shape, b) in model_tensors(d.root, model).items():
                assert (dump / (name.replace("/", "%2F") + ".bin")).read_bytes() == b, name
        # Evict while leased.
        r = d.evict("cm-big")
        assert r.status == 202 and r.json()["state"] == "draining", r.body
        refused = c_client(d, "cm-big")
        assert refused.returncode != 0
        for p, model in holders:
            if model == "cm-big":
                snaps = end_worker(p, d.work)
                assert snaps[-1]["tensors"] == expected(d.root, "cm-big")
        assert d.gpu("cm-big")["state"] == "draining"
    finally:
        for p, model in holders:
            if p.poll() is None:
                if model is None:
                    p.communicate("\n", timeout=30)
                else:
                    end_worker(p, d.work)
    d.wait("cm-big", lambda s: s["state"] == "none")
    for model in ("cm-small", "cm-sharded"):
        d.wait(model, lambda s: s["leases"] == 0)
    d.finish()


def test_sigkill_ends_the_lease_and_the_daemon_frees(start):
    d = start()
    assert d.preload("cm-two")["state"] == "ready"
    c = c_holder(d, "cm-two")
    assert d.gpu("cm-two")["leases"] == 1
    assert d.evict("cm-two").status == 202
    kill(c)
    d.wait("cm-two", lambda s: s["state"] == "none")
    d.finish()


def test_legacy_ipc_handle_opens_in_another_process(start):
    """The cuda_ipc handle of the open answer, opened with cuIpcOpenMemHandle
    in another process (as Triton would), holds the shard's bytes: the
    daemon's cuMemcpyDtoD into the legacy copy ran after every copy landed."""
    d = start(args=["--legacy-ipc", "true"])
    assert d.preload("cm-sharded")["state"] == "ready"
    ans, fds, conn = ask(d.sock, {"op": "open", "model": "cm-sharded"})
    try:
        assert ans["ok"], ans
        allocs = ans["allocations"]
        assert all(a["legacy_byte_size"] % (2 << 20) == 0 for a in allocs)
        script = r"""
import base64, ctypes, json, sys
cu = ctypes.CDLL("libcuda.so.1")
def fn(name, *argtypes):
    p = ctypes.c_void_p()
    assert cu.cuGetProcAddress_v2(name.encode(), ctypes.byref(p), 12000, 0, None) == 0 and p.value
    return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(p.value)
vp, u64 = ctypes.c_void_p, ctypes.c_uint64
init = fn("cuInit", ctypes.c_uint)
retain = fn("cuDevicePrimaryCtxRetain", ctypes.POINTER(vp), ctypes.c_int)
release = fn("cuDevicePrimaryCtxRelease", ctypes.c_int)
setcur = fn("cuCtxSetCurrent", vp)
class H(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]
opn = fn("cuIpcOpenMemHandle", ctypes.POINTER(u64), H, ctypes.c_uint)
close = fn("cuIpcCloseMemHandle", u64)
dtoh = fn("cuMemcpyDtoH", vp, u64, ctypes.c_size_t)
assert init(0) == 0
ctx = vp()
assert retain(ctypes.byref(ctx), 0) == 0 and setcur(ctx) == 0
out = []
for a in json.loads(sys.argv[1]):
    h = H()
    raw = base64.b64decode(a["raw_handle"]["b64"])
    assert len(raw) == 64
    ctypes.memmove(ctypes.addressof(h), raw, 64)
    p = u64()
    assert opn(ctypes.byref(p), h, 1) == 0
    buf = ctypes.create_string_buffer(a["byte_size"])
    assert dtoh(buf, p, a["byte_size"]) == 0
    out.append(buf.raw.hex())
    assert close(p) == 0
assert setcur(None) == 0 and release(0) == 0
print(json.dumps(out))
"""
        p = subprocess.Popen([sys.executable, "-c", script, json.dumps(allocs)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=worker_env(d.work, python=True))
        p.stdout, p.stderr = p.communicate(timeout=60)
        assert p.returncode == 0, p.stderr[-3000:]
        got = json.loads(p.stdout)
        files = sorted(os.listdir(os.path.join(d.root, "cm-sharded")))
        shards = [f for f in files if f.endswith(".safetensors")]
        for a, hexbytes in zip(allocs, got):
            with open(os.path.join(d.root, "cm-sharded", a["file"]), "rb") as f:
                blob = f.read()
            (n,) = struct.unpack("<Q", blob[:8])
            assert bytes.fromhex(hexbytes) == blob[8 + n:], a["file"]
        assert len(got) == len(shards)
        assert_clean(read_report(d.work, p.pid), (), p.stderr[-2000:])
    finally:
        for fd in fds:
            os.close(fd)
        conn.close()
    d.wait("cm-sharded", lambda s: s["leases"] == 0)
    d.finish()


def test_reload_new_generation_old_one_drains(start):
    d = start()
    s0 = d.preload("cm-reload")
    g0 = s0["generation"]
    old = expected(d.root, "cm-reload")
    w = py_worker(d, "cm-reload")
    try:
        assert read_line(w)["generation"] == g0
        path = os.path.join(d.root, "cm-reload.safetensors")
        rng = np.random.default_rng(1515)
        tmp = path + ".tmp"
        gen_models.write_safetensors(tmp, [("w", "F32", (64, 33), rand(rng, "F32", (64, 33))),
                                           ("b", "I32", (33,), rand(rng, "I32", (33,)))],
                                     mtime=None)
        os.replace(tmp, path)
        d.proc.send_signal(signal.SIGHUP)
        s1 = d.wait("cm-reload", lambda s: s["generation"] > g0 and s["state"] == "ready")
        new = expected(d.root, "cm-reload")
        assert new != old
        w2 = py_worker(d, "cm-reload", mode="once")
        snaps = end_worker(w2, d.work)
        assert snaps[0]["generation"] == s1["generation"] and snaps[0]["tensors"] == new
        snaps = end_worker(w, d.work)
        assert snaps[-1]["generation"] == g0 and snaps[-1]["tensors"] == old
    finally:
        kill(w)
    d.finish()


def test_startup_preload_and_readyz(start):
    d = start(args=["--preload", "cm-small@cuda:0,cm-two@" + UUID0])
    # Daemon.start waited for /readyz: both start-up preloads have ended.
    assert d.gpu("cm-small")["state"] == "ready"
    s = d.gpu("cm-two")
    assert s["state"] == "ready" and s["device_uuid"] == UUID0
    out = c_client(d, "cm-two")
    assert out.returncode == 0 and "checksum: ok" in out.stdout, out
    d.finish()


def test_evict_while_loading_cancels_and_frees(start):
    d = start(args=["--staging-buffer-bytes", "64K"])
    r = d.post("cm-big")
    assert r.status == 202
    d.evict("cm-big")
    d.wait("cm-big", lambda s: s["state"] in ("none", "ready", "draining"))
    assert d.preload("cm-big")["state"] == "ready"
    d.finish()


def set_page_cache(path, cached):
    """Reads path into the page cache, or writes it back and drops it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if cached:
            while os.read(fd, 1 << 20):
                pass
        else:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_cold_and_warm_preloads_share_one_staging_ring(start):
    """Three copy threads, each with two staging buffers and a stream per
    buffer, and three disk reads in flight: a cold preload reads the disk, a
    warm one copies the page cache from several threads at once, both land
    the files' bytes (the double performs an asynchronous copy only when it
    is waited for, so a buffer refilled too early shows as wrong bytes), and
    the pinned ring is allocated once for both."""
    d = start(args=["--preload-threads", "3"])
    d.wait_hashed()  # the hasher reads every file once: it would bring the pages back
    path = os.path.join(d.root, "cm-big.safetensors")
    ios = []
    for cached in (False, True):
        set_page_cache(path, cached)
        s = d.preload("cm-big")
        assert s["state"] == "ready", s
        total, io = s["progress"]["bytes_total"], s["preload"]["io"]
        assert io["page_cache_bytes"] + io["disk_bytes"] == total
        ios.append(io)
        out = c_client(d, "cm-big")
        assert out.returncode == 0 and "checksum: ok" in out.stdout, out
        py = py_worker(d, "cm-big")
        assert read_line(py)["tensors"] == expected(d.root, "cm-big")
        end_worker(py, d.work)
        assert d.evict("cm-big").status in (200, 202)
        d.wait("cm-big", lambda s: s["state"] == "none")
    cold, warm = ios
    assert cold["disk_bytes"] > 0 and cold["disk_reads"].startswith("io_uring"), cold
    assert warm["page_cache_bytes"] == total and warm["threads"] == 3, warm
    ring = d.json("/v1/models")["gpu"]["staging_bytes"]
    assert ring == {"cuda:0": (3 + 2 * 3) * (64 * 1024 + 2 * 4096)}, ring
    assert d.log_tail(100000).count("staging ring of") == 1
    d.finish()


def set_affinity(pid, cpus):
    """Every thread of process pid may run on cpus (as taskset -a does)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(tid), cpus)


def test_copy_threads_grow_with_the_cpus(start):
    """preload_threads 0 is one copy thread per CPU the daemon may use, asked
    at each preload: when that grows after the device's staging ring was
    made (taskset, a cgroup's cpuset), the ring is made again for the new
    count. It was kept as it was, and the new threads' buffers lay past its
    end (a heap overflow of the pinned ring, and of its stream table)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        import pytest
        pytest.skip("needs two CPUs")
    d = start()
    d.wait_hashed()
    path = os.path.join(d.root, "cm-big.safetensors")
    set_affinity(d.pid, {cpus[0]})
    for n_cpus in (1, 2):
        set_affinity(d.pid, set(cpus[:n_cpus]))
        set_page_cache(path, True)
        s = d.preload("cm-big")
        assert s["state"] == "ready", s
        assert s["preload"]["io"]["threads"] == n_cpus, s["preload"]["io"]
        out = c_client(d, "cm-big")
        assert out.returncode == 0 and "checksum: ok" in out.stdout, out
        py = py_worker(d, "cm-big")
        assert read_line(py)["tensors"] == expected(d.root, "cm-big")
        end_worker(py, d.work)
        assert d.evict("cm-big").status in (200, 202)
        d.wait("cm-big", lambda s: s["state"] == "none")
    set_affinity(d.pid, set(cpus))
    ring = d.json("/v1/models")["gpu"]["staging_bytes"]
    assert ring == {"cuda:0": (3 + 2 * 2) * (64 * 1024 + 2 * 4096)}, ring
    d.finish()
