#!/usr/bin/python3
"""Finds dependency circles between the modules of the given folders, from
two independent sources: the local #include lines of the sources, and the
symbols of the compiled objects (nm: who defines a symbol, who uses it).

    tests/ops/circles.py [--build build] [--allow A,B,...] [--uses 'F=D D ...']... FOLDER...

A module is a source's name without its extension (`respond.c` and
`respond.h` are one module; a header alone, such as `handlers.h`, is one
too). A module's private header is part of it: `X_int.h` that includes
`X.h` (`hasher_int.h`, what the hasher's files share beyond `hasher.h`)
is module `X`, which its parts include; their calls, which the symbols
show, must still point one way. (`client_int.h` and `h_hub_int.h`, shared
by several modules and extending none, stay modules of their own.) An include edge goes from the file that includes to the module of the
header it names ("x.h", found in the folders given or in the build's
generated sources); a symbol edge goes from the object that uses a symbol to
the object that defines it. A circle is a strongly connected set of two or
more modules; each is printed with the edges that close it. Exits 1 when
there is one, unless --allow names every module of each circle (for a
folder whose circle another change removes).

With --uses (the Makefile's USES_ of each layer, as `make circles` passes
them: a folder, or a module such as client/cli, with the directories it is
compiled with), every edge between two folders must also point to one of
those directories, or to a header that a folder of links among them leads
to (the client's build/include/client): the include paths stop an include
that climbs, and this stops a call that climbs without one (a function
declared by hand)."""
import argparse
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_of(path, root):
    name, ext = os.path.splitext(os.path.relpath(path, root))
    if ext == ".h" and name.endswith("_int"):
        public = os.path.basename(name[:-len("_int")]) + ".h"
        with open(path, errors="replace") as f:
            if public in INCLUDE.findall(f.read()):
                return name[:-len("_int")]
    return name


def sources(root, folders):
    """{module: [paths]} of every .c and .h in the folders (not below them)."""
    out = {}
    for folder in folders:
        d = os.path.join(root, folder)
        for name in sorted(os.listdir(d)):
            if name.endswith((".c", ".h")):
                p = os.path.join(d, name)
                out.setdefault(module_of(p, root), []).append(p)
    return out


def include_edges(root, mods):
    """{(from, to): "file includes header"} over the modules' local includes."""
    by_header = {}
    for m, paths in mods.items():
        for p in paths:
            if p.endswith(".h"):
                by_header.setdefault(os.path.basename(p), m)
                by_header.setdefault(os.path.relpath(p, os.path.join(root, os.path.dirname(m))), m)
    edges = {}
    for m, paths in mods.items():
        for p in paths:
            with open(p, errors="replace") as f:
                text = f.read()
            for inc in INCLUDE.findall(text):
                target = by_header.get(inc) or by_header.get(os.path.basename(inc))
                if target and target != m:
                    edges.setdefault((m, target), f"{os.path.relpath(p, root)} includes \"{inc}\"")
    return edges


def nm(path, *flags):
    out = subprocess.run(["nm", *flags, path], capture_output=True, text=True, check=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def symbol_edges(root, build, mods):
    """{(from, to): "object uses symbol"} over the modules' objects."""
    objs = {}
    for m in mods:
        o = os.path.join(root, build, "obj", m + ".o")
        if os.path.exists(o):
            objs[m] = o
    defined = {}
    for m, o in objs.items():
        for s in nm(o, "-g", "--defined-only"):
            defined.setdefault(s, m)
    edges = {}
    for m, o in objs.items():
        for s in nm(o, "-u"):
            target = defined.get(s)
            if target and target != m:
                edges.setdefault((m, target), f"{m}.o uses {s}")
    return edges, len(objs)


def circles(nodes, edges):
    """Strongly connected sets of two or more nodes (Tarjan, iterative)."""
    succ = {n: sorted({b for (a, b) in edges if a == n}) for n in nodes}
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter[0]
                counter[0] += 1
                stack.append(v)
                on.add(v)
            if i < len(succ[v]):
                work.append((v, i + 1))
                w = succ[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return sorted(out)


def report(kind, found, edges):
    for comp in found:
        print(f"{kind} circle of {len(comp)}: {', '.join(comp)}")
        inside = set(comp)
        for (a, b), why in sorted(edges.items()):
            if a in inside and b in inside:
                print(f"    {a} -> {b}: {why}")


def allowed_modules(root, dirs):
    """The modules a source compiled with these include directories may
    use: those of the directories' own files, and those their links lead to."""
    out = set()
    for d in dirs:
        full = os.path.join(root, d)
        if not os.path.isdir(full):
            continue
        for name in os.listdir(full):
            if name.endswith((".c", ".h")):
                out.add(module_of(os.path.realpath(os.path.join(full, name)), root))
    return out


def climbing(edges, uses, allowed):
    """{(from, to): why} of the edges whose target the source may not use."""
    out = {}
    for (a, b), why in edges.items():
        key = a if a in uses else os.path.dirname(a)
        if key in uses and os.path.dirname(b) != os.path.dirname(a) and b not in allowed[key]:
            out[(a, b)] = why
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="+")
    ap.add_argument("--build", default="build")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    ap.add_argument("--allow", default="", help="modules whose circles are known (comma-separated)")
    ap.add_argument("--uses", action="append", default=[], metavar="FOLDER=DIR DIR...",
                    help="the include directories a folder (or module) is compiled with")
    a = ap.parse_args()
    uses = dict(u.split("=", 1) for u in a.uses)
    allowed = {k: allowed_modules(a.root, v.split()) for k, v in uses.items()}
    mods = sources(a.root, a.folders)
    inc = include_edges(a.root, mods)
    sym, n_objs = symbol_edges(a.root, a.build, mods)
    if n_objs == 0:
        print(f"no objects of {', '.join(a.folders)} under {a.build}/obj: build first")
        return 1
    known = set(filter(None, a.allow.split(",")))
    bad = up = 0
    for kind, edges in (("include", inc), ("symbol", sym)):
        found = circles(set(mods), edges)
        report(kind, found, edges)
        bad += sum(1 for c in found if not set(c) <= known)
        for (x, y), why in sorted(climbing(edges, uses, allowed).items()):
            print(f"{kind} edge to a layer it may not use: {x} -> {y}: {why}")
            up += 1
    print(f"{len(mods)} modules, {len(inc)} include edges, {len(sym)} symbol edges "
          f"({n_objs} objects): {bad} circle(s)" + (f", {up} edge(s) to a layer not used" if uses else ""))
    return 1 if bad or up else 0


if __name__ == "__main__":
    sys.exit(main())
