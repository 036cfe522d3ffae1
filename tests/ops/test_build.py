"""The Makefile's own checks: library versions before compiling, with a
message naming the library, its minimum and the Debian package (the
tests' own libraries checked apart); a quiet build ("CC file") unless V=1;
jansson only in the tests."""
import glob
import os
import re
import subprocess

from conftest import ROOT, daemon_binary


def make(*args):
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_too_old_or_missing_library_is_named(tmp_path):
    p = make(f"BUILD={tmp_path}", f"{tmp_path}/flags",
             "PKG_MIN=liburing:99.0:liburing-dev nosuchlib:1.0:libnosuch-dev jansson:2.7:x")
    assert p.returncode != 0
    assert "liburing >= 99.0: found 2." in p.stderr, p.stderr
    assert "nosuchlib >= 1.0: not found (Debian: libnosuch-dev)" in p.stderr, p.stderr
    assert "jansson" not in p.stderr, "a library new enough is not listed"
    assert not (tmp_path / "flags").exists()


def test_test_libraries_are_checked_apart(tmp_path):
    """jansson is the tests' oracle: a missing one stops a unit test's
    build, named, and never the daemon's."""
    p = make(f"BUILD={tmp_path}", f"{tmp_path}/test-flags",
             "TEST_PKG_MIN=nosuchlib:1.0:libnosuch-dev")
    assert p.returncode != 0
    assert "the tests need:" in p.stderr, p.stderr
    assert "nosuchlib >= 1.0: not found (Debian: libnosuch-dev)" in p.stderr, p.stderr
    assert "jansson" not in make("-s", "print-PKGS").stdout


def test_jansson_is_not_in_the_daemon():
    """Every document the daemon sends is written with core/jsonw (issue 27):
    no source of core/, server/ or client/ includes jansson, and neither the
    daemon nor the client library links it."""
    sources = [p for d in ("core", "server", "client")
               for p in glob.glob(os.path.join(ROOT, d, "**", "*.[ch]"), recursive=True)]
    assert len(sources) > 100
    for path in sources:
        with open(path, encoding="utf-8") as f:
            assert not re.search(r"#\s*include\s*<jansson\.h>", f.read()), path
    binary = daemon_binary()
    lib = os.path.join(os.path.dirname(binary), "libtensord-client.so")
    for b in (binary, lib) if os.path.exists(lib) else (binary,):
        out = subprocess.run(["ldd", b], capture_output=True, text=True, check=True).stdout
        assert "libjansson" not in out, f"{b} links jansson:\n{out}"


def test_quiet_build_and_v1(tmp_path):
    obj = f"{tmp_path}/obj/core/util.o"
    p = make(f"BUILD={tmp_path}", obj)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"CC     {obj}", p.stdout
    (tmp_path / "obj/core/util.o").unlink()
    p = make(f"BUILD={tmp_path}", obj, "V=1")
    assert p.returncode == 0, p.stderr
    assert "-c core/util.c -o " + obj in p.stdout and "-Wall" in p.stdout, p.stdout
