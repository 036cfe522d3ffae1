"""Configuration errors as an operator meets them: through the real binary.
A bad file or option stops start-up with exit status 2 and one line naming the
file, the line and the option; --print-config output loads again."""
import os
import subprocess

from conftest import ROOT, daemon_binary


def run(*args):
    return subprocess.run([daemon_binary(), *args], capture_output=True, text=True, timeout=20,
                          cwd=ROOT)


def test_bad_value_names_file_line_and_option(tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text("[server]\nthreads = 2\nmax_ranges = 0\n")
    p = run("serve", "--config", str(conf))
    assert p.returncode == 2
    assert f"{conf}:3: option max_ranges: 0 is out of range 1..256" in p.stderr


def test_unknown_option_and_section(tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text("[server]\nmodles = /srv\n")
    p = run("--print-config", "--config", str(conf))
    assert p.returncode == 2 and f"{conf}:2: option modles: unknown option" in p.stderr
    conf.write_text("[servr]\n")
    p = run("--print-config", "--config", str(conf))
    assert p.returncode == 2 and f"{conf}:1: unknown section [servr]" in p.stderr


def test_missing_file():
    p = run("--print-config", "--config", "/nonexistent/tensord.conf")
    assert p.returncode == 2 and "/nonexistent/tensord.conf" in p.stderr


def test_command_line_override_is_validated():
    p = run("--print-config", "--threads", "many")
    assert p.returncode == 2
    assert 'command line: option threads: "many" is not an unsigned integer' in p.stderr


def test_print_config_round_trip(tmp_path):
    shipped = os.path.join(ROOT, "config", "tensord.conf")
    p = run("--print-config", "--config", shipped, "--max-ranges", "32", "--listen=[::1]:9")
    assert p.returncode == 0, p.stderr
    assert "max_ranges = 32\n" in p.stdout and "listen = [::1]:9\n" in p.stdout
    assert "models = /srv/tensord/models\n" in p.stdout
    printed = tmp_path / "printed.conf"
    printed.write_text(p.stdout)
    again = run("--print-config", "--config", str(printed))
    assert again.returncode == 0 and again.stdout == p.stdout


def test_help_and_exit_statuses(tmp_path):
    """--help on every command, and tensord(8)'s exit statuses: a daemon
    that cannot start is 2 (it could not do what was asked), with why."""
    for args in (["--help"], ["serve", "--help"], ["serve", "--models", "x", "-h"],
                 ["inspect", "--help"], ["verify", "--help"]):
        p = run(*args)
        assert p.returncode == 0 and p.stdout.startswith("usage: tensord"), (args, p.stderr)
        assert "Exit status" in p.stdout, args
    p = run("serve", "--models", str(tmp_path / "nope"), "--listen", "127.0.0.1:0",
            "--state-dir", str(tmp_path / "st"), "--ipc-socket", str(tmp_path / "s.sock"))
    assert p.returncode == 2 and str(tmp_path / "nope") in p.stderr, p.stderr
    p = run("serve", "--access-log", str(tmp_path / "no" / "dir" / "log"), "--listen",
            "127.0.0.1:0")
    assert p.returncode == 2 and "cannot open access_log" in p.stderr
    assert "No such file or directory" in p.stderr
    p = run("frobnicate")
    assert p.returncode == 2 and 'unknown command "frobnicate"' in p.stderr
