"""GPU preload and sharing on the host (memfd) backend, end to end: a daemon of
its own (start-up preload, verify on, a tiny staging ring so every load goes
round it many times), HTTP preload/state/evict, the lease socket from worker
processes (the C client CLI and the Python binding), byte equality with the
files, lease semantics (evict while leased, SIGKILL ends a lease), a new
generation on reload, the uid/gid allow-list, and malformed socket messages.
"""
import hashlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

import tdutil
from tdutil import gen_models

REPO = tdutil.REPO
CLIENT_LIB = os.path.join(REPO, "build", "libtensord-client.so")
CLIENT_CLI = os.path.join(REPO, "build", "tensord-client")
PYPATH = os.path.join(REPO, "client", "python")
ALLOWED_UID, ALLOWED_GID, OTHER_UID = 12345, 23456, 34567
NOBODY = 65534
MAX_REQUEST = 64 << 10  # IPC_MAX_REQUEST: the largest valid request (two escaped names) fits

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


def sha(b):
    return hashlib.sha256(b).hexdigest()


def file_tensors(path):
    """{name: (dtype, shape, bytes)} read from the file itself."""
    with open(path, "rb") as f:
        return tdutil.read_safetensors_bytes(f.read())[2]


def model_tensors(root, model):
    """Every tensor of a (possibly sharded) model directory or file."""
    single = os.path.join(root, model + ".safetensors")
    if os.path.exists(single):
        return file_tensors(single)
    out = {}
    d = os.path.join(root, model)
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(file_tensors(os.path.join(d, f)))
    return out


def rand(rng, dtype, shape):
    return bytes(gen_models.random_data(rng, dtype, shape))


def write_models(root):
    rng = np.random.default_rng(5)
    gen_models.write_safetensors(os.path.join(root, "gm-small.safetensors"), [
        ("a.f32", "F32", (7, 5), rand(rng, "F32", (7, 5))),
        ("b.i64", "I64", (3,), rand(rng, "I64", (3,))),
        ("c.bf16", "BF16", (4, 4), rand(rng, "BF16", (4, 4))),
        ("d.u8", "U8", (13,), rand(rng, "U8", (13,))),
        ("e.empty", "F32", (0, 4), b""),
        ("f.bool", "BOOL", (5,), bytes([1, 0, 1, 1, 0])),
    ], {"format": "pt"})
    # Sharded, with an index.
    d = os.path.join(root, "gm-sharded")
    wm = {}
    for k in range(2):
        name = f"model-0000{k + 1}-of-00002.safetensors"
        ts = [(f"layers.{k}.{j}.weight", "F16", (9, 3 + j), rand(rng, "F16", (9, 3 + j)))
              for j in range(3)]
        gen_models.write_safetensors(os.path.join(d, name), ts)
        wm.update({t[0]: name for t in ts})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f)
    # ~6 MB: hundreds of 64 KiB chunks through the 3-buffer ring, data not page-aligned.
    gen_models.write_safetensors(os.path.join(root, "gm-big.safetensors"), [
        ("big", "F32", (1500, 1000), rand(rng, "F32", (1500, 1000))),
        ("tail", "U8", (4097,), rand(rng, "U8", (4097,))),
    ])
    for name in ("gm-lease", "gm-kill", "gm-reload", "gm-two"):
        gen_models.write_safetensors(os.path.join(root, name + ".safetensors"), [
            ("w", "F32", (64, 33), rand(rng, "F32", (64, 33))),
            ("b", "I32", (33,), rand(rng, "I32", (33,))),
        ])
    with open(os.path.join(root, "gm-invalid.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", 2) + b"[]")


@pytest.fixture(scope="module")
def gd():
    """A daemon with the GPU options set; its socket is reachable by any uid
    (the allow-list is what refuses)."""
    base = tempfile.mkdtemp(prefix="tensord-gpu-")
    os.chmod(base, 0o755)
    root = os.path.join(base, "models")
    write_models(root)
    work = os.path.join(base, "run")
    os.mkdir(work)
    os.chmod(work, 0o755)
    d = tdutil.Daemon(root, work, extra_args=[
        "--preload", "gm-small@host", "--allow-uids", str(ALLOWED_UID),
        "--allow-gids", str(ALLOWED_GID), "--staging-buffers", "3",
        "--staging-buffer-bytes", "64K", "--verify", "true"])
    try:
        d.start()
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    d.root = root
    d.sock = os.path.join(work, "tensord.sock")
    yield d
    try:
        d.stop_checked()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def gpu_state(d, model):
    r = d.get(f"/v1/models/{tdutil.q(model)}/gpu")
    assert r.status == 200, r
    return r.json()


def wait_state(d, model, pred, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        s = gpu_state(d, model)
        if pred(s):
            return s
        assert time.monotonic() < deadline, f"{model}: timed out in {s}"
        time.sleep(0.02)


def preload(d, model, device="host"):
    r = d.request("POST", f"/v1/models/{tdutil.q(model)}/gpu",
                  body=json.dumps({"device": device}).encode())
    assert r.status in (200, 202), r
    return wait_state(d, model, lambda s: s["state"] in ("ready", "failed"))


def evict(d, model):
    return d.request("DELETE", f"/v1/models/{tdutil.q(model)}/gpu")


def worker_env():
    env = dict(os.environ, PYTHONPATH=PYPATH, TENSORD_CLIENT_LIB=CLIENT_LIB)
    env.pop("LD_PRELOAD", None)
    return env


def start_py_worker(d, model, mode="hold"):
    return subprocess.Popen([sys.executable, "-c", WORKER, d.sock, model, mode],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=worker_env())


def read_json_line(p):
    line = p.stdout.readline()
    assert line, f"worker said nothing: {p.stderr.read() if p.poll() is not None else ''}"
    return json.loads(line)


def start_c_holder(d, model):
    p = subprocess.Popen([CLIENT_CLI, "--socket", d.sock, "open", model, "--hold"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=worker_env())
    for line in p.stdout:
        if line.startswith("holding"):
            return p
    raise AssertionError(f"tensord-client did not hold: {p.stderr.read()}")


def expected_hashes(d, model):
    return {k: [dt, list(shape), False, sha(b)]
            for k, (dt, shape, b) in model_tensors(d.root, model).items()}


# --- raw socket helpers ------------------------------------------------------


def frame(obj):
    b = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return struct.pack("<I", len(b)) + b


def recv_answer(s):
    """(answer dict, [fds]) of exactly one frame; None when the daemon closed
    the connection."""
    data, fds = b"", []

    def need():
        return 4 - len(data) if len(data) < 4 else 4 + struct.unpack("<I", data[:4])[0] - len(data)

    while need() > 0:
        try:
            msg, anc, _flags, _addr = s.recvmsg(need(), socket.CMSG_SPACE(4 * 64))
        except ConnectionResetError:  # closed with our unread request still queued
            return None
        for level, typ, cdata in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds += list(struct.unpack(f"{len(cdata) // 4}i", cdata[:len(cdata) // 4 * 4]))
        if not msg:
            return None
        data += msg
    return json.loads(data[4:]), fds


def ask(s, obj):
    s.sendall(frame(obj))
    ans = recv_answer(s)
    assert ans is not None, "daemon closed the connection"
    for fd in ans[1]:
        os.close(fd)
    return ans[0]


def connect(d):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(d.sock)
    return s


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


def test_preload_big_through_the_ring(gd):
    s = preload(gd, "gm-big")
    assert s["state"] == "ready", s
    assert s["progress"]["bytes_done"] == s["progress"]["bytes_total"] > 6_000_000
    assert s["preload"]["io"] == expected_io(os.path.join(gd.root, "gm-big.safetensors"))
    out = subprocess.run([CLIENT_CLI, "--socket", gd.sock, "open", "gm-big"],
                         capture_output=True, text=True, env=worker_env())
    assert out.returncode == 0 and "checksum: ok" in out.stdout, out


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
    assert "not_loaded" in str(e), e
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


def test_list_op(gd):
    with connect(gd) as c:
        a = ask(c, {"op": "list"})
        assert a["ok"] is True
        names = {m["name"]: m for m in a["models"]}
        assert names["gm-small"]["state"] == "ready" and names["gm-small"]["device"] == "host"


def test_open_answer_and_fds(gd):
    """The open answer's tables, and one sealed memfd per allocation."""
    import fcntl
    import mmap
    with connect(gd) as c:
        c.sendall(frame({"op": "open", "model": "gm-small", "device": "host"}))
        a, fds = recv_answer(c)
        try:
            assert a["ok"] is True and a["model"] == "gm-small" and a["backend"] == "host"
            assert len(fds) == len(a["allocations"]) == 1
            al = a["allocations"][0]
            assert al["handle_type"] == "memfd" and al["fd_index"] == 0
            seals = fcntl.fcntl(fds[0], 1034)  # F_GET_SEALS
            assert seals & 0x8 and seals & 0x2 and seals & 0x4  # WRITE, SHRINK, GROW
            with mmap.mmap(fds[0], al["alloc_size"], prot=mmap.PROT_READ) as mm:
                exp = model_tensors(gd.root, "gm-small")
                for t in a["tensors"]:
                    assert mm[t["offset"]:t["offset"] + t["nbytes"]] == exp[t["name"]][2]
            with pytest.raises(OSError):
                mmap.mmap(fds[0], al["alloc_size"], prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            for fd in fds:
                os.close(fd)
        # "close" answers ok and ends the connection (and its lease)
        assert ask(c, {"op": "close"})["ok"] is True
        assert recv_answer(c) is None


def run_as(uid, gid, sock):
    """Connects as uid/gid and asks for the list; returns the answer (or the failure)."""
    code = r"""
import json, socket, struct, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])
b = b'{"op":"list"}'
try:
    s.sendall(struct.pack("<I", len(b)) + b)
except OSError:
    pass
data = b""
while len(data) < 4 or len(data) < 4 + struct.unpack("<I", data[:4])[0]:
    m = s.recv(65536)
    if not m:
        break
    data += m
print(data[4:].decode())
s.settimeout(0.5)
try:
    print("closed" if s.recv(1) == b"" else "open")
except TimeoutError:
    print("open")
except ConnectionResetError:
    print("closed")
"""
    out = subprocess.run([sys.executable, "-c", code, sock], capture_output=True, text=True,
                         user=uid, group=gid, extra_groups=[], timeout=30)
    assert out.returncode == 0, out
    answer, state = out.stdout.splitlines()[-2:]
    return json.loads(answer), state


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as other uids")
def test_allow_list(gd):
    a, state = run_as(NOBODY, NOBODY, gd.sock)
    assert a["ok"] is False and a["error"]["code"] == "forbidden" and state == "closed", a
    assert str(NOBODY) in a["error"]["message"]
    a, state = run_as(OTHER_UID, OTHER_UID, gd.sock)
    assert a["ok"] is False and a["error"]["code"] == "forbidden"
    a, _ = run_as(ALLOWED_UID, ALLOWED_UID, gd.sock)  # allow_uids
    assert a["ok"] is True, a
    a, _ = run_as(OTHER_UID, ALLOWED_GID, gd.sock)    # allow_gids
    assert a["ok"] is True, a
    assert "refused pid" in gd.log_tail(20000)


def test_malformed_messages_do_not_harm_other_clients(gd):
    holder = start_c_holder(gd, "gm-small")
    try:
        leases = gpu_state(gd, "gm-small")["leases"]
        with connect(gd) as c:
            for bad, code in [(b"{", "bad_request"), (b"[1,2]", "bad_request"),
                              (b'"open"', "bad_request"), (b"", "bad_request"),
                              (b'{"op": 7}', "bad_request"), (b'{"op": "fly"}', "bad_request"),
                              (b'{"op": "open"}', "bad_request"),
                              (b'{"op": "open", "model": 5}', "bad_request"),
                              (b'{"op": "open", "model": ""}', "bad_request"),
                              (b'{"op":"list","op":"list"}', "bad_request"),
                              (b'\xff\xfe{}', "bad_request"),
                              (b'{"op": "open", "model": "gm-small", "device": "tpu"}',
                               "bad_device"),
                              (b'{"op": "open", "model": "gm-small\\u0000x"}', "bad_request")]:
                a = ask(c, bad)
                assert a["ok"] is False and a["error"]["code"] == code, (bad, a)
            # the same connection still works
            assert ask(c, {"op": "list"})["ok"] is True
            # several requests in one write are answered in order
            c.sendall(frame({"op": "list"}) + frame(b"nope") + frame({"op": "list"}))
            assert [recv_answer(c)[0]["ok"] for _ in range(3)] == [True, False, True]
        with connect(gd) as c:  # oversized: error, then the daemon closes
            c.sendall(struct.pack("<I", MAX_REQUEST + 1) + b"{}")
            a, _ = recv_answer(c)
            assert a["ok"] is False and a["error"]["code"] == "too_large"
            assert recv_answer(c) is None
        with connect(gd) as c:  # a request the size limit allows exactly
            body = b'{"op":"list","pad":"' + b"x" * (MAX_REQUEST - 22) + b'"}'
            assert len(body) == MAX_REQUEST
            assert ask(c, body)["ok"] is True
        for chunk in (b"\x10\x00", b"\x64\x00\x00\x00{\"op\"", b"\xff\xff\xff"):
            with connect(gd) as c:  # truncated, then gone
                c.sendall(chunk)
        with connect(gd) as c:  # byte by byte
            for ch in frame({"op": "list"}):
                c.send(bytes([ch]))
            assert recv_answer(c)[0]["ok"] is True
        # the holder's lease is intact and the daemon still serves
        assert gpu_state(gd, "gm-small")["leases"] == leases
        assert gd.get("/v1/models").status == 200
    finally:
        holder.communicate("\n", timeout=10)
    assert holder.returncode == 0


def test_many_idle_connections_do_not_block(gd):
    conns = [connect(gd) for _ in range(50)]
    try:
        for c in conns[::7]:
            c.sendall(b"\x05\x00")  # half a header each
        with connect(gd) as c:
            assert ask(c, {"op": "list"})["ok"] is True
    finally:
        for c in conns:
            c.close()
