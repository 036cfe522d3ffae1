"""Workers on the lease socket, as the hardening review ran them (issue 12):

- the worker matrix: a NumPy and a PyTorch worker (the Python binding)
  open, write, close, drop, reopen, see a reload and an evict, and are
  killed with SIGKILL after each step in turn. No worker may die by a
  signal other than that SIGKILL, and the daemon's lease counts must always
  be what the living workers hold: a lease per open, released on close (the
  connection staying), on the last array's death, or with the process;
- peers with 0, 1, 256 and 1,000 supplementary groups (SO_PEERGROUPS);
- a flood of refused peers: a bounded log, and allowed workers unaffected;
- idle and half-sent connections closed after ipc_idle_timeout, one holding
  a lease kept;
- dtypes through NumPy and the installed torch, with the raw-bytes fallback;
- the client library never aborts (it links no abort()).
"""
import json
import os
import signal
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

import tdutil
from tdutil import gen_models, wait_for

REPO = tdutil.REPO
CLIENT_LIB = os.path.join(REPO, "build", "libtensord-client.so")
PYPATH = os.path.join(REPO, "client", "python")
ALLOWED_GID = 23456
IDLE_TIMEOUT = 2
FRAMEWORKS = ["numpy", "torch"]
STEPS = ["open", "write", "close", "drop", "reopen", "reload", "reopen", "evict", "drop", "exit"]

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


def worker_env():
    env = dict(os.environ, PYTHONPATH=PYPATH, TENSORD_CLIENT_LIB=CLIENT_LIB)
    env.pop("LD_PRELOAD", None)
    return env


def model_tensors(rng):
    return [("w", "F32", (16, 9), bytes(gen_models.random_data(rng, "F32", (16, 9)))),
            ("b", "I32", (9,), bytes(gen_models.random_data(rng, "I32", (9,)))),
            ("m", "BOOL", (5,), bytes([1, 0, 1, 1, 0])),
            ("h", "BF16", (2, 3), bytes(gen_models.random_data(rng, "BF16", (2, 3))))]


def matrix_models():
    return [f"wk-{fw}-{k}" for fw in FRAMEWORKS for k in range(len(STEPS) + 1)]


ALL_DTYPES = list(gen_models.DTYPES)


@pytest.fixture(scope="module")
def wd():
    """A daemon for worker tests: short idle timeout, gid allow-list."""
    base = tempfile.mkdtemp(prefix="tensord-workers-")
    os.chmod(base, 0o755)
    root = os.path.join(base, "models")
    rng = np.random.default_rng(12)
    for name in matrix_models() + ["wk-flood", "wk-idle"]:
        gen_models.write_safetensors(os.path.join(root, name + ".safetensors"), model_tensors(rng))
    dts = []
    for dt in ALL_DTYPES:
        shape = (2, 8) if gen_models.DTYPES[dt][0] >= 8 else (16,)
        dts.append((f"t.{dt}", dt, shape, bytes(gen_models.random_data(rng, dt, shape))))
    gen_models.write_safetensors(os.path.join(root, "wk-dtypes.safetensors"), dts)
    work = os.path.join(base, "run")
    os.mkdir(work)
    os.chmod(work, 0o755)
    d = tdutil.Daemon(root, work, extra_args=[
        "--allow-gids", str(ALLOWED_GID), "--ipc-idle-timeout", str(IDLE_TIMEOUT)])
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


def gpu_rows(d, model):
    """The manager's instances of model: [{"state", "generation", "leases"}]."""
    return [m for m in d.json("/v1/models")["gpu"]["models"] if m["name"] == model]


def leases(d, model):
    return sum(r["leases"] for r in gpu_rows(d, model))


def preload(d, model):
    r = d.request("POST", f"/v1/models/{model}/gpu", body=b'{"device": "host"}')
    assert r.status in (200, 202), r
    wait_for(lambda: d.json(f"/v1/models/{model}/gpu")["state"] == "ready", 15, f"{model} ready")


# One worker: reads commands on stdin, answers one JSON line each.
WORKER = r"""
import gc, hashlib, json, sys, tensord
sock, model, fw = sys.argv[1:4]
c = tensord.connect(sock)
m, arrays = None, {}

def digest(a):
    if fw == "torch":
        a = a.contiguous().view(-1).view(__import__("torch").uint8).numpy()
    return hashlib.sha256(a.tobytes()).hexdigest()

def do_open():
    global m, arrays
    m = c.open(model, framework=fw)
    arrays = {k: m[k] for k in m}
    return {"generation": m.generation, "hashes": {k: digest(a) for k, a in arrays.items()}}

def do_write():
    out = {}
    w = arrays["w"]
    before = digest(w)
    if fw == "torch":
        import torch
        w.mul_(2)                           # in place: the private copy-on-write view
        p = torch.nn.Parameter(arrays["w"])
        opt = torch.optim.SGD([p], lr=0.1)
        p.sum().backward(); opt.step()      # an optimizer step writes too
        out["changed"] = digest(w) != before
    else:
        try:
            w[0, 0] = 1.0
            out["changed"] = True
        except ValueError:
            out["changed"] = False
    out["verify"] = m.verify()              # the shared bytes never changed
    out["fresh"] = digest(m["w"]) if fw == "numpy" else None
    return out

for line in sys.stdin:
    cmd = line.strip()
    out = {"cmd": cmd}
    if cmd == "open":
        out.update(do_open())
    elif cmd == "write":
        out.update(do_write())              # a function: no array outlives it in a global
    elif cmd == "close":
        m.close()
        out["hashes"] = {k: digest(a) for k, a in arrays.items()}   # still mapped
        try:
            m["w"]
            out["closed_raises"] = False
        except tensord.TensordError:
            out["closed_raises"] = True
    elif cmd == "drop":
        if m is not None:
            m.close()
        m, arrays = None, {}
        gc.collect()
    elif cmd == "reopen":
        if m is not None:
            m.close()
        m, arrays = None, {}
        gc.collect()
        out.update(do_open())
    elif cmd in ("reload", "evict"):           # the harness did it: old arrays still read
        out["hashes"] = {k: digest(a) for k, a in arrays.items()}
    elif cmd == "exit":
        print(json.dumps(out), flush=True)
        break
    print(json.dumps(out), flush=True)
"""


class Worker:
    def __init__(self, d, model, fw):
        self.p = subprocess.Popen([sys.executable, "-c", WORKER, d.sock, model, fw],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=worker_env())

    def do(self, cmd):
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            self.p.wait(10)
            raise AssertionError(f"worker died at {cmd!r} with {self.p.returncode}: "
                                 f"{self.p.stderr.read()}")
        return json.loads(line)


def rewrite(d, model, seed):
    path = os.path.join(d.root, model + ".safetensors")
    gen_models.write_safetensors(path + ".tmp", model_tensors(np.random.default_rng(seed)),
                                 mtime=None)
    os.replace(path + ".tmp", path)


def file_hashes(d, model):
    import hashlib
    with open(os.path.join(d.root, model + ".safetensors"), "rb") as f:
        tensors = tdutil.read_safetensors_bytes(f.read())[2]
    return {k: hashlib.sha256(b).hexdigest() for k, (_dt, _s, b) in tensors.items()}


@pytest.mark.parametrize("fw", FRAMEWORKS)
@pytest.mark.parametrize("kill_after", range(len(STEPS) + 1))
def test_worker_matrix(wd, fw, kill_after):
    """Every step of a worker's life, with a SIGKILL after step kill_after
    (len(STEPS): never killed). The lease count the daemon shows is checked
    after every step and after the kill."""
    if fw == "torch" and not HAVE_TORCH:
        pytest.skip("no torch")
    model = f"wk-{fw}-{kill_after}"
    preload(wd, model)
    gen0 = wd.json(f"/v1/models/{model}/gpu")["generation"]
    first = file_hashes(wd, model)
    w = Worker(wd, model, fw)
    try:
        for i, step in enumerate(STEPS):
            if i == kill_after:
                break
            if step == "reload":
                rewrite(wd, model, 1000 + kill_after)
                wd.proc.send_signal(signal.SIGHUP)
                wait_for(lambda: any(r["state"] == "ready" and r["generation"] > gen0
                                     for r in gpu_rows(wd, model)), 15, "the new generation")
            if step == "evict":
                r = wd.request("DELETE", f"/v1/models/{model}/gpu")
                assert r.status == 202 and r.json()["leases"] == 1, r
            a = w.do(step)
            if step == "exit":
                assert w.p.wait(20) == 0, w.p.stderr.read()
                break
            held = leases(wd, model)
            rows = gpu_rows(wd, model)
            if step == "open":
                assert a["generation"] == gen0 and a["hashes"] == first
                assert held == 1
            elif step == "write":
                assert a["verify"] is True
                assert a["changed"] is (fw == "torch"), a   # torch writes privately; NumPy refuses
                if fw == "numpy":
                    assert a["fresh"] == first["w"]
            elif step == "close":
                assert a["closed_raises"] is True and a["hashes"]["b"] == first["b"]
                assert held == 1, rows                      # the arrays still hold it
            elif step == "drop":
                # The lease ends with the last array, while the connection stays.
                assert held == 0, rows
                if i > 5:                                   # after the evict: memory released
                    assert rows == [], rows
            elif step == "reopen" and i < 5:
                assert held == 1 and a["generation"] == gen0
            elif step == "reload":
                assert a["hashes"]["b"] == first["b"]       # the old bytes, still mapped
                assert held == 1 and len(rows) == 2, rows   # ready + draining
            elif step == "reopen":
                # The old generation is gone as soon as the worker let go of it.
                assert len(rows) == 1 and rows[0]["generation"] > gen0, rows
                assert held == 1 and a["hashes"] == file_hashes(wd, model)
            elif step == "evict":
                assert rows[0]["state"] == "draining" and held == 1
        else:
            pass
        if kill_after < len(STEPS):
            w.p.kill()
            assert w.p.wait(20) == -signal.SIGKILL
        # Whatever happened, no lease is held by nobody.
        wait_for(lambda: leases(wd, model) == 0, 15, "every lease released")
    finally:
        if w.p.poll() is None:
            w.p.kill()
            w.p.wait()
    rc = w.p.returncode
    assert rc == 0 or rc == -signal.SIGKILL, f"worker died with {rc}: {w.p.stderr.read()}"


def test_failed_open_holds_no_lease(wd):
    """An open that fails in the worker after the daemon granted it (the
    mapping fails under an address-space limit) gives its lease back."""
    preload(wd, "wk-idle")
    code = r"""
import resource, sys, tensord
c = tensord.connect(sys.argv[1])
m = c.open("wk-idle"); m.close()          # everything imported and warm
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
with open("/proc/self/status") as f:
    vm = [int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize")][0]
err = tensord.TensordError
resource.setrlimit(resource.RLIMIT_AS, (vm, hard))
fails = 0
for _ in range(5):
    try:
        c.open("wk-idle")
    except (err, MemoryError):
        fails += 1
resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
print(fails, flush=True)
sys.stdin.readline()
"""
    p = subprocess.Popen([sys.executable, "-c", code, wd.sock], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=worker_env())
    try:
        line = p.stdout.readline()
        assert line, p.stderr.read()
        if int(line) == 0:
            pytest.skip("the address-space limit did not make the open fail here")
        assert leases(wd, "wk-idle") == 0      # the connection is still open
    finally:
        p.communicate("\n", timeout=20)
    assert p.returncode == 0, p.stderr


# --- supplementary groups -----------------------------------------------------


GROUPS_CLIENT = r"""
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
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to set supplementary groups")
@pytest.mark.parametrize("n_groups", [0, 1, 256, 1000])
@pytest.mark.parametrize("member", [True, False])
def test_supplementary_groups(wd, n_groups, member):
    """The allowed gid is the last of n_groups supplementary groups (or
    missing); the primary group is never the allowed one."""
    if member and n_groups == 0:
        pytest.skip("no supplementary group to be a member through")
    groups = list(range(40000, 40000 + n_groups))
    if member:
        groups[-1] = ALLOWED_GID
    out = subprocess.run([sys.executable, "-c", GROUPS_CLIENT, wd.sock], capture_output=True,
                         text=True, user=34567, group=34567, extra_groups=groups, timeout=30)
    assert out.returncode == 0, out
    a = json.loads(out.stdout)
    assert a["ok"] is member, a
    if not member:
        assert a["error"]["code"] == "forbidden"
    assert wd.alive()


# --- flooding -------------------------------------------------------------------


FLOODER = r"""
import socket, sys, time
end = time.monotonic() + float(sys.argv[2])
n = 0
while time.monotonic() < end:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(sys.argv[1]); s.recv(256)
    except OSError:
        pass
    s.close(); n += 1
print(n)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid")
def test_refused_flood_is_cheap_and_quiet(wd):
    """Refused peers connecting as fast as they can: a few log lines per
    uid, and an allowed worker's round trips stay short."""
    log0 = len(wd.log_tail(1 << 30))
    floods = [subprocess.Popen([sys.executable, "-c", FLOODER, wd.sock, "3"],
                               stdout=subprocess.PIPE, text=True, user=65534, group=65534,
                               extra_groups=[]) for _ in range(2)]
    worst = []
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(10)
        s.connect(wd.sock)
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            b = b'{"op":"list"}'
            s.sendall(struct.pack("<I", len(b)) + b)
            data = b""
            while len(data) < 4 or len(data) < 4 + struct.unpack("<I", data[:4])[0]:
                data += s.recv(65536)
            worst.append(time.monotonic() - t0)
            time.sleep(0.01)
    refused = sum(int(p.communicate(timeout=30)[0]) for p in floods)
    log = wd.log_tail(1 << 30)[log0:]
    lines = [ln for ln in log.splitlines() if "ipc: refused" in ln]
    assert refused > 200, refused
    # One line per uid per 10 s interval, plus the count lines: a handful.
    assert len(lines) <= 4, lines[:10]
    worst.sort()
    assert worst[len(worst) * 9 // 10] < 0.25, worst[-10:]
    metrics = wd.get("/metrics").body.decode()
    assert "tensord_ipc_refused_total" in metrics


# --- idle connections -------------------------------------------------------------


def test_idle_and_half_sent_connections_are_closed(wd):
    preload(wd, "wk-idle")
    idle = socket.socket(socket.AF_UNIX)
    idle.connect(wd.sock)
    half = socket.socket(socket.AF_UNIX)
    half.connect(wd.sock)
    half.sendall(struct.pack("<I", 60000) + b'{"op":"list","pad":"' + b"x" * 30000)
    holder = socket.socket(socket.AF_UNIX)
    holder.connect(wd.sock)
    b = b'{"op":"open","model":"wk-idle"}'
    holder.sendall(struct.pack("<I", len(b)) + b)
    msg, anc, _f, _a = holder.recvmsg(1 << 20, socket.CMSG_SPACE(64))
    for level, typ, data in anc:
        for fd in struct.unpack(f"{len(data) // 4}i", data[:len(data) // 4 * 4]):
            os.close(fd)
    while len(msg) < 4 + struct.unpack("<I", msg[:4])[0]:
        msg += holder.recv(1 << 20)
    assert json.loads(msg[4:])["ok"] is True
    time.sleep(IDLE_TIMEOUT + 2)
    for s in (idle, half):
        s.settimeout(5)
        assert s.recv(10) == b""                 # closed by the daemon
        s.close()
    assert leases(wd, "wk-idle") == 1            # the lease holder stays
    b = b'{"op":"list"}'
    holder.sendall(struct.pack("<I", len(b)) + b)
    holder.settimeout(5)
    assert holder.recv(4)
    holder.close()
    wait_for(lambda: leases(wd, "wk-idle") == 0, 15, "the lease released")
    # A client that idled past the timeout reconnects by itself.
    code = r"""
import sys, time, tensord
c = tensord.connect(sys.argv[1])
time.sleep(float(sys.argv[2]))
m = c.open("wk-idle"); print(m.generation); m.close()
"""
    out = subprocess.run([sys.executable, "-c", code, wd.sock, str(IDLE_TIMEOUT + 2)],
                         capture_output=True, text=True, env=worker_env(), timeout=60)
    assert out.returncode == 0 and int(out.stdout) >= 1, out


# --- dtypes ---------------------------------------------------------------------


DTYPE_CHECK = r"""
import json, sys, tensord
fw = sys.argv[2]
c = tensord.connect(sys.argv[1])
m = c.open("wk-dtypes", framework=fw)
out = {}
for name in m:
    dt = m.info(name)["dtype"]
    raw = m.raw(name)
    rb = bytes(raw.numpy().tobytes()) if fw == "torch" else raw.tobytes()
    try:
        t = m[name]
        if fw == "torch":
            import torch
            b = t.contiguous().view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            out[dt] = [str(t.dtype), list(t.shape), b.hex(), rb.hex()]
        else:
            out[dt] = [str(t.dtype), list(t.shape), t.tobytes().hex(), rb.hex()]
    except tensord.TensordError as e:
        out[dt] = ["error", str(e), None, rb.hex()]
print(json.dumps(out))
"""


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_dtypes(wd, fw):
    if fw == "torch" and not HAVE_TORCH:
        pytest.skip("no torch")
    preload(wd, "wk-dtypes")
    out = subprocess.run([sys.executable, "-c", DTYPE_CHECK, wd.sock, fw], capture_output=True,
                         text=True, env=worker_env(), timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    with open(os.path.join(wd.root, "wk-dtypes.safetensors"), "rb") as f:
        tensors = tdutil.read_safetensors_bytes(f.read())[2]
    for name, (dt, shape, data) in tensors.items():
        kind, a, b, rawhex = got[dt]
        assert rawhex == data.hex(), dt                     # the fallback is exact
        if kind == "error":
            assert dt in a and "raw(" in a, (dt, a)
            continue
        assert b == data.hex() and tuple(a) == tuple(shape), dt
    if fw == "torch":
        import torch
        want = {"BOOL": "torch.bool", "U8": "torch.uint8", "I8": "torch.int8",
                "I16": "torch.int16", "F16": "torch.float16", "BF16": "torch.bfloat16",
                "I32": "torch.int32", "F32": "torch.float32", "I64": "torch.int64",
                "F64": "torch.float64", "C64": "torch.complex64"}
        for newer, attr in [("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"),
                            ("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2")]:
            if isinstance(getattr(torch, attr, None), torch.dtype):
                want[newer] = f"torch.{attr}"
            else:
                assert got[newer][0] == "error", (newer, got[newer])
        for dt, name in want.items():
            assert got[dt][0] == name, (dt, got[dt])
    else:
        assert got["BOOL"][0] == "bool" and got["BF16"][0] == "uint16"
        for dt in gen_models.SUB_BYTE:
            assert got[dt][0] == "error", got[dt]


def test_dlpack_protocol_objects(wd):
    """Model.dlpack() for consumers: NumPy's np.from_dlpack, torch's, and a
    versioned request, all zero-copy views that outlive the Model."""
    preload(wd, "wk-idle")
    code = r"""
import sys, numpy as np, tensord
c = tensord.connect(sys.argv[1])
m = c.open("wk-idle")
want = m["w"].tobytes()
x = m.dlpack("w")
assert x.__dlpack_device__() == (1, 0)
cap = x.__dlpack__(max_version=(1, 0))
assert "dltensor_versioned" in repr(cap)
del cap                                   # an unconsumed capsule frees its tensor
a = np.from_dlpack(x)
try:
    import torch
    t = torch.from_dlpack(x)
except ImportError:
    t = None
m.close()
assert a.tobytes() == want                # both outlive the Model
if t is not None:
    t.add_(1)                             # this process's copy-on-write pages only
    m2 = c.open("wk-idle")
    assert m2["w"].tobytes() == want and m2.verify()
    m2.close()
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code, wd.sock], capture_output=True, text=True,
                         env=worker_env(), timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out
    wait_for(lambda: leases(wd, "wk-idle") == 0, 15, "every lease released")


def test_client_library_never_aborts():
    """libtensord-client.so imports no abort() (out of memory is an error
    return; tests/unit/test_client.c fails each allocation in turn)."""
    out = subprocess.run(["nm", "-D", "--undefined-only", CLIENT_LIB], capture_output=True,
                         text=True, check=True)
    syms = {ln.split()[-1].split("@")[0] for ln in out.stdout.splitlines() if ln.strip()}
    assert not syms & {"abort", "exit", "_exit"}, syms & {"abort", "exit", "_exit"}


def test_client_library_exports_only_its_api():
    """libtensord-client.so compiles core's json_scan (and what it calls) for
    reading answers: none of it, nor the library's own internals, is
    exported, so it cannot clash with a worker's symbols."""
    out = subprocess.run(["nm", "-D", "--defined-only", CLIENT_LIB], capture_output=True,
                         text=True, check=True)
    syms = {ln.split()[-1].split("@")[0] for ln in out.stdout.splitlines() if ln.strip()}
    assert "tensord_open" in syms and "tensord_tensor_dlpack_versioned" in syms, syms
    assert {s for s in syms if not s.startswith("tensord_")} == set(), syms
