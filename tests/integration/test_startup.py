"""What the daemon refuses at start, and says: a listen address beyond
loopback without a token (unless --insecure-listen, which is logged), an
empty listen address, and a preload whose lease socket cannot be served
(the container whose socket directory belongs to another user)."""
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import tdutil


def write_models(base):
    models = base / "models"
    if not models.exists():
        tdutil.gen_models.write_safetensors(str(models / "m" / "model.safetensors"),
                                            [("w", "U8", (4,), bytes(range(4)))])
    return models


def start(tmp_path, *args, user=None):
    cmd = [tdutil.tensord_bin(), "serve", "--models", str(write_models(tmp_path)),
           "--state-dir", str(tmp_path / "state"), *args]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] + cmd
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(p, timeout=20):
    """Exit status and output of a daemon that should stop by itself."""
    out, _ = p.communicate(timeout=timeout)
    return p.returncode, out


def until_listening(p, port):
    for _ in range(200):
        try:
            if tdutil.request(port, "GET", "/healthz", timeout=2).status == 200:
                return True
        except OSError:
            pass
        if p.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def stop(p):
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=30)
    return out


@pytest.mark.parametrize("listen", ["0.0.0.0:{port}", "[::]:{port}"])
def test_beyond_loopback_needs_a_token_or_insecure_listen(tmp_path, listen):
    port = tdutil.free_port()
    addr = listen.format(port=port)
    sock = str(tmp_path / "s.sock")
    rc, out = finish(start(tmp_path, "--listen", addr, "--ipc-socket", sock))
    assert rc == 2, out
    assert f"listen = {addr} reaches beyond loopback" in out and "--insecure-listen" in out, out
    # Said out loud: it starts, and the log says what it accepted.
    p = start(tmp_path, "--listen", addr, "--ipc-socket", sock, "--insecure-listen")
    assert until_listening(p, port), stop(p)
    out = stop(p)
    assert f"listening on {addr} beyond loopback without authentication" in out, out
    # With tokens there is nothing to warn about.
    tokens = tmp_path / "tokens"
    tokens.write_text("read " + "r" * 32 + "\n")
    p = start(tmp_path, "--listen", addr, "--ipc-socket", sock, "--auth-token-file", str(tokens))
    assert until_listening(p, port), stop(p)
    assert "beyond loopback" not in stop(p)


def test_insecure_listen_false_and_loopback(tmp_path):
    port = tdutil.free_port()
    sock = str(tmp_path / "s.sock")
    rc, out = finish(start(tmp_path, "--listen", f"0.0.0.0:{port}", "--ipc-socket", sock,
                           "--insecure-listen", "false"))
    assert rc == 2 and "reaches beyond loopback" in out, out
    p = start(tmp_path, "--listen", f"127.0.0.1:{port}", "--ipc-socket", sock)
    assert until_listening(p, port)
    assert "beyond loopback" not in stop(p)


def test_empty_listen_address_is_refused(tmp_path):
    rc, out = finish(start(tmp_path, "--listen", ":18078"))
    assert rc == 2 and "the address is empty" in out, out


def test_preload_without_its_socket_stops_the_daemon(tmp_path):
    port = tdutil.free_port()
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    rc, out = finish(start(tmp_path, "--listen", f"127.0.0.1:{port}", "--preload", "m@host",
                           "--ipc-socket", str(blocker / "s.sock")))
    assert rc == 2, out  # could not start: tensord(8), EXIT STATUS
    assert "preload is configured but the lease socket cannot be served" in out, out
    # Without a preload the daemon serves HTTP and says sharing is off.
    p = start(tmp_path, "--listen", f"127.0.0.1:{port}", "--ipc-socket", str(blocker / "s.sock"))
    assert until_listening(p, port)
    assert "GPU sharing is off" in stop(p)


def test_socket_directory_of_another_user_is_named(tmp_path):
    """The container case: /run/tensord belongs to root, the daemon runs as
    another uid. The error names the directory's owner and mode."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run the daemon as another user")
    # Outside pytest's private (0700) tree, so that uid 65534 reaches it.
    base = pathlib.Path(tempfile.mkdtemp(prefix="tensord-startup-"))
    try:
        os.chmod(base, 0o755)
        run = base / "run"
        run.mkdir(mode=0o755)
        (base / "state").mkdir()
        os.chown(base / "state", 65534, 65534)
        port = tdutil.free_port()
        rc, out = finish(start(base, "--listen", f"127.0.0.1:{port}", "--preload", "m@host",
                               "--ipc-socket", str(run / "tensord.sock"), user=65534))
        assert rc == 2, out  # could not start: tensord(8), EXIT STATUS
        assert f"the directory {run} belongs to uid 0 and has mode 755; tensord runs as " \
               "uid 65534" in out, out
    finally:
        shutil.rmtree(base)


def test_missing_socket_directory_is_created(tmp_path):
    port = tdutil.free_port()
    sock = tmp_path / "new" / "tensord.sock"
    p = start(tmp_path, "--listen", f"127.0.0.1:{port}", "--preload", "m@host",
              "--ipc-socket", str(sock))
    assert until_listening(p, port)
    assert sock.is_socket() and (os.stat(sock.parent).st_mode & 0o777) == 0o755
    stop(p)


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775])
def test_socket_directory_others_can_write_is_refused(tmp_path, mode):
    """A lease socket where another user could put their own (and answer
    workers as tensord) is never served: the daemon names the directory and
    its mode."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    port = tdutil.free_port()
    rc, out = finish(start(tmp_path, "--listen", f"127.0.0.1:{port}", "--preload", "m@host",
                           "--ipc-socket", str(shared / "tensord.sock")))
    assert rc == 2, out  # could not start: tensord(8), EXIT STATUS
    assert f"the directory {shared} is writable by" in out and f"(mode {mode:04o})" in out, out
    assert not (shared / "tensord.sock").exists()


def test_socket_directory_reached_through_a_symlink(tmp_path):
    """The socket is made where the path resolves to, and removed at exit."""
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(real)
    port = tdutil.free_port()
    p = start(tmp_path, "--listen", f"127.0.0.1:{port}", "--preload", "m@host",
              "--ipc-socket", str(tmp_path / "link" / "tensord.sock"))
    assert until_listening(p, port)
    assert (real / "tensord.sock").is_socket()
    stop(p)
    assert not (real / "tensord.sock").exists()
