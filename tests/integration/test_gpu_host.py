"""GPU preload and sharing on the host (memfd) backend, end to end: a daemon of
its own (start-up preload, verify on, a tiny staging ring so every load goes
round it many times), HTTP preload/state/evict, the lease socket from worker
processes (the C client CLI and the Python binding), byte equality with the
files, lease semantics (evict while leased, SIGKILL ends a lease) and a new
generation on reload. The socket protocol itself (the allow-list, malformed
messages) is in test_gpu_socket.py; shared helpers are in gpuhost.py.
"""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import tdutil
from gpuhost import (CLIENT_CLI, ask, connect, gpu_state, model_tensors, rand, sha,
                     start_c_holder, wait_state, worker_env)
from tdutil import gen_models

# Worker using the Python binding: prints one JSON line per snapshot
# {"generation", "tensors": {name: [dtype, shape, sha256]}}; with "hold" it
# waits for a line on stdin, then hashes the same arrays again (after an
# evict or a reload they must still be the bytes it opened).
WORKER = r"""
import hashlib, json, sys, tensord
sock, model, mode = sys.argv[1:4]
c = tensord.connect(sock)
m = c.open(model)
arrays = {k: m[k] for k in m}
def snap():
    return {"generation": m.generation, "backend": m.backend, "verify": m.verify(),
            "tensors": {k: [m.info(k)["dtype"], list(a.shape), a.flags.writeable,
                            hashlib.sha256(a.tobytes()).hexdigest()] for k, a in arrays.items()}}
print(json.dumps(snap()), flush=True)
if mode == "hold":
    sys.stdin.readline()
    print(json.dumps(snap()), flush=True)
"""


def preload(d, model, device="host"):
    r = d.request("POST", f"/v1/models/{tdutil.q(model)}/gpu",
                  body=json.dumps({"device": device}).encode())
    assert r.status in (200, 202), r
    return wait_state(d, model, lambda s: s["state"] in ("ready", "failed"))


def evict(d, model):
    return d.request("DELETE", f"/v1/models/{tdutil.q(model)}/gpu")


def start_py_worker(d, model, mode="hold"):
    return subprocess.Popen([sys.executable, "-c", WORKER, d.sock, model, mode],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=worker_env())


def read_json_line(p):
    line = p.stdout.readline()
    assert line, f"worker said nothing: {p.stderr.read() if p.poll() is not None else ''}"
    return json.loads(line)


def expected_hashes(d, model):
    return {k: [dt, list(shape), False, sha(b)]
            for k, (dt, shape, b) in model_tensors(d.root, model).items()}


# --- tests -------------------------------------------------------------------


def test_startup_preload_ready(gd):
    """The config's preload is ready before /readyz said 200 (Daemon.start waited)."""
    s = gpu_state(gd, "gm-small")
    assert s["state"] == "ready" and s["device"] == "host" and s["backend"] == "host"
    assert s["generation"] >= 1 and s["preload"]["verified"] is True
    assert s["progress"]["bytes_done"] == s["progress"]["bytes_total"]
    exp = model_tensors(gd.root, "gm-small")
    assert {t["name"] for t in s["tensors"]} == set(exp)
    for t in s["tensors"]:
        dt, shape, b = exp[t["name"]]
        assert (t["dtype"], tuple(t["shape"]), t["nbytes"], t["alloc"]) == (dt, shape, len(b), 0)
    (a,) = s["allocations"]
    assert a["handle_types"] == ["memfd"] and a["alloc_size"] >= a["byte_size"]
    summary = [m for m in gd.json("/v1/models")["models"] if m["name"] == "gm-small"][0]["gpu"]
    assert summary["state"] == "ready" and summary["device"] == "host"


def test_never_loaded_is_state_none(gd):
    assert gpu_state(gd, "gm-two") == {"model": "gm-two", "state": "none"}


def io_uring_usable():
    """Whether this process may set up an io_uring (a kernel without it, or
    a seccomp filter or io_uring_disabled that forbids it, says no), asked
    of the kernel directly with io_uring_setup(2)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    fd = libc.syscall(425, 2, params)  # io_uring_setup: 425 on every architecture
    if fd < 0:
        return False
    os.close(fd)
    return True


def direct_reads_work(path):
    """Whether path opens with O_DIRECT and an aligned O_DIRECT read of it
    succeeds (tmpfs before Linux 6.6 refuses the open; some filesystems
    take the open and refuse the reads)."""
    import mmap
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError:
        return False
    try:
        buf = mmap.mmap(-1, 4096)  # page-aligned
        os.preadv(fd, [buf], 0)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def expected_io(path):
    """The loader's io mode for a file at path on this machine: io_uring
    when the kernel lets the daemon have a ring, with O_DIRECT when the
    file's filesystem serves direct reads, else pread."""
    if not io_uring_usable():
        return "pread"
    return "io_uring+O_DIRECT" if direct_reads_work(path) else "io_uring"


def set_page_cache(path, cached):
    """Reads path into the page cache, or drops it from there (posix_fadvise
    drops clean pages at once; tmpfs keeps them, and the test then expects
    the page cache)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        if cached:
            while os.read(fd, 1 << 20):
                pass
        else:
            os.fsync(fd)  # dirty pages stay cached: written back first, they can go
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def on_tmpfs(path):
    best, fstype = "", ""
    with open("/proc/self/mounts") as f:
        for line in f:
            mnt, typ = line.split()[1:3]
            if os.path.realpath(path).startswith(mnt.rstrip("/") + "/") and len(mnt) > len(best):
                best, fstype = mnt, typ
    return fstype == "tmpfs"


def test_preload_cold_then_warm(gd):
    """A file dropped from the page cache is read from the disk (O_DIRECT
    where the file system serves it), every byte of it handed to the disk
    mover by the copy threads that found it missing; read into the page
    cache, it is copied from there by the copy threads. GET says how many
    bytes went each way, and the metrics add them up."""
    path = os.path.join(gd.root, "gm-big.safetensors")
    # The hasher reads every file once after the start: wait, or it brings
    # the pages back.
    gd.wait_hashed()
    before = gd.json("/v1/metrics")["counters"]
    set_page_cache(path, cached=False)
    s = preload(gd, "gm-big")
    assert s["state"] == "ready", s
    total = s["progress"]["bytes_total"]
    assert s["progress"]["bytes_done"] == total > 6_000_000
    io = s["preload"]["io"]
    assert io["page_cache_bytes"] + io["disk_bytes"] == total
    assert io["depth"] == 3 and io["threads"] >= 1
    if on_tmpfs(path):
        assert io["page_cache_bytes"] == total and io["disk_reads"] == "none"
    else:
        # The header's page (read at the scan) may still be cached; the
        # data, dropped, comes from the disk.
        assert io["disk_bytes"] >= total - 2 * 2**20, io
        assert io["handed_over_bytes"] == io["disk_bytes"] and io["missing_runs"] >= 1, io
        assert io["disk_reads"] == expected_io(path)
    out = subprocess.run([CLIENT_CLI, "--socket", gd.sock, "open", "gm-big"],
                         capture_output=True, text=True, env=worker_env())
    assert out.returncode == 0 and "checksum: ok" in out.stdout, out

    assert evict(gd, "gm-big").status == 200
    set_page_cache(path, cached=True)
    s = preload(gd, "gm-big")
    assert s["state"] == "ready", s
    io = s["preload"]["io"]
    assert io["page_cache_bytes"] == total and io["disk_bytes"] == 0, io
    assert io["disk_reads"] == "none" and io["handed_over_bytes"] == 0
    out = subprocess.run([CLIENT_CLI, "--socket", gd.sock, "open", "gm-big"],
                         capture_output=True, text=True, env=worker_env())
    assert out.returncode == 0 and "checksum: ok" in out.stdout, out
    after = gd.json("/v1/metrics")["counters"]
    moved = sum(after[k] - before[k] for k in ("gpu_preload_page_cache_bytes",
                                               "gpu_preload_disk_bytes"))
    assert moved == 2 * total
    assert after["gpu_preload_bytes"] - before["gpu_preload_bytes"] == 2 * total
    assert evict(gd, "gm-big").status == 200


def test_staging_ring_is_kept_and_shown(gd):
    """The host device's staging ring (3 disk buffers of 64 KiB plus
    alignment slack) outlives the preloads and is reported in /v1/models'
    "gpu" and in the metrics, JSON and Prometheus."""
    preload(gd, "gm-small")
    ring = gd.json("/v1/models")["gpu"]["staging_bytes"]
    assert ring == {"host": 3 * (64 * 1024 + 2 * 4096)}, ring
    assert gd.json("/v1/metrics")["gpu"]["staging_bytes"] == ring["host"]
    prom = gd.get("/metrics").body.decode()
    assert f"tensord_gpu_staging_bytes {ring['host']}" in prom
    assert "tensord_gpu_preload_disk_bytes_total" in prom


def test_preload_again_same_device_is_200(gd):
    preload(gd, "gm-small")
    r = gd.request("POST", "/v1/models/gm-small/gpu", body=b'{"device": "host"}')
    assert r.status == 200 and r.json()["state"] == "ready"


@pytest.mark.parametrize("body,status,code", [
    (b"", 400, "bad_request"),
    (b"{", 400, "bad_request"),
    (b'{"device": 3}', 400, "bad_request"),
    (b'["host"]', 400, "bad_request"),
    (b'{"device": "tpu:0"}', 400, "bad_device"),
    (b'{"device": "cuda:x"}', 400, "bad_device"),
])
def test_preload_bad_body(gd, body, status, code):
    r = gd.request("POST", "/v1/models/gm-two/gpu", body=body)
    tdutil.assert_error(r, status, code)


def test_preload_cuda_without_gpu_says_unavailable(gd):
    r = gd.request("POST", "/v1/models/gm-two/gpu", body=b'{"device": "cuda:0"}')
    if r.status in (200, 202):
        pytest.skip("this machine has a GPU")
    err = tdutil.assert_error(r, 503, "gpu_unavailable")
    assert "CUDA" in err["message"] or "libcuda" in err["message"] or "GPU" in err["message"]


def test_preload_invalid_and_unknown_model(gd):
    tdutil.assert_error(gd.request("POST", "/v1/models/gm-invalid/gpu", body=b'{"device":"host"}'),
                        409, "model_invalid")
    r = gd.request("POST", "/v1/models/no-such-model/gpu", body=b'{"device":"host"}')
    assert r.status == 404


def test_a_page_of_another_site_cannot_preload_or_evict(gd):
    """Without tokens, any web page a user of the daemon's machine opens
    could preload and evict: a browser sends a cross-site POST with a
    text/plain body without asking first (a "simple" request, no preflight),
    and only the answer is kept from the page. Such a request carries an
    Origin naming the page: one that is neither the daemon's own origin nor
    in cors_origins changes nothing. Clients that send no Origin (curl,
    Python) and the console (its own origin) still can."""
    before = gpu_state(gd, "gm-two")["state"]
    for origin in ("https://evil.example", "null", f"http://127.0.0.2:{gd.port}"):
        r = gd.request("POST", "/v1/models/gm-two/gpu", {"Origin": origin,
                                                         "Content-Type": "text/plain"},
                       body=b'{"device": "host"}')
        tdutil.assert_error(r, 403, "cross_origin")
        r = gd.request("DELETE", "/v1/models/gm-small/gpu", {"Origin": origin})
        tdutil.assert_error(r, 403, "cross_origin")
    assert gpu_state(gd, "gm-two")["state"] == before
    assert gpu_state(gd, "gm-small")["state"] == "ready"
    # The daemon's own origin (the console) and no Origin at all may.
    for headers in ({"Origin": f"http://127.0.0.1:{gd.port}"}, {}):
        r = gd.request("POST", "/v1/models/gm-small/gpu", headers, body=b'{"device": "host"}')
        assert r.status == 200 and r.json()["state"] == "ready", r


def test_evict_not_loaded_is_404(gd):
    tdutil.assert_error(evict(gd, "gm-two"), 404, "not_loaded")


def test_two_processes_c_and_python_match_the_files(gd, tmp_path):
    """The C client and the Python binding open the same models at once, each
    in its own process, and read exactly the files' bytes."""
    preload(gd, "gm-sharded")
    holders = []
    try:
        for model in ("gm-small", "gm-sharded"):
            c = start_c_holder(gd, model)
            py = start_py_worker(gd, model)
            holders += [c, py]
            snap = read_json_line(py)
            assert snap["backend"] == "host" and snap["verify"] is True
            assert snap["tensors"] == expected_hashes(gd, model)
            assert gpu_state(gd, model)["leases"] == 2
            dump = tmp_path / model
            dump.mkdir()
            out = subprocess.run([CLIENT_CLI, "--socket", gd.sock, "open", model,
                                  "--dump", str(dump)], capture_output=True, text=True,
                                 env=worker_env())
            assert out.returncode == 0 and "checksum: ok" in out.stdout, out
            for name, (_dt, _shape, b) in model_tensors(gd.root, model).items():
                got = (dump / (name.replace("/", "%2F") + ".bin")).read_bytes()
                assert got == b, name
    finally:
        for p in holders:
            p.communicate("\n", timeout=10)
    for model in ("gm-small", "gm-sharded"):
        wait_state(gd, model, lambda s: s["leases"] == 0)


def test_python_mapping_api(gd):
    code = r"""
import sys, tensord, numpy as np
c = tensord.connect(sys.argv[1])
assert [m["name"] for m in c.list() if m["name"] == "gm-small"] == ["gm-small"]
m = c.open("gm-small", device="host")
assert len(m) == 6 and set(m) >= {"a.f32", "e.empty"}
a = m["a.f32"]
assert a.dtype == np.float32 and a.shape == (7, 5) and not a.flags.writeable
assert m["e.empty"].shape == (0, 4) and m["f.bool"].dtype == np.bool_
assert m["c.bf16"].dtype == np.uint16           # raw bits: NumPy has no bfloat16
assert m.read("d.u8") == m["d.u8"].tobytes()
try:
    a[0, 0] = 1
    raise SystemExit("writable")
except ValueError:
    pass
try:
    c.open("gm-small", device="cuda:0")
    raise SystemExit("opened on cuda")
except tensord.TensordError as e:
    assert "gpu_unavailable" in str(e) or "wrong_device" in str(e), e
try:
    c.open("nope")
    raise SystemExit("opened nope")
except tensord.TensordError as e:
    assert "model_not_found" in str(e) and 'no model named "nope"' in str(e), e
del m, a
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code, gd.sock], capture_output=True, text=True,
                         env=worker_env(), timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out


def test_evict_while_leased_drains_and_memory_stays_valid(gd):
    preload(gd, "gm-lease")
    exp = expected_hashes(gd, "gm-lease")
    w = start_py_worker(gd, "gm-lease")
    try:
        first = read_json_line(w)
        assert first["tensors"] == exp
        r = evict(gd, "gm-lease")
        assert r.status == 202 and r.json()["state"] == "draining" and r.json()["leases"] == 1, r
        s = gpu_state(gd, "gm-lease")
        assert s["state"] == "draining" and s["leases"] == 1
        with connect(gd) as c:  # new opens are refused while it drains
            a = ask(c, {"op": "open", "model": "gm-lease"})
            assert a["ok"] is False and a["error"]["code"] == "not_loaded"
        out, err = w.communicate("\n", timeout=20)
        assert w.returncode == 0, err
        second = json.loads(out.splitlines()[-1])
        assert second["tensors"] == exp  # still mapped and intact after the evict
    finally:
        if w.poll() is None:
            w.kill()
    wait_state(gd, "gm-lease", lambda s: s["state"] == "none")


def test_sigkill_releases_the_lease(gd):
    preload(gd, "gm-kill")
    c = start_c_holder(gd, "gm-kill")
    py = start_py_worker(gd, "gm-kill")
    read_json_line(py)
    assert gpu_state(gd, "gm-kill")["leases"] == 2
    c.kill()
    c.wait()
    wait_state(gd, "gm-kill", lambda s: s["leases"] == 1)
    py.kill()
    py.wait()
    wait_state(gd, "gm-kill", lambda s: s["leases"] == 0)
    r = evict(gd, "gm-kill")  # no lease left: released at once
    assert r.status == 200 and r.json()["state"] == "none", r


def test_reload_bumps_generation(gd):
    s0 = preload(gd, "gm-reload")
    g0 = s0["generation"]
    old = expected_hashes(gd, "gm-reload")
    w = start_py_worker(gd, "gm-reload")
    try:
        assert read_json_line(w)["generation"] == g0
        # Same names and shapes, new bytes, a new file (new inode and mtime).
        path = os.path.join(gd.root, "gm-reload.safetensors")
        rng = np.random.default_rng(99)
        tmp = path + ".tmp"
        gen_models.write_safetensors(tmp, [("w", "F32", (64, 33), rand(rng, "F32", (64, 33))),
                                           ("b", "I32", (33,), rand(rng, "I32", (33,)))],
                                     mtime=None)
        os.replace(tmp, path)
        gd.proc.send_signal(signal.SIGHUP)
        s1 = wait_state(gd, "gm-reload", lambda s: s["generation"] > g0 and s["state"] == "ready")
        new = expected_hashes(gd, "gm-reload")
        assert new != old
        with connect(gd) as c:
            a = ask(c, {"op": "open", "model": "gm-reload"})
            assert a["ok"] and a["generation"] == s1["generation"]
        out = subprocess.run([sys.executable, "-c", WORKER, gd.sock, "gm-reload", "once"],
                             capture_output=True, text=True, env=worker_env(), timeout=60)
        assert json.loads(out.stdout)["tensors"] == new, out
        # The old generation drains until its worker lets go; its bytes are the old ones.
        status = gd.json("/v1/models/gm-reload/gpu")
        assert status["generation"] == s1["generation"]
        out, _ = w.communicate("\n", timeout=20)
        snap = json.loads(out.splitlines()[-1])
        assert snap["generation"] == g0 and snap["tensors"] == old
    finally:
        if w.poll() is None:
            w.kill()


def test_preload_and_hasher_read_a_file_once(tmp_path):
    """A cold preload of a file whose content hash is not known yet: the
    hasher holds off (one stream on the disk, not two), the preload reads the
    file through the page cache instead of O_DIRECT, and the hasher then finds
    every page there and records the file's SHA-256."""
    root = tmp_path / "models"
    rng = np.random.default_rng(31)
    path = root / "hp" / "model.safetensors"
    gen_models.write_safetensors(str(path), [("w", "F32", (2000, 1000),
                                              rand(rng, "F32", (2000, 1000)))])
    want = hashlib.sha256(path.read_bytes()).hexdigest()
    set_page_cache(str(path), cached=False)
    work = tmp_path / "run"
    work.mkdir()
    # Hashing paced to 64 KiB/s: the file's hash is far from known when the
    # preload starts.
    d = tdutil.Daemon(str(root), str(work), extra_args=[
        "--hash-max-bytes-per-second", "64K", "--staging-buffers", "3",
        "--staging-buffer-bytes", "1M"])
    d.start()
    try:
        set_page_cache(str(path), cached=False)  # what the hasher read so far goes too
        s = preload(d, "hp")
        assert s["state"] == "ready", s
        io = s["preload"]["io"]
        assert io["disk_bytes"] > 0 and "O_DIRECT" not in io["disk_reads"], io
        # Every page is in the page cache now, for the hasher.
        fd = os.open(path, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            buf = bytearray(1 << 20)
            off = 0
            while off < size:
                off += os.preadv(fd, [buf], off, os.RWF_NOWAIT)  # EAGAIN if a page is missing
        finally:
            os.close(fd)
        # A route that needs the hash asks for it (unpaced): the hasher reads
        # it from the page cache.
        r = d.head("/hp/resolve/main/model.safetensors")
        assert r.status in (200, 302) and r.header("X-Linked-Etag").strip('"') == want, r
    finally:
        d.stop_checked()


# Opens rank R of a partition and prints each tensor's [shape, sha256, part].
RANK_WORKER = r"""
import hashlib, json, sys, tensord
sock, model, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = tensord.connect(sock)
m = c.open(model, device="host", rank=rank)
print(json.dumps({"world": m.world, "rank": m.rank, "split": m.split, "verify": m.verify(),
                  "tensors": {k: [list(m.info(k)["shape"]), hashlib.sha256(m.read(k)).hexdigest(),
                                  m.info(k)["part"]] for k in m}}))
"""


def test_two_ranks_of_a_split_on_the_host(gd):
    """Both ranks of a world of 2 on the one host device: each rank's bytes
    are numpy.array_split's part of every *.weight along dim 0 (9 rows: 5
    and 4) and what POST /fetch sends for the same split; the C client names
    the rank too; each rank is evicted alone."""
    rules = [{"match": "*.0.weight", "dim": 0}, {"match": "*.weight", "dim": -1}]
    assert gd.request("DELETE", "/v1/models/gm-sharded/gpu").status in (200, 404)
    wait_state(gd, "gm-sharded", lambda s: s["state"] == "none")
    r = gd.request("POST", "/v1/models/gm-sharded/gpu", body=json.dumps(
        {"devices": ["host", "host"], "split": {"world": 2, "rules": rules}}).encode())
    assert r.status == 202 and [i["rank"] for i in r.json()["instances"]] == [0, 1], r.body
    for rank in (0, 1):
        wait_state(gd, "gm-sharded", lambda s: all(i["state"] == "ready"
                                                    for i in s["instances"]))
    files = model_tensors(gd.root, "gm-sharded")
    for rank in (0, 1):
        out = subprocess.run([sys.executable, "-c", RANK_WORKER, gd.sock, "gm-sharded", str(rank)],
                             capture_output=True, text=True, env=worker_env(), timeout=60)
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
        assert got["world"] == 2 and got["rank"] == rank and got["verify"], got
        assert got["split"] == {"world": 2, "rank": rank, "rules": rules}
        f = gd.request("POST", "/v1/models/gm-sharded/fetch", body=json.dumps(
            {"split": {"world": 2, "rank": rank, "rules": rules}}).encode())
        assert f.status == 200, f.body
        fetched = tdutil.read_safetensors_bytes(f.body)[2]
        for name, (dt, shape, b) in files.items():
            dim = 0 if name.endswith(".0.weight") else len(shape) - 1
            a = np.frombuffer(b, np.uint16).reshape(shape)  # F16: two bytes an element
            part = np.array_split(a, 2, axis=dim)[rank]
            lo = sum(x.shape[dim] for x in np.array_split(a, 2, axis=dim)[:rank])
            assert got["tensors"][name] == [list(part.shape), sha(part.tobytes()), {
                "dim": dim, "start": lo, "stop": lo + part.shape[dim], "length": shape[dim]}]
            assert fetched[name][1] == part.shape and fetched[name][2] == part.tobytes()
    out = subprocess.run([CLIENT_CLI, "--socket", gd.sock, "open", "gm-sharded", "--rank", "1"],
                         capture_output=True, text=True, env=worker_env(), timeout=60)
    assert out.returncode == 0 and "rank 1 of 2" in out.stdout, out
    assert "dim 0 [5:9] of 9" in out.stdout, out.stdout
    out = subprocess.run([CLIENT_CLI, "--socket", gd.sock, "open", "gm-sharded"],
                         capture_output=True, text=True, env=worker_env(), timeout=60)
    assert out.returncode != 0 and "ambiguous" in out.stderr, out
    r = gd.request("DELETE", "/v1/models/gm-sharded/gpu?device=host&rank=1")
    assert r.status == 200 and r.json()["instances"][0]["rank"] == 1, r.body
    s = gpu_state(gd, "gm-sharded")
    assert s["rank"] == 0 and s["world"] == 2 and s["state"] == "ready", s
    assert gd.request("DELETE", "/v1/models/gm-sharded/gpu?rank=1").status == 404
    assert gd.request("DELETE", "/v1/models/gm-sharded/gpu").status == 200


def test_partition_smaller_than_its_files(gd):
    """A partition holds less than its shard (gm-big's 6 MB, cut in two):
    the open answer's byte_size, the checksums and verify are over what the
    allocation holds, not the whole shard (a client refused the answer, and
    the checksum thread read past the allocation, when they used the
    shard's size)."""
    rules = [{"match": "big", "dim": 0}]
    r = gd.request("POST", "/v1/models/gm-big/gpu", body=json.dumps(
        {"devices": ["host", "host"], "split": {"world": 2, "rules": rules}}).encode())
    assert r.status == 202, r.body
    wait_state(gd, "gm-big", lambda s: all(i["state"] == "ready" for i in s["instances"]))
    files = model_tensors(gd.root, "gm-big")
    for rank in (0, 1):
        deadline = time.monotonic() + 20
        while True:
            s = gd.get(f"/v1/models/gm-big/gpu?device=host&world=2&rank={rank}").json()
            if s.get("checksums") != "pending":
                break
            assert time.monotonic() < deadline, s
            time.sleep(0.02)
        assert s["checksums"] == "ready", s
        a = np.frombuffer(files["big"][2], np.float32).reshape(1500, 1000)
        part = np.array_split(a, 2, axis=0)[rank]
        assert s["allocations"][0]["byte_size"] == part.nbytes + 4097, s["allocations"]
        out = subprocess.run([sys.executable, "-c", RANK_WORKER, gd.sock, "gm-big", str(rank)],
                             capture_output=True, text=True, env=worker_env(), timeout=60)
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
        assert got["verify"] and got["tensors"]["big"][:2] == [list(part.shape),
                                                               sha(part.tobytes())], got
        assert got["tensors"]["tail"][:2] == [[4097], sha(files["tail"][2])]
    assert gd.request("DELETE", "/v1/models/gm-big/gpu").status == 200
