"""Helpers shared by the host-backend GPU tests (test_gpu_host.py: HTTP
preload/state/evict and leases from worker processes; test_gpu_socket.py: the
lease socket's own protocol): the models they load, the daemon they share per
module (the `gd` fixture in conftest.py), its GPU state over HTTP, a C client
holding a lease, and raw socket framing.
"""
import hashlib
import json
import os
import shutil
import socket
import struct
import subprocess
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


def gpu_daemon():
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


def worker_env():
    env = dict(os.environ, PYTHONPATH=PYPATH, TENSORD_CLIENT_LIB=CLIENT_LIB)
    env.pop("LD_PRELOAD", None)
    return env


def start_c_holder(d, model):
    p = subprocess.Popen([CLIENT_CLI, "--socket", d.sock, "open", model, "--hold"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=worker_env())
    for line in p.stdout:
        if line.startswith("holding"):
            return p
    raise AssertionError(f"tensord-client did not hold: {p.stderr.read()}")


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
