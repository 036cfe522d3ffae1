"""Fixtures: the test models (generated once per session into a temporary
directory, plus symlinks that point outside the models root) and one daemon
serving them on a free loopback port.

Environment: TENSORD_BIN (default build/tensord), TENSORD_ARGS (extra
command-line arguments for `tensord serve`), TENSORD_SANITIZED=1 (the daemon
is a sanitizer build: memory bounds are not checked)."""
import atexit
import os
import shutil
import tempfile

import pytest

import gpuhost
import tdutil
from tdutil import gen_models

from tdutil import EVIL_FILE_LINK, EVIL_REL_LINK, OUTSIDE_DIR_LINK, OUTSIDE_FILE_LINK


# Daemons the tests start without tdutil.Daemon (which gives each its own
# --state-dir) keep their content hashes here, not in /var/lib/tensord.
if "STATE_DIRECTORY" not in os.environ:
    os.environ["STATE_DIRECTORY"] = tempfile.mkdtemp(prefix="tensord-state-")
    atexit.register(shutil.rmtree, os.environ["STATE_DIRECTORY"], True)


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long or memory-measuring tests (skipped under sanitizers)")
    config.addinivalue_line("markers", "concurrent: tests that drive the daemon from several threads")


@pytest.fixture(scope="session")
def manifest(models_root):
    return models_root[1]


@pytest.fixture(scope="session")
def models_root():
    """(models root path, Manifest) with every test model and the symlinks."""
    base = tempfile.mkdtemp(prefix="tensord-it-")
    root = os.path.join(base, "models")
    man = gen_models.make_test_models(root)
    outside = os.path.join(base, "outside", "secret")
    gen_models.write_safetensors(os.path.join(outside, "model.safetensors"),
                                 [("secret", "U8", (4,), b"SECR")], {"format": "pt"})
    with open(os.path.join(outside, "config.json"), "w") as f:
        f.write('{"secret": true}\n')
    os.symlink("/etc/passwd", os.path.join(root, *EVIL_FILE_LINK))
    os.symlink("../../outside/secret/config.json", os.path.join(root, *EVIL_REL_LINK))
    os.symlink(outside, os.path.join(root, OUTSIDE_DIR_LINK))
    os.symlink(os.path.join(outside, "model.safetensors"), os.path.join(root, OUTSIDE_FILE_LINK))
    yield root, man
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def daemon(models_root):
    workdir = tempfile.mkdtemp(prefix="tensord-run-")
    d = tdutil.Daemon(models_root[0], workdir)
    try:
        d.start()
        d.wait_hashed()  # strong ETags from here on
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    yield d
    try:
        d.stop_checked()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module")
def gd():
    """A daemon of its own with the GPU options set (host backend), one per
    module: test_gpu_host.py and test_gpu_socket.py (gpuhost.gpu_daemon)."""
    yield from gpuhost.gpu_daemon()


@pytest.fixture(autouse=True)
def _daemon_still_alive(request):
    """After every test that used the daemon: it must still be running."""
    yield
    if "daemon" in request.fixturenames:
        d = request.getfixturevalue("daemon")
        if not d.alive():
            pytest.fail(f"daemon is no longer running (status {d.proc.returncode}):\n"
                        f"{d.log_tail()}", pytrace=False)
