"""The Python client as a package: `make dist` builds a pure-Python wheel,
and both the wheel and `pip install ./client/python` give a working
`tensord` in a fresh virtual environment (with the system's numpy and
urllib3; nothing is downloaded), used here against a real daemon."""
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile

import pytest

from conftest import ROOT, daemon_binary

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import gen_models  # noqa: E402

VERSION = re.search(r"^VERSION\s*:=\s*(\S+)", open(os.path.join(ROOT, "Makefile")).read(),
                    re.M).group(1)


def wheel_path():
    p = subprocess.run(["make", "--no-print-directory", "dist"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return os.path.join(ROOT, "build", "dist", f"tensord-{VERSION}-py3-none-any.whl")


def test_wheel_is_pure_python():
    whl = wheel_path()
    names = zipfile.ZipFile(whl).namelist()
    for mod in ("__init__", "remote", "numpy", "torch", "_http", "_deadline", "_dtypes",
                "_index", "_loader", "_errors", "_fetch", "_frameworks", "_validate"):
        assert f"tensord/{mod}.py" in names, mod
    assert not [n for n in names if n.endswith((".so", ".pyd", ".c"))], names
    assert any(n.endswith("LICENSE") for n in names), names
    meta = zipfile.ZipFile(whl).read(f"tensord-{VERSION}.dist-info/METADATA").decode()
    assert f"Version: {VERSION}" in meta
    assert "Requires-Dist: numpy" in meta and "Requires-Dist: urllib3" in meta
    assert "torch" in meta and "ml-dtypes" in meta.replace("ml_dtypes", "ml-dtypes")
    wheel_meta = zipfile.ZipFile(whl).read(f"tensord-{VERSION}.dist-info/WHEEL").decode()
    assert "Root-Is-Purelib: true" in wheel_meta


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    base = tmp_path_factory.mktemp("pkg")
    models = base / "models"
    gen_models.write_safetensors(str(models / "m" / "model.safetensors"),
                                 [("w", "F32", (4, 3), bytes(range(48))),
                                  ("b", "BF16", (3,), bytes(6))], {"format": "pt"})
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(base / "log", "wb")
    proc = subprocess.Popen([daemon_binary(), "serve", "--models", str(models), "--listen",
                             f"127.0.0.1:{port}", "--ipc-socket", str(base / "s.sock")],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/readyz", timeout=1)
            break
        except OSError:
            time.sleep(0.05)
    yield url
    proc.terminate()
    proc.wait(timeout=20)
    log.close()


CHECK = """
import sys, numpy as np, tensord
assert tensord.__file__.startswith(sys.prefix), (tensord.__file__, sys.prefix)
u = sys.argv[1] + "/v1/models/m"
d = tensord.load_file(u, progress=False)
assert d["w"].dtype == np.float32 and d["w"].shape == (4, 3), d["w"]
assert d["w"].tobytes() == bytes(range(48))
with tensord.safe_open(u, framework="numpy") as f:
    assert f.keys() == ["b", "w"] and f.metadata() == {"format": "pt"}
    assert f.get_slice("w")[::-1, 1].tobytes() == np.frombuffer(bytes(range(48)), "<f4").reshape(4, 3)[::-1, 1].tobytes()
print("ok", tensord.__file__)
"""


def fresh_venv(path):
    p = subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", str(path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return str(path / "bin" / "python")


def pip_install(py, *args):
    p = subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        "--disable-pip-version-check", *args], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


def run_check(py, url, cwd):
    # from outside the checkout, so the installed package is the one imported
    p = subprocess.run([py, "-c", CHECK, url], capture_output=True, text=True, timeout=120,
                       cwd=cwd)
    assert p.returncode == 0 and p.stdout.startswith("ok "), p.stdout + p.stderr
    # the installed command line, and python -m tensord
    script = os.path.join(os.path.dirname(py), "tensord-http")
    for argv in ([script], [py, "-m", "tensord"]):
        p = subprocess.run(argv + ["--url", url, "ls"], capture_output=True, text=True,
                           timeout=60, cwd=cwd)
        assert p.returncode == 0 and p.stdout.split("\n")[1].startswith("m "), p.stdout + p.stderr


def test_wheel_installs_and_works(tmp_path, daemon):
    whl = wheel_path()
    py = fresh_venv(tmp_path / "venv")
    pip_install(py, whl)
    run_check(py, daemon, tmp_path)


def test_pip_install_of_the_source_directory(tmp_path, daemon):
    # a copy, so that setuptools' build/ and egg-info stay out of the checkout
    src = tmp_path / "src"
    shutil.copytree(os.path.join(ROOT, "client", "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    py = fresh_venv(tmp_path / "venv")
    pip_install(py, "--no-build-isolation", str(src))
    run_check(py, daemon, tmp_path)
