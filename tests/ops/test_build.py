"""The Makefile's own checks: library versions before compiling, with a
message naming the library, its minimum and the Debian package; a quiet
build ("CC file") unless V=1."""
import subprocess

from conftest import ROOT


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


def test_quiet_build_and_v1(tmp_path):
    obj = f"{tmp_path}/obj/core/util.o"
    p = make(f"BUILD={tmp_path}", obj)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"CC     {obj}", p.stdout
    (tmp_path / "obj/core/util.o").unlink()
    p = make(f"BUILD={tmp_path}", obj, "V=1")
    assert p.returncode == 0, p.stderr
    assert "-c core/util.c -o " + obj in p.stdout and "-Wall" in p.stdout, p.stdout
