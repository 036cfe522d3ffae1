"""The lease socket of a host-backend daemon, spoken to directly: the list
and open operations (one sealed memfd per allocation), the uid/gid
allow-list, malformed and oversized messages that must not harm other
clients, and idle connections that must not block. The daemon is the `gd`
fixture (conftest.py, gpuhost.py), one per module.
"""
import json
import os
import struct
import subprocess
import sys

import pytest

from gpuhost import (ALLOWED_GID, ALLOWED_UID, CLIENT_CLI, OTHER_UID, ask, connect, gpu_state,
                     model_tensors, recv_answer, frame, start_c_holder)

NOBODY = 65534
MAX_REQUEST = 96 << 10  # IPC_MAX_REQUEST: the largest valid request (three escaped names) fits


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


IMPOSTOR = r"""
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1]); s.listen(4)
print("listening", flush=True)
c, _ = s.accept()
c.sendall(b"FAKE-ANSWER")
time.sleep(5)
"""


def test_client_refuses_a_socket_others_could_have_placed(tmp_path):
    """tensord-client (the C client library) dials no socket in a directory
    another user can write: a process there could answer as tensord."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    p = subprocess.Popen([sys.executable, "-c", IMPOSTOR, str(shared / "s.sock")],
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "listening\n"
        out = subprocess.run([CLIENT_CLI, "--socket", str(shared / "s.sock"), "ls"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode != 0
        assert "is writable by every user (mode 1777)" in out.stderr, out.stderr
    finally:
        p.kill()
        p.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run processes as other uids")
def test_client_refuses_a_daemon_that_does_not_own_the_socket():
    """A socket made by one user and found in a directory of another (moved
    there): the process answering is not the directory's owner, and the
    client refuses it before reading a byte of its answers."""
    import shutil
    import tempfile
    base = tempfile.mkdtemp(prefix="tensord-impostor-")
    try:
        os.chmod(base, 0o755)
        theirs, owners = os.path.join(base, "theirs"), os.path.join(base, "owners")
        os.mkdir(theirs, 0o700)
        os.chown(theirs, OTHER_UID, OTHER_UID)
        os.mkdir(owners, 0o755)
        os.chown(owners, NOBODY, NOBODY)
        p = subprocess.Popen([sys.executable, "-c", IMPOSTOR, os.path.join(theirs, "s.sock")],
                             stdout=subprocess.PIPE, text=True, user=OTHER_UID,
                             group=OTHER_UID, extra_groups=[])
        try:
            assert p.stdout.readline() == "listening\n"
            os.rename(os.path.join(theirs, "s.sock"), os.path.join(owners, "s.sock"))
            out = subprocess.run([CLIENT_CLI, "--socket", os.path.join(owners, "s.sock"),
                                  "ls"], capture_output=True, text=True, timeout=30)
            assert out.returncode != 0
            assert f"the process answering runs as uid {OTHER_UID}" in out.stderr, out.stderr
            assert "FAKE-ANSWER" not in out.stderr + out.stdout
        finally:
            p.kill()
            p.wait()
    finally:
        shutil.rmtree(base)


def test_client_cli_says_why(gd, tmp_path):
    """tensord-client names the reason of each failure, with tensord's exit
    statuses (2: it could not do what was asked): a model that does not
    exist, one that is not preloaded, a --dump into a missing directory."""
    def client(*args):
        return subprocess.run([CLIENT_CLI, "--socket", gd.sock, *args], capture_output=True,
                              text=True, timeout=30)
    p = client("open", "nosuch")
    assert p.returncode == 2 and 'no model named "nosuch"' in p.stderr, p.stderr
    p = client("open", "gm-reload")  # a model of the root, not preloaded
    assert p.returncode == 2 and "is not preloaded: preload it first" in p.stderr, p.stderr
    assert "POST /v1/models/gm-reload/gpu" in p.stderr
    p = client("open", "gm-small", "--dump", str(tmp_path / "missing" / "dir"))
    assert p.returncode == 2 and "checksum: ok" in p.stdout, p.stdout + p.stderr
    assert "cannot create" in p.stderr and "No such file or directory" in p.stderr, p.stderr
    p = client("open", "gm-small", "--dump", str(tmp_path))
    assert p.returncode == 0 and os.listdir(tmp_path), p.stderr
    for args in (["--help"], ["ls", "--help"], ["open", "--help"]):
        p = subprocess.run([CLIENT_CLI, *args], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0 and p.stdout.startswith("usage: tensord-client"), args
    p = client("bogus")
    assert p.returncode == 2 and "unknown command bogus" in p.stderr
