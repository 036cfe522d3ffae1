"""tests/ops/circles.py, the dependency-circle check make test runs over
every layer: it finds a circle made through includes and one made through
calls between objects (a tree written here and compiled with cc), names
the edges that close it, accepts a tree that depends one way (a module's
private header included by its parts too), finds a call from a folder to
one it may not use that no include path would stop, and passes on the
layers as built."""
import os
import subprocess
import sys

from conftest import ROOT, tool

SCRIPT = os.path.join(ROOT, "tests", "ops", "circles.py")


def run(root, build, *args):
    return subprocess.run([sys.executable, SCRIPT, "--root", str(root), "--build", build,
                           *args], capture_output=True, text=True, timeout=120)


def tree(tmp_path, files, folder="src", uses=()):
    """Writes FOLDER/NAME files and compiles each .c into build/obj/FOLDER/NAME.o,
    with FOLDER and the folders it uses on the include path."""
    cc = tool("cc")
    src = tmp_path / folder
    src.mkdir(exist_ok=True)
    obj = tmp_path / "build" / "obj" / folder
    obj.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (src / name).write_text(text)
    inc = [f"-I{tmp_path / d}" for d in (folder, *uses)]
    for name in files:
        if name.endswith(".c"):
            subprocess.run([cc, "-c", *inc, str(src / name), "-o",
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


def test_a_call_to_a_layer_not_used(tmp_path):
    """lo/ may use only itself, hi/ both: hi calling lo passes; lo calling
    hi through a declaration of its own (which lo's include path cannot
    stop) is reported, and so is an include of hi's header found by a
    relative path; a link in a folder lo uses makes its target usable."""
    tree(tmp_path, {"l.h": "int l(void);\n", "l.c": '#include "l.h"\nint l(void) { return 1; }\n'},
         "lo")
    tree(tmp_path, {"h.h": "int h(void);\n",
                    "h.c": '#include "h.h"\n#include "l.h"\nint h(void) { return l(); }\n'},
         "hi", uses=["lo"])
    uses = ["--uses", "lo=lo", "--uses", "hi=lo hi"]
    p = run(tmp_path, "build", *uses, "lo", "hi")
    assert p.returncode == 0, p.stdout
    assert "0 edge(s) to a layer not used" in p.stdout, p.stdout
    tree(tmp_path, {"up.c": "int h(void); int up(void);\nint up(void) { return h(); }\n",
                    "inc.h": '#include "../hi/h.h"\n'}, "lo")
    p = run(tmp_path, "build", *uses, "lo", "hi")
    assert p.returncode == 1, p.stdout
    assert "symbol edge to a layer it may not use: lo/up -> hi/h: lo/up.o uses h" in p.stdout
    assert 'include edge to a layer it may not use: lo/inc -> hi/h: lo/inc.h includes' in p.stdout
    assert "2 edge(s) to a layer not used" in p.stdout, p.stdout
    (tmp_path / "links").mkdir()
    os.symlink("../hi/h.h", tmp_path / "links" / "h.h")
    p = run(tmp_path, "build", "--uses", "lo=lo links", "--uses", "hi=lo hi", "lo", "hi")
    assert p.returncode == 0, p.stdout


def test_every_layer_depends_one_way():
    """No circle in any layer's modules, nor across them, and no edge from a
    layer to one it may not use (make circles)."""
    if not os.path.exists(os.path.join(ROOT, "build", "obj", "server", "http", "http.o")):
        import pytest
        pytest.skip("build/ is not built (make all)")
    layers = subprocess.run(["make", "-s", "--no-print-directory", "print-LAYERS"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    assert "core/base" in layers and "server/http" in layers and "client" in layers
    uses = subprocess.run(["make", "-s", "--no-print-directory", "print-uses"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout.splitlines()
    uses = [u for u in uses if "=" in u]  # not a "CONFIG" line of a remade config.mk
    assert [u.split("=")[0] for u in uses] == layers + ["client/cli"], uses
    p = run(ROOT, "build", *(f"--uses={u}" for u in uses), *layers)
    assert p.returncode == 0, p.stdout
    assert "0 circle(s), 0 edge(s) to a layer not used" in p.stdout, p.stdout
