"""tests/ops/circles.py, the dependency-circle check make test runs over
every layer: it finds a circle made through includes and one made through
calls between objects (a tree written here and compiled with cc), names
the edges that close it, accepts a tree that depends one way (a module's
private header included by its parts too), and passes on the layers as
built."""
import os
import subprocess
import sys

from conftest import ROOT, tool

SCRIPT = os.path.join(ROOT, "tests", "ops", "circles.py")


def run(root, build, *folders):
    return subprocess.run([sys.executable, SCRIPT, "--root", str(root), "--build", build,
                           *folders], capture_output=True, text=True, timeout=120)


def tree(tmp_path, files):
    """Writes src/NAME files and compiles each .c into build/obj/src/NAME.o."""
    cc = tool("cc")
    src = tmp_path / "src"
    src.mkdir()
    obj = tmp_path / "build" / "obj" / "src"
    obj.mkdir(parents=True)
    for name, text in files.items():
        (src / name).write_text(text)
    for name in files:
        if name.endswith(".c"):
            subprocess.run([cc, "-c", "-I", str(src), str(src / name), "-o",
                            str(obj / (name[:-2] + ".o"))], check=True)


def test_one_way_passes(tmp_path):
    tree(tmp_path, {"a.h": "int a(void);\n", "a.c": '#include "a.h"\n#include "b.h"\n'
                    "int a(void) { return b(); }\n",
                    "b.h": "int b(void);\n", "b.c": '#include "b.h"\nint b(void) { return 1; }\n'})
    p = run(tmp_path, "build", "src")
    assert p.returncode == 0, p.stdout
    assert "0 circle(s)" in p.stdout


def test_include_circle(tmp_path):
    tree(tmp_path, {"a.h": '#pragma once\n#include "b.h"\n',
                    "a.c": '#include "a.h"\nint a(void);\nint a(void) { return 0; }\n',
                    "b.h": '#pragma once\n#include "a.h"\n',
                    "b.c": '#include "b.h"\nint b(void);\nint b(void) { return 0; }\n'})
    p = run(tmp_path, "build", "src")
    assert p.returncode == 1
    assert "include circle of 2: src/a, src/b" in p.stdout
    assert 'src/a -> src/b: src/a.h includes "b.h"' in p.stdout


def test_call_circle(tmp_path):
    """Two files that call each other, with no include between them."""
    tree(tmp_path, {"a.c": "int a(void); int b(void);\nint a(void) { return b(); }\n",
                    "b.c": "int a(void); int b(void);\nint b(void) { return a(); }\n",
                    "c.c": "int a(void); int c(void);\nint c(void) { return a(); }\n"})
    p = run(tmp_path, "build", "src")
    assert p.returncode == 1
    assert "symbol circle of 2: src/a, src/b" in p.stdout
    assert "src/a -> src/b: src/a.o uses b" in p.stdout
    assert "src/c" not in p.stdout.split("symbol circle")[1].split("\n")[0]


def test_unbuilt_tree_is_an_error(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.c").write_text("int a;\n")
    p = run(tmp_path, "build", "src")
    assert p.returncode == 1 and "build first" in p.stdout


def test_private_header_is_its_module(tmp_path):
    """x_int.h that includes x.h is module x's own: x.c includes it (no
    circle with itself) and x_part.c, which x.c calls, includes it too (an
    include up, a call down: no circle in either graph). y_int.h, which
    extends no y.h, stays a module apart."""
    tree(tmp_path, {"x.h": "int x(void);\n",
                    "x_int.h": '#pragma once\n#include "x.h"\nint x_part(void);\n',
                    "x.c": '#include "x_int.h"\nint x(void) { return x_part(); }\n',
                    "x_part.c": '#include "x_int.h"\nint x_part(void) { return 1; }\n',
                    "y_int.h": "int y(void);\n", "y.h": '#include "y_int.h"\n'})
    p = run(tmp_path, "build", "src")
    assert p.returncode == 0, p.stdout
    assert "4 modules" in p.stdout, p.stdout  # x (x.c, x.h, x_int.h), x_part, y, y_int


def test_every_layer_depends_one_way():
    """No circle in any layer's modules, nor across them (make circles)."""
    if not os.path.exists(os.path.join(ROOT, "build", "obj", "server", "http", "http.o")):
        import pytest
        pytest.skip("build/ is not built (make all)")
    layers = subprocess.run(["make", "-s", "--no-print-directory", "print-LAYERS"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    assert "core" in layers and "server/http" in layers and "client" in layers
    p = run(ROOT, "build", *layers)
    assert p.returncode == 0, p.stdout
