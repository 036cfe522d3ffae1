"""`make install` puts the binaries, client library, man pages, config and
unit under DESTDIR/PREFIX and never overwrites an operator's edited config;
the installed tensord-client and Python client work from that tree against
a daemon; `make uninstall` takes it all away again."""
import os
import signal
import subprocess
import sys
import time

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import gen_models  # noqa: E402

FILES = ("usr/local/bin/tensord", "usr/local/bin/tensord-client",
         "usr/local/lib/libtensord-client.so.0", "usr/local/lib/libtensord-client.so",
         "usr/local/include/tensord_client.h", "usr/local/share/man/man8/tensord.8",
         "usr/local/share/man/man1/tensord-client.1", "usr/local/share/man/man5/tensord.conf.5",
         "usr/local/lib/systemd/system/tensord.service",
         "usr/local/share/doc/tensord/OPERATIONS.md", "etc/tensord/tensord.conf")


def make(target, dest):
    return subprocess.run(["make", "--no-print-directory", target, f"DESTDIR={dest}",
                           "PREFIX=/usr/local"], cwd=ROOT, capture_output=True, text=True)


def test_install_layout_config_kept_and_uninstall(tmp_path):
    p = make("install", tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    for rel in FILES:
        assert os.path.lexists(tmp_path / rel), rel
    assert os.access(tmp_path / "usr/local/bin/tensord", os.X_OK)
    # ldconfig is for the real tree, not a DESTDIR staging one.
    assert "ldconfig" not in p.stdout
    conf = tmp_path / "etc/tensord/tensord.conf"
    conf.write_text("# edited by the operator\n")
    p = make("install", tmp_path)
    assert p.returncode == 0
    assert conf.read_text() == "# edited by the operator\n"
    p = make("uninstall", tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    for rel in FILES[:-1]:
        assert not os.path.lexists(tmp_path / rel), rel
    assert conf.read_text() == "# edited by the operator\n", "an edited config is kept"
    conf.unlink()
    make("install", tmp_path)
    assert make("uninstall", tmp_path).returncode == 0
    assert not conf.exists(), "the shipped config, unedited, goes"


def test_installed_client_tools_work(tmp_path):
    """The installed tensord-client and the Python client (through the
    library beside tensord-client, with no ldconfig run for this tree) open
    a preloaded model of the installed daemon."""
    dest = tmp_path / "root"
    p = make("install", dest)
    assert p.returncode == 0, p.stdout + p.stderr
    prefix = dest / "usr/local"
    models = tmp_path / "models"
    gen_models.write_safetensors(str(models / "m" / "model.safetensors"),
                                 [("w", "F32", (2, 3), bytes(range(24)))])
    sock = tmp_path / "run" / "tensord.sock"
    log = open(tmp_path / "log", "wb")
    daemon = subprocess.Popen([str(prefix / "bin/tensord"), "serve", "--models", str(models),
                               "--listen", "127.0.0.1:0", "--preload", "m@host",
                               "--ipc-socket", str(sock), "--state-dir", str(tmp_path / "st")],
                              stdout=log, stderr=subprocess.STDOUT)
    env = {k: v for k, v in os.environ.items()
           if k not in ("TENSORD_CLIENT_LIB", "LD_LIBRARY_PATH", "PYTHONPATH")}
    env.update(PATH=f"{prefix / 'bin'}:{env['PATH']}", TENSORD_SOCKET=str(sock))
    try:
        for _ in range(200):
            ls = subprocess.run(["tensord-client", "ls"], env=env, capture_output=True,
                                text=True)
            if '"state":"ready"' in ls.stdout:
                break
            assert daemon.poll() is None, (tmp_path / "log").read_text()
            time.sleep(0.05)
        assert '"name":"m"' in ls.stdout and '"state":"ready"' in ls.stdout, ls.stderr
        op = subprocess.run(["tensord-client", "open", "m"], env=env, capture_output=True,
                            text=True)
        assert op.returncode == 0 and "checksum: ok" in op.stdout, op.stdout + op.stderr
        # The package from a copy outside the checkout, so that it cannot
        # find the repository's build/ directory.
        pkg = tmp_path / "py"
        pkg.mkdir()
        subprocess.run(["cp", "-r", os.path.join(ROOT, "client/python/tensord"), str(pkg)],
                       check=True)
        code = ("import tensord, numpy as np; m = tensord.connect().open('m'); "
                "a = m['w']; print(tensord._lib._name, a.dtype, a.shape, a.ravel().tolist())")
        py = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(pkg)},
                            capture_output=True, text=True, cwd=tmp_path)
        assert py.returncode == 0, py.stderr
        want = list(float(x) for x in __import__("numpy").frombuffer(bytes(range(24)), "<f4"))
        assert str(prefix / "lib/libtensord-client.so.0") in py.stdout, py.stdout
        assert f"float32 (2, 3) {want}" in py.stdout, py.stdout
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
