"""The man page renders without groff warnings and covers what operators
look for; the operations guide covers deployment, scraping and reloads."""
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT, daemon_binary, tool

MAN = os.path.join(ROOT, "docs", "tensord.8")
PAGES = ["tensord.8", "tensord-client.1", "tensord.conf.5"]


def render(page):
    p = subprocess.run([tool("man"), "--warnings", "-l", os.path.join(ROOT, "docs", page)],
                       capture_output=True, text=True,
                       env={**os.environ, "MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "80"})
    return p


def test_man_page_renders_cleanly():
    groff = tool("groff")
    p = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z", MAN], capture_output=True,
                       text=True)
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr
    man = tool("man")
    p = subprocess.run([man, "-l", MAN], capture_output=True, text=True,
                       env={**os.environ, "MANPAGER": "cat", "PAGER": "cat", "MANWIDTH": "80"})
    assert p.returncode == 0, p.stderr
    for section in ["NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "OPTIONS", "CONFIGURATION",
                    "SIGNALS", "FILES", "SEE ALSO"]:
        assert f"\n{section}\n" in p.stdout, section
    for word in ["SIGHUP", "SIGTERM", "inspect", "serve", "--print-config",
                 "/etc/tensord/tensord.conf"]:
        assert word in p.stdout, word


def test_operations_guide_sections():
    text = open(os.path.join(ROOT, "docs", "OPERATIONS.md")).read()
    for needle in ["systemctl reload tensord", "docker run", "scrape_configs", "tensord-gpu.conf",
                   "SIGHUP", "access_log", "systemd-analyze security"]:
        assert needle in text, needle


@pytest.mark.parametrize("page", PAGES)
def test_man_pages_have_no_warnings(page):
    """`man --warnings` (groff -ww) prints nothing on stderr for each page."""
    p = render(page)
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr
    assert "\nNAME\n" in p.stdout and "\nSEE ALSO\n" in p.stdout


def test_config_page_lists_every_option():
    """tensord.conf(5) names every option --print-config prints."""
    text = render("tensord.conf.5").stdout
    conf = subprocess.run([daemon_binary(), "--print-config"], capture_output=True,
                          text=True).stdout
    names = re.findall(r"^(\w+) = ", conf, re.M)
    assert len(names) > 30
    for name in names:
        assert re.search(rf"^ {{7}}{name}\b", text, re.M), name


def client_binary():
    path = os.path.join(os.path.dirname(daemon_binary()), "tensord-client")
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not built")
    return path


def test_client_help_and_version():
    """--help: stdout, exit 0, every command and option of the CLI and of
    its man page; --version; usage errors exit 2 on stderr."""
    cli = client_binary()
    p = subprocess.run([cli, "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and not p.stderr, p.stderr
    page = render("tensord-client.1").stdout
    for word in ["ls", "open MODEL", "--socket", "--config", "--device", "--dump", "--hold",
                 "--help", "--version", "$TENSORD_SOCKET", "$XDG_RUNTIME_DIR",
                 "/run/tensord/tensord.sock"]:
        assert word in p.stdout, word
        assert word.split()[0].replace("$", "") in page, word
    v = subprocess.run([cli, "--version"], capture_output=True, text=True)
    assert v.returncode == 0 and re.fullmatch(r"tensord-client \d+\.\d+\.\d+\n", v.stdout)
    for bad in (["frobnicate"], ["open"], ["--socket"], ["--bogus", "ls"]):
        b = subprocess.run([cli, *bad], capture_output=True, text=True)
        assert b.returncode == 2 and "usage:" in b.stderr and not b.stdout, bad


def test_client_uses_only_the_socket_named(tmp_path):
    """A socket named by the config's ipc_socket or $TENSORD_SOCKET that
    does not exist is an error naming it and where it came from: the client
    never goes on to $XDG_RUNTIME_DIR/tensord.sock or the system's socket
    (which may be another daemon's: `make run`'s, say)."""
    cli = client_binary()
    env = {**os.environ, "TENSORD_SOCKET": str(tmp_path / "a.sock"),
           "XDG_RUNTIME_DIR": str(tmp_path / "xdg")}
    conf = tmp_path / "c.conf"
    conf.write_text(f"[gpu]\nipc_socket = {tmp_path / 'conf.sock'}\n")
    p = subprocess.run([cli, "--config", str(conf), "ls"], capture_output=True, text=True,
                       env=env)
    assert p.returncode == 2 and not p.stdout, p.stdout  # could not (tensord(8))
    assert f"ipc_socket of {conf} names the lease socket {tmp_path / 'conf.sock'}" in p.stderr
    assert "no other socket is tried" in p.stderr
    for other in ("a.sock", "xdg", "/run/tensord/tensord.sock"):
        assert other not in p.stderr, p.stderr
    (tmp_path / "empty.conf").write_text("")
    p = subprocess.run([cli, "--config", str(tmp_path / "empty.conf"), "ls"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 2 and f"$TENSORD_SOCKET names the lease socket {tmp_path / 'a.sock'}" \
        in p.stderr, p.stderr
    assert "xdg" not in p.stderr and "/run/tensord" not in p.stderr, p.stderr
    # The Python client (tensord_connect(NULL)) the same way.
    code = "import tensord\ntry:\n    tensord.connect()\nexcept tensord.TensordError as e:\n" \
           "    print(e)\n"
    py = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        env={**env, "PYTHONPATH": os.path.join(ROOT, "client", "python")})
    assert f"$TENSORD_SOCKET names the lease socket {tmp_path / 'a.sock'}" in py.stdout, \
        py.stdout + py.stderr


def test_client_names_every_default_path_it_tried(tmp_path):
    """With no socket named, the default places in order, each named when
    none exists."""
    cli = client_binary()
    if os.path.exists("/run/tensord/tensord.sock"):
        pytest.skip("a daemon serves /run/tensord/tensord.sock on this machine: the client's "
                    "last default place exists, and no test talks to a daemon it did not start")
    env = {k: v for k, v in os.environ.items() if k != "TENSORD_SOCKET"}
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "xdg")
    (tmp_path / "empty.conf").write_text("")
    p = subprocess.run([cli, "--config", str(tmp_path / "empty.conf"), "ls"],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 2
    tried = [str(tmp_path / "xdg" / "tensord.sock"), "/run/tensord/tensord.sock"]
    at = [p.stderr.find(t) for t in tried]
    assert all(i >= 0 for i in at) and at == sorted(at), p.stderr


def test_daemon_and_client_agree_on_the_socket(tmp_path):
    """Without ipc_socket, the daemon's socket is where the client looks
    first: $TENSORD_SOCKET, else (not root) $XDG_RUNTIME_DIR/tensord.sock."""
    env = {k: v for k, v in os.environ.items() if k not in ("TENSORD_SOCKET",
                                                            "RUNTIME_DIRECTORY")}
    env["XDG_RUNTIME_DIR"] = str(tmp_path)
    p = subprocess.run([daemon_binary(), "--print-socket"], capture_output=True, text=True,
                       env=env)
    want = "/run/tensord/tensord.sock" if os.geteuid() == 0 else f"{tmp_path}/tensord.sock"
    assert p.returncode == 0 and p.stdout == want + "\n"
    env["TENSORD_SOCKET"] = str(tmp_path / "t.sock")
    p = subprocess.run([daemon_binary(), "--print-socket"], capture_output=True, text=True,
                       env=env)
    assert p.stdout == f"{tmp_path}/t.sock\n"
    p = subprocess.run([daemon_binary(), "--print-socket", "--ipc-socket", "/x/y.sock"],
                       capture_output=True, text=True, env=env)
    assert p.stdout == "/x/y.sock\n"
