"""The CUDA backend against the CUDA driver test double (tests/cuda_double/).

Everything here runs the ASan+UBSan build (TENSORD_CUDA_BUILD, default
build/san-address-undefined, made by `make test-cuda-double`): the daemon,
the C client, the client library the Python binding loads (Python runs with
libasan preloaded), and the double itself, found as libcuda.so.1 through
LD_LIBRARY_PATH exactly as a real driver would be. After every daemon and
worker, the double's own report must show nothing left alive (allocations,
mappings, reservations, pinned memory, streams, events, retained contexts)
and no violation of the driver's rules."""
import ctypes.util
import glob
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

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

import tdutil  # noqa: E402
from tdutil import gen_models  # noqa: E402

BUILD = os.path.join(REPO, os.environ.get("TENSORD_CUDA_BUILD", "build/san-address-undefined"))
DOUBLE_DIR = os.environ.get("TENSORD_CUDA_DOUBLE_DIR", os.path.join(BUILD, "cuda-double"))
TENSORD = os.path.join(BUILD, "tensord")
CLI = os.path.join(BUILD, "tensord-client")
CLIENT_LIB = os.path.join(BUILD, "libtensord-client.so")
PYPATH = os.path.join(REPO, "client", "python")
os.environ["TENSORD_BIN"] = TENSORD


def libasan():
    cc = os.environ.get("CC", "cc")
    out = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True)
    path = out.stdout.strip()
    return path if os.path.isabs(path) else ctypes.util.find_library("asan")


LIBASAN = libasan()


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


# ---------------------------------------------------------------------------
# Models


def rand(rng, dtype, shape):
    return bytes(gen_models.random_data(rng, dtype, shape))


def write_models(root):
    rng = np.random.default_rng(15)
    gen_models.write_safetensors(os.path.join(root, "cm-small.safetensors"), [
        ("a.f32", "F32", (7, 5), rand(rng, "F32", (7, 5))),
        ("b.i64", "I64", (3,), rand(rng, "I64", (3,))),
        ("c.bf16", "BF16", (4, 4), rand(rng, "BF16", (4, 4))),
        ("d.u8", "U8", (13,), rand(rng, "U8", (13,))),
        ("e.empty", "F32", (0, 4), b""),
        ("f.bool", "BOOL", (5,), bytes([1, 0, 1, 1, 0])),
    ], {"format": "pt"})
    d = os.path.join(root, "cm-sharded")
    wm = {}
    for k in range(3):
        name = f"model-0000{k + 1}-of-00003.safetensors"
        ts = [(f"layers.{k}.{j}.weight", "F16", (9 + k, 3 + j), rand(rng, "F16", (9 + k, 3 + j)))
              for j in range(3)]
        ts.append((f"layers.{k}.bias", "F32", (17,), rand(rng, "F32", (17,))))
        gen_models.write_safetensors(os.path.join(d, name), ts)
        wm.update({t[0]: name for t in ts})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f)
    # ~6 MB: hundreds of 64 KiB chunks through a 3-buffer ring, three 2 MiB
    # granules, data not page-aligned in the file.
    gen_models.write_safetensors(os.path.join(root, "cm-big.safetensors"), [
        ("big", "F32", (1500, 1000), rand(rng, "F32", (1500, 1000))),
        ("tail", "U8", (4097,), rand(rng, "U8", (4097,))),
    ])
    for name in ("cm-reload", "cm-two", "cm-other"):
        gen_models.write_safetensors(os.path.join(root, name + ".safetensors"), [
            ("w", "F32", (64, 33), rand(rng, "F32", (64, 33))),
            ("b", "I32", (33,), rand(rng, "I32", (33,))),
        ])


def model_tensors(root, model):
    """{name: (dtype, shape, bytes)} from the files themselves."""
    single = os.path.join(root, model + ".safetensors")
    paths = [single] if os.path.exists(single) else sorted(
        glob.glob(os.path.join(root, model, "*.safetensors")))
    out = {}
    for p in paths:
        with open(p, "rb") as f:
            out.update(tdutil.read_safetensors_bytes(f.read())[2])
    return out


def expected(root, model):
    """What a worker's snapshot must say: dtype, shape, the bytes' hash read
    through the device pointer and through cuMemcpyDtoH."""
    return {k: [dt, list(shape), sha(b), sha(b)]
            for k, (dt, shape, b) in model_tensors(root, model).items()}


@pytest.fixture(scope="session")
def models():
    base = tempfile.mkdtemp(prefix="tensord-cd-models-")
    root = os.path.join(base, "models")
    write_models(root)
    yield root
    shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------------
# The daemon and its report


def double_env(work, extra=None):
    env = {"LD_LIBRARY_PATH": DOUBLE_DIR, "CUDA_DOUBLE_REPORT_DIR": work,
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
    env.update(extra or {})
    return env


class CudaDaemon(tdutil.Daemon):
    def __init__(self, root, work, env=None, args=()):
        self.work = work
        self.env = double_env(work, env)
        self.env["ASAN_OPTIONS"] = ("detect_leaks=1:abort_on_error=0:log_path="
                                    + os.path.join(work, "asan-daemon"))
        prefix = ["env"] + [f"{k}={v}" for k, v in self.env.items()]
        super().__init__(root, work, extra_args=list(args), prefix=prefix)
        self.root = root
        self.sock = os.path.join(work, "tensord.sock")

    def report(self):
        return read_report(self.work, self.proc.pid)

    def finish(self, allow_errors=()):
        """Stops the daemon (it must exit 0: no sanitizer report) and checks
        what the double saw in it."""
        self.stop_checked()
        reports = glob.glob(os.path.join(self.work, "asan-daemon*"))
        assert not reports, open(reports[0]).read()[-6000:]
        rep = self.report()
        assert_clean(rep, allow_errors, self.log_tail())
        return rep

    def gpu(self, model):
        r = self.get(f"/v1/models/{tdutil.q(model)}/gpu")
        assert r.status == 200, (r.status, r.body)
        return r.json()

    def wait(self, model, pred, timeout=60):
        import time
        deadline = time.monotonic() + timeout
        while True:
            s = self.gpu(model)
            if pred(s):
                return s
            assert time.monotonic() < deadline, f"{model}: timed out in {s}\n{self.log_tail()}"
            time.sleep(0.02)

    def post(self, model, device="cuda:0"):
        return self.request("POST", f"/v1/models/{tdutil.q(model)}/gpu",
                            body=json.dumps({"device": device}).encode())

    def preload(self, model, device="cuda:0"):
        r = self.post(model, device)
        assert r.status in (200, 202), (r.status, r.body)
        return self.wait(model, lambda s: s["state"] in ("ready", "failed"))

    def evict(self, model):
        return self.request("DELETE", f"/v1/models/{tdutil.q(model)}/gpu")


def read_report(work, pid):
    path = os.path.join(work, f"cuda-double.{pid}.json")
    assert os.path.exists(path), f"the double wrote no report for process {pid} in {work}"
    with open(path) as f:
        return json.load(f)


def assert_clean(rep, allow_errors=(), context=""):
    live = {k: v for k, v in rep["live"].items() if v}
    assert not live, f"left alive at exit: {live}\n{context}"
    assert rep["contexts_retained"] == 0, f"primary contexts still retained\n{context}"
    assert rep["violations"] == [], f"driver rules broken: {rep['violations']}\n{context}"
    unexpected = [e for e in rep["errors"] if not any(a in e for a in allow_errors)]
    assert not unexpected, f"calls the driver refused: {unexpected}\n{context}"


@pytest.fixture
def workdir():
    work = tempfile.mkdtemp(prefix="tensord-cd-")
    os.chmod(work, 0o755)
    yield work
    shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def start(models, workdir):
    """start(env={...}, args=[...]) -> a started CudaDaemon (stopped at the
    end if the test did not finish it)."""
    daemons = []

    def _start(env=None, args=(), must_start=True):
        d = CudaDaemon(models, workdir, env, ["--staging-buffers", "3",
                                              "--staging-buffer-bytes", "64K"] + list(args))
        daemons.append(d)
        if must_start:
            d.start()
        return d

    yield _start
    for d in daemons:
        if d.alive():
            d.stop()


# ---------------------------------------------------------------------------
# Workers


def worker_env(work, extra=None, python=False):
    env = dict(os.environ, PYTHONPATH=PYPATH, TENSORD_CLIENT_LIB=CLIENT_LIB)
    env.update(double_env(work, extra))
    env.pop("LD_PRELOAD", None)
    if python:
        # The client library and the double are ASan builds: Python needs the
        # runtime first. Python's own allocations are not ours to check.
        env["LD_PRELOAD"] = LIBASAN
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0"
    else:
        env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0"
    return env


# The Python worker: NumPy views straight over the double's device memory
# (a read-only host mapping of the imported memfd, at the CUdeviceptr the
# client mapped), and the same bytes through tensord_tensor_read
# (cuMemcpyDtoH). Prints one JSON snapshot; with "hold", another after a
# line on stdin (after an evict or a reload the bytes must be unchanged).
WORKER = r"""
import ctypes, hashlib, json, sys
import numpy as np
import tensord
sock, model, mode = sys.argv[1:4]
c = tensord.connect(sock)
m = c.open(model)
def view(k):
    i = m.info(k)
    if i["nbytes"] == 0:
        return np.zeros(0, np.uint8)
    return np.ctypeslib.as_array((ctypes.c_uint8 * i["nbytes"]).from_address(i["device_ptr"]))
views = {k: view(k) for k in m}
def snap():
    return {"generation": m.generation, "backend": m.backend, "device": m.device,
            "uuid": m.device_uuid, "index": m.device_index, "verify": m.verify(),
            "dlpack": list(m.dlpack(next(iter(m))).__dlpack_device__()),
            "tensors": {k: [m.info(k)["dtype"], list(m.info(k)["shape"]),
                            hashlib.sha256(views[k].tobytes()).hexdigest(),
                            hashlib.sha256(m.read(k)).hexdigest()] for k in m}}
print(json.dumps(snap()), flush=True)
if mode == "hold":
    sys.stdin.readline()
    print(json.dumps(snap()), flush=True)
del views
m.close()
c.close()
"""


def py_worker(d, model, mode="hold", env=None, script=WORKER, args=()):
    return subprocess.Popen([sys.executable, "-c", script, d.sock, model, mode] + list(args),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=worker_env(d.work, env, python=True))


def read_line(p, timeout=60):
    import select
    r, _, _ = select.select([p.stdout], [], [], timeout)
    line = p.stdout.readline() if r else ""
    if not line:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"worker said nothing (exit {p.returncode}):\n{err[-4000:]}")
    return json.loads(line)


def end_worker(p, work, allow_errors=()):
    """Lets a holding worker finish; it must exit 0 with a clean report."""
    out, err = p.communicate("\n", timeout=60)
    assert p.returncode == 0, f"worker exited {p.returncode}:\n{err[-4000:]}"
    assert_clean(read_report(work, p.pid), allow_errors, err[-2000:])
    return [json.loads(x) for x in out.splitlines() if x.strip()]


def c_client(d, model, *args, env=None, timeout=120):
    """Runs tensord-client open to the end: the CompletedProcess, with .pid."""
    p = subprocess.Popen([CLI, "--socket", d.sock, "open", model] + list(args),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=worker_env(d.work, env))
    out, err = p.communicate(timeout=timeout)
    done = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    done.pid = p.pid
    return done


def c_holder(d, model, env=None):
    p = subprocess.Popen([CLI, "--socket", d.sock, "open", model, "--hold"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=worker_env(d.work, env))
    for line in p.stdout:
        if line.startswith("holding"):
            return p
    raise AssertionError(f"tensord-client did not hold: {p.stderr.read()}")


def frame(obj):
    b = json.dumps(obj).encode()
    return struct.pack("<I", len(b)) + b


def ask(sock_path, obj):
    """One request on a fresh connection: (answer, fds, connection). The caller
    closes the fds and the connection (which ends a lease it opened)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(sock_path)
    s.sendall(frame(obj))
    data, fds = b"", []
    while len(data) < 4 or len(data) < 4 + struct.unpack("<I", data[:4])[0]:
        msg, anc, _f, _a = s.recvmsg(1 << 20, socket.CMSG_SPACE(4 * 64))
        for level, typ, cdata in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds += list(struct.unpack(f"{len(cdata) // 4}i", cdata[:len(cdata) // 4 * 4]))
        assert msg, "the daemon closed the connection"
        data += msg
    return json.loads(data[4:]), fds, s


def kill(p):
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
        p.wait()
