"""The Makefile's own checks: `make config` decides once (library
versions, with a message naming the library, its minimum and the Debian
package; the tests' own libraries checked apart; CUDA) and is made again
only when an input changes; a quiet build ("CC file") unless V=1; jansson
only in the tests."""
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
    """Every document the daemon sends is written with core/base/jsonw (issue 27):
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
    obj = f"{tmp_path}/obj/core/base/util.o"
    p = make(f"BUILD={tmp_path}", obj)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split("\n")[:2] == [f"  CONFIG {tmp_path}/config.mk", f"  CC     {obj}"], \
        p.stdout
    (tmp_path / "obj/core/base/util.o").unlink()
    p = make(f"BUILD={tmp_path}", obj, "V=1")
    assert p.returncode == 0, p.stderr
    assert "-c core/base/util.c -o " + obj in p.stdout and "-Wall" in p.stdout, p.stdout


def config(path):
    """The variables of a config.mk."""
    out = {}
    for line in path.read_text().splitlines():
        if " := " in line and not line.startswith("#"):
            k, v = line.split(" := ", 1)
            out[k] = v
    return out


def test_config_is_made_once_and_again_when_an_input_changes(tmp_path):
    """The first build makes config.mk; later ones read it (pkg-config is not
    asked again); CUDA=no, a changed input, makes it again."""
    obj = f"{tmp_path}/obj/core/base/util.o"
    assert make(f"BUILD={tmp_path}", obj).returncode == 0
    made = config(tmp_path / "config.mk")
    assert "-lmicrohttpd" in made["LIB_LIBS_libmicrohttpd"] and made["CONFIG_CC"], made
    assert made["CONFIG_FILES"].split()[1].endswith(".pc"), made
    stamp = (tmp_path / "config.mk").stat().st_mtime_ns
    p = make(f"BUILD={tmp_path}", obj)
    assert "CONFIG" not in p.stdout and (tmp_path / "config.mk").stat().st_mtime_ns == stamp
    p = make(f"BUILD={tmp_path}", "CUDA=no", obj)
    assert p.returncode == 0 and "CONFIG" in p.stdout, p.stdout + p.stderr
    assert config(tmp_path / "config.mk")["WITH_CUDA"] == "0"
    assert "CUDA=no" in config(tmp_path / "config.mk")["CONFIG_INPUTS"]


def test_cuda_yes_without_headers_fails_config(tmp_path):
    p = make(f"BUILD={tmp_path}", "CUDA=yes", f"CUDA_INCLUDE={tmp_path}/none", "config")
    assert p.returncode != 0
    assert "CUDA=yes but no cuda.h of CUDA 12.0 or newer" in p.stderr, p.stderr
    assert not (tmp_path / "config.mk").exists()


def test_missing_pkg_config_is_named(tmp_path):
    """Without pkg-config on the PATH, make config says so (and which
    package has it) instead of failing later at the link."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for d in ("/usr/local/bin", "/usr/bin", "/bin"):
        for name in os.listdir(d):
            if "pkg-config" not in name and not (bin_dir / name).exists():
                os.symlink(os.path.join(d, name), bin_dir / name)
    p = subprocess.run(["make", "--no-print-directory", f"BUILD={tmp_path}/b", "config"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PATH": str(bin_dir)})
    assert p.returncode != 0
    assert "pkg-config is missing (Debian: apt-get install pkg-config" in p.stderr, p.stderr
