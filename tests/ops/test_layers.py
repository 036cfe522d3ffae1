"""The build enforces the layers (Makefile, "Layers"; docs/ARCHITECTURE.md):
each layer is compiled with the include directories of the layers it may
use, so a source that includes a header from above its layer or from the
layer beside it (core/runtime and core/format, core/hash and core/req), or
libmicrohttpd outside the HTTP front, or libcurl outside the mirror, does
not compile.

Each case is a one-line source put into a copy of the tree (links to the
real files, the real Makefile) and compiled by the Makefile's own rule for
its folder, all in one `make -k`; the cases that must compile are the
control that the failures are the includes'."""
import os
import re
import subprocess

import pytest

from conftest import ROOT

LAYERS = ["core/base", "core/runtime", "core/format", "core/body", "core/registry", "core/hash",
          "core/req", "gpu", "mirror", "server/lease", "server/handlers", "server/http",
          "server/cli", "client"]

# (folder, include line, compiles?, what the error must say)
CASES = [
    ("core/base", '"util.h"', True, None),
    ("core/base", '"config.h"', False, "config.h: No such file"),
    ("core/base", '"st_header.h"', False, "st_header.h: No such file"),
    ("core/base", '"gpu.h"', False, "gpu.h: No such file"),
    ("core/base", '"upstream.h"', False, "upstream.h: No such file"),
    ("core/base", '"respond.h"', False, "respond.h: No such file"),
    ("core/base", '"h_answer.h"', False, "h_answer.h: No such file"),
    ("core/base", "<microhttpd.h>", False, "belongs to the HTTP front"),
    ("core/base", "<curl/curl.h>", False, "belongs to the mirror"),
    ("core/runtime", '"config.h"', True, None),
    ("core/runtime", '"jsonw.h"', True, None),
    ("core/runtime", '"dtype.h"', False, "dtype.h: No such file"),
    ("core/runtime", '"registry.h"', False, "registry.h: No such file"),
    ("core/format", '"st_header.h"', True, None),
    ("core/format", '"json_scan.h"', True, None),
    ("core/format", '"metrics.h"', False, "metrics.h: No such file"),
    ("core/format", '"body.h"', False, "body.h: No such file"),
    ("core/body", '"body.h"', True, None),
    ("core/body", '"slice.h"', True, None),
    ("core/body", '"log.h"', True, None),
    ("core/body", '"registry.h"', False, "registry.h: No such file"),
    ("core/registry", '"registry.h"', True, None),
    ("core/registry", '"shared_doc.h"', True, None),
    ("core/registry", '"hasher.h"', False, "hasher.h: No such file"),
    ("core/registry", '"fetch_req.h"', False, "fetch_req.h: No such file"),
    ("core/hash", '"hasher.h"', True, None),
    ("core/hash", '"metrics.h"', True, None),
    ("core/hash", '"fetch_plan.h"', False, "fetch_plan.h: No such file"),
    ("core/hash", '"gpu.h"', False, "gpu.h: No such file"),
    ("core/hash", "<curl/curl.h>", False, "belongs to the mirror"),
    ("core/req", '"fetch_plan.h"', True, None),
    ("core/req", '"hasher.h"', False, "hasher.h: No such file"),
    ("core/req", '"mirror.h"', False, "mirror.h: No such file"),
    ("core/req", "<microhttpd.h>", False, "belongs to the HTTP front"),
    ("gpu", '"gpu_manager.h"', True, None),
    ("gpu", '"mirror.h"', False, "mirror.h: No such file"),
    ("gpu", '"gpu_doc.h"', False, "gpu_doc.h: No such file"),
    ("mirror", "<curl/curl.h>", True, None),
    ("mirror", '"gpu.h"', False, "gpu.h: No such file"),
    ("server/lease", '"gpu_doc.h"', True, None),
    ("server/lease", '"h_answer.h"', False, "h_answer.h: No such file"),
    ("server/lease", '"mirror.h"', False, "mirror.h: No such file"),
    ("server/handlers", '"h_answer.h"', True, None),
    ("server/handlers", "<microhttpd.h>", False, "belongs to the HTTP front"),
    ("server/handlers", '"respond.h"', False, "respond.h: No such file"),
    ("server/handlers", '"daemon.h"', False, "daemon.h: No such file"),
    ("server/http", "<microhttpd.h>", True, None),
    ("server/http", '"daemon.h"', False, "daemon.h: No such file"),
    ("server/http", "<curl/curl.h>", False, "belongs to the mirror"),
    ("server/cli", '"daemon.h"', True, None),
    ("server/cli", "<microhttpd.h>", False, "belongs to the HTTP front"),
    ("client", '"json_scan.h"', True, None),
    ("client", '"ipc_proto.h"', True, None),
    ("client", '"split_bounds.h"', True, None),
    ("client", '"registry.h"', False, "registry.h: No such file"),
    ("client", '"config.h"', False, "config.h: No such file"),
]


def headers():
    """{name: [folders]} of every header of the layers."""
    out = {}
    for layer in LAYERS:
        for name in os.listdir(os.path.join(ROOT, layer)):
            if name.endswith(".h"):
                out.setdefault(name, []).append(layer)
    return out


def test_the_makefile_names_these_layers():
    p = subprocess.run(["make", "-s", "--no-print-directory", "print-LAYERS"], cwd=ROOT,
                       capture_output=True, text=True, check=True)
    assert p.stdout.splitlines()[-1].split() == LAYERS  # after a "CONFIG" line, if any


def test_every_source_is_in_a_layer():
    """A source outside the layers' folders (one left at core/'s top, or
    in a folder no layer names) is compiled by no rule, or by one with the
    wrong include directories."""
    stray = [os.path.relpath(os.path.join(d, n), ROOT)
             for top in ("core", "gpu", "mirror", "server", "client")
             for d, _, names in os.walk(os.path.join(ROOT, top)) for n in names
             if n.endswith((".c", ".h")) and os.path.relpath(d, ROOT) not in LAYERS]
    assert not stray, stray


def test_a_source_at_the_top_of_core_stops_the_build(tmp_path):
    tree = tmp_path / "t"
    os.makedirs(tree / "core")
    os.symlink(os.path.join(ROOT, "Makefile"), tree / "Makefile")
    (tree / "core" / "stray.c").write_text("int stray;\n")
    p = subprocess.run(["make", "-s", "--no-print-directory", "print-LAYERS"], cwd=tree,
                       capture_output=True, text=True)
    assert p.returncode != 0 and "core/stray.c: core/'s sources belong in one of its folders" \
        in p.stderr, p.stderr


def test_header_names_are_unique():
    """Headers are included by their bare names: two of one name would make
    the include path, not the source, choose."""
    dup = {n: f for n, f in headers().items() if len(f) > 1}
    assert not dup, dup


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    tree = tmp_path_factory.mktemp("layers")
    for name in ("Makefile", "mk"):
        os.symlink(os.path.join(ROOT, name), tree / name)
    for layer in LAYERS:
        os.makedirs(tree / layer)
        for name in os.listdir(os.path.join(ROOT, layer)):
            os.symlink(os.path.join(ROOT, layer, name), tree / layer / name)
    targets = []
    for i, (layer, inc, _, _) in enumerate(CASES):
        (tree / layer / f"probe_{i}.c").write_text(f"#include {inc}\nint probe_{i}(void);\n")
        targets.append(f"b/obj/{layer}/probe_{i}.o")
    p = subprocess.run(["make", "-k", "-j2", "--no-print-directory", "BUILD=b", *targets],
                       cwd=tree, capture_output=True, text=True, timeout=300)
    return tree, p.stdout + p.stderr


def error_lines(out):
    """(source, line) of each compiler error, source the file compiled (an
    error in a header it includes follows "In file included from SOURCE")."""
    source = None
    for line in out.splitlines():
        m = re.match(r"(?:In file included from )?([\w/]+/probe_\d+\.c)[:,]", line)
        if m:
            source = m.group(1)
        if re.search(r"(fatal )?error: ", line):
            yield source, line


@pytest.mark.parametrize("i", range(len(CASES)))
def test_include(compiled, i):
    tree, out = compiled
    layer, inc, ok, why = CASES[i]
    built = os.path.exists(tree / "b" / "obj" / layer / f"probe_{i}.o")
    errors = [line for source, line in error_lines(out) if source == f"{layer}/probe_{i}.c"]
    if ok:
        assert built and not errors, out
    else:
        assert not built, f"{layer} compiled #include {inc}"
        assert any(why in line for line in errors), out
