"""Hostile input on the HTTP side: each class an attacker or a careless
client can reach without a token (malformed and ambiguous requests, memory
and slow-request exhaustion, range amplification), and start-up mistakes
that would have left the daemon open. Every test says what the defect was;
each fails on a3a5bfa and passes now. The models-directory side is in
test_hostile_models.py."""
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

import faultlib
import tdutil
from faultlib import SLACK, connect, read_body, read_head, running_daemon


@pytest.fixture
def root():
    base = tempfile.mkdtemp(prefix="tensord-hostile-")
    models = os.path.join(base, "models")
    os.makedirs(models)
    data = faultlib.small_models(models)
    yield models, data
    shutil.rmtree(base, ignore_errors=True)


def exchange(port, raw, timeout=5):
    """Sends raw bytes on a new connection and reads until the peer closes or
    goes quiet. Returns (everything received, closed by the peer)."""
    with connect(port, timeout=timeout) as s:
        s.sendall(raw)
        data = b""
        s.settimeout(timeout)
        try:
            while True:
                c = s.recv(65536)
                if not c:
                    return data, True
                data += c
        except socket.timeout:
            return data, False
        except ConnectionResetError:
            return data, True


def status_of(data):
    if not data.startswith(b"HTTP/1."):
        return None
    return int(data.split(b" ", 2)[1])


# ---------------------------------------------------------------------------
# Start-up


def test_second_daemon_on_the_same_address_does_not_start(root):
    """SO_REUSEPORT let a second daemon bind the same address and take half
    the traffic. Now the second one stops with a clear error."""
    models, data = root
    with running_daemon(models) as d:
        p = subprocess.run([tdutil.tensord_bin(), "serve", "--models", models, "--listen",
                            f"127.0.0.1:{d.port}", "--threads", "1"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
        out = (p.stdout + p.stderr).decode("utf-8", "replace")
        assert p.returncode != 0, f"a second daemon started on port {d.port}:\n{out}"
        assert "Address already in use" in out and f"127.0.0.1:{d.port}" in out, out
        # Every request still reaches the first daemon.
        for _ in range(20):
            assert d.get("/v1/models/m/tensors/v").body == data["v"]


@pytest.mark.parametrize("form", ["equals", "separate"])
def test_config_file_forms_are_both_read(root, form):
    """--config=FILE was silently ignored: the daemon started on defaults."""
    models, _ = root
    base = os.path.dirname(models)
    port = tdutil.free_port()
    conf = os.path.join(base, "t.conf")
    with open(conf, "w") as f:
        f.write(f"models = {models}\nlisten = 127.0.0.1:{port}\nmax_ranges = 3\n")
    arg = [f"--config={conf}"] if form == "equals" else ["--config", conf]
    p = subprocess.run([tdutil.tensord_bin(), "--print-config"] + arg, capture_output=True,
                       text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    assert "max_ranges = 3" in p.stdout and f"listen = 127.0.0.1:{port}" in p.stdout, p.stdout


@pytest.mark.parametrize("arg", [["--config=/nonexistent/tensord.conf"],
                                 ["--config", "/nonexistent/tensord.conf"], ["--config="]])
def test_missing_config_file_stops_startup(root, arg):
    models, _ = root
    rc, out = faultlib.run_daemon_expect_failure(models, *arg)
    assert rc != 0, f"started without its configuration file:\n{out}"
    assert "No such file" in out, out
