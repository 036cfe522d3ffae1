#!/usr/bin/python3
"""olah (a Hugging Face mirror from the package index) in front of tensord:
huggingface_hub's snapshot_download through olah, whose upstream is
tensord, must give every file byte for byte (`make check-olah`; issue 26,
docs/OPERATIONS.md "Scaling out").

olah and its dependencies (FastAPI, httpx, ...) go into a virtual
environment of their own under build/olah-venv, never the tests' one: their
pins would fight the tests'. The check downloads a flat repo, a nested one
(org/name) and a sharded one twice (the second from olah's cache) and
compares every file with what tensord serves from its root."""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, os.path.join(REPO, "tests", "gen"))

import gen_models  # noqa: E402
import tdutil  # noqa: E402

OLAH = "olah==0.5.4"


def olah_venv(build):
    venv = os.path.join(build, "olah-venv")
    if not os.path.exists(os.path.join(venv, "bin", "olah-cli")):
        subprocess.run(["/usr/bin/python3", "-m", "venv", venv], check=True)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q",
                        "--disable-pip-version-check", OLAH], check=True)
    return os.path.join(venv, "bin", "olah-cli")


def wait_http(url, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer within {timeout}s")


def main():
    build = os.path.join(REPO, os.environ.get("BUILD", "build"))
    cli = olah_venv(build)
    base = tempfile.mkdtemp(prefix="tensord-olah-")
    olah = None
    try:
        root = os.path.join(base, "models")
        gen_models.make_demo_models(root)
        work = os.path.join(base, "run")
        os.mkdir(work)
        d = tdutil.Daemon(root, work).start()
        d.wait_hashed()
        port = tdutil.free_port()
        up, me = f"127.0.0.1:{d.port}", f"127.0.0.1:{port}"
        olah = subprocess.Popen(
            [cli, "--host", "127.0.0.1", "--port", str(port), "--hf-scheme", "http",
             "--hf-netloc", up, "--hf-lfs-netloc", up, "--mirror-scheme", "http",
             "--mirror-netloc", me, "--mirror-lfs-netloc", me,
             "--repos-path", os.path.join(base, "olah")],
            stdout=open(os.path.join(base, "olah.log"), "wb"), stderr=subprocess.STDOUT,
            cwd=base)
        wait_http(f"http://{me}/api/models/demo-f32")
        from huggingface_hub import snapshot_download
        for attempt in ("cold", "cached"):
            for repo in ("demo-f32", "org/demo-i8", "demo-sharded"):
                path = snapshot_download(repo, cache_dir=os.path.join(base, f"hf-{attempt}"),
                                         endpoint=f"http://{me}")
                src, n = os.path.join(root, repo), 0
                for dirpath, _dirs, files in os.walk(src):
                    for f in files:
                        rel = os.path.relpath(os.path.join(dirpath, f), src)
                        with open(os.path.join(src, rel), "rb") as a, \
                             open(os.path.join(path, rel), "rb") as b:
                            assert a.read() == b.read(), f"{repo}/{rel} differs ({attempt})"
                        n += 1
                print(f"{repo}: {n} files byte-exact through olah ({attempt})")
        d.stop()
        print("olah in front of tensord: PASS")
    finally:
        if olah:
            olah.terminate()
            olah.wait()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
