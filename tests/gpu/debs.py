#!/usr/bin/python3
"""The runtime closure that tests/gpu/run.sh carries in .debs/, computed
from the package archive rather than listed by hand, and checked on the
machine that runs the build.

    debs.py closure --manifest FILE DEV_PACKAGE...
        (where apt works) prints the runtime packages to download with the
        build's -dev packages, and writes FILE (JSON) for `check`. The roots
        are the shared-library packages (Section: libs) the -dev packages
        depend on (libcurl4, libmicrohttpd12, libssl3, ...); the closure
        adds their Depends and Pre-Depends, recursively (first of each
        alternative; a virtual package's first provider), down to the
        system's C library: the package that owns the libc.so.6 this
        machine runs, and what it depends on (libc6, libgcc-s1,
        gcc-12-base). Those are never carried: the C library must be the
        one the system's dynamic loader belongs to, and every system has it.
        Everything else is carried, even where a minimal base system has a
        package of that name, because the bases differ by soname: Debian
        12's libidn2, libpsl and libgnutls need libunistring.so.2, Ubuntu
        24.04 ships libunistring.so.5 only.

    debs.py check --root DIR --manifest FILE BINARY...
        (after the build) every library BINARY loads, as the dynamic loader
        resolves it (ldd), must come from the unpacked packages under DIR
        or be one of the C library's own (the manifest's base sonames); and
        the glibc symbol versions the carried libraries and BINARY need must
        be at most this system's glibc. Prints one PASS or FAIL line for
        run.sh's results; exit 1 on FAIL.
"""
import argparse
import json
import os
import re
import subprocess
import sys

APT_DEPENDS = ["apt-cache", "depends", "--no-recommends", "--no-suggests", "--no-conflicts",
               "--no-breaks", "--no-replaces", "--no-enhances"]
SONAME = re.compile(r"^lib.*\.so(\.\d+)*$|^ld-linux.*\.so(\.\d+)*$")


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def depends(pkgs, recurse=False):
    """{package: [packages it depends on]} for `pkgs` (and, with recurse,
    every package they reach), with `apt-cache depends` (Depends and
    PreDepends; the first of each alternative; a virtual package's first
    provider)."""
    out, cur, alt = {}, None, False
    lines = run(APT_DEPENDS + (["--recurse"] if recurse else []) + sorted(pkgs)).splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.startswith(" "):
            cur = line.strip()
            out[cur] = []
            alt = False
            continue
        m = re.match(r"^ ([ |])(PreDepends|Depends): (.*)$", line)
        if not m:
            continue
        taken_alt = alt  # this line is a later alternative of a taken one
        alt = m.group(1) == "|"
        if taken_alt:
            continue
        dep = m.group(3)
        if dep.startswith("<"):  # virtual: its providers follow, indented deeper
            providers = []
            while i < len(lines) and lines[i].startswith("    "):
                providers.append(lines[i].strip())
                i += 1
            if not providers:
                continue
            dep = providers[0]
        out[cur].append(dep.split(":")[0])
    return out


def sections(pkgs):
    """{package: its archive section, without the component (libs, libdevel)}."""
    out, cur = {}, None
    for line in run(["apt-cache", "show", "--no-all-versions"] + sorted(pkgs)).splitlines():
        if line.startswith("Package: "):
            cur = line.split(": ", 1)[1]
        elif line.startswith("Section: ") and cur:
            out[cur] = line.split(": ", 1)[1].split("/")[-1]
    return out


def owner(path):
    """The package that owns `path`, as dpkg records it (usrmerge: the
    path as given, resolved, or under the other of / and /usr)."""
    real = os.path.realpath(path)
    tries = [path, real]
    tries += [real[4:] if real.startswith("/usr/") else "/usr" + real]
    for p in tries:
        r = subprocess.run(["dpkg", "-S", p], capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout.split(":")[0].strip()
    raise SystemExit(f"debs.py: no package owns {path}")


def ldd(binary):
    """[(soname, resolved path or None)] as the dynamic loader resolves
    `binary`'s libraries (linux-vdso has no file and is left out)."""
    r = subprocess.run(["ldd", binary], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"ldd {binary}: {r.stderr.strip() or r.stdout.strip()}")
    libs = []
    for line in r.stdout.splitlines():
        line = line.strip()
        m = re.match(r"^(\S+) => (not found|(\S+) \(0x[0-9a-f]+\))$", line)
        if m:
            libs.append((m.group(1), m.group(3)))
        elif re.match(r"^(/\S+) \(0x[0-9a-f]+\)$", line):  # the dynamic loader itself
            path = line.split()[0]
            libs.append((os.path.basename(path), path))
    return libs


def _reach(graph, start, stop):
    """The packages reachable from `start` in `graph`, not entering `stop`."""
    seen, todo = set(), set(start)
    while todo:
        seen |= todo
        todo = {d for p in todo for d in graph.get(p, [])} - seen - stop
    return seen


def closure(dev_pkgs):
    """(carried, base): the runtime packages to carry, and the C library's."""
    libc = next((p for name, p in ldd("/bin/sh") if name.startswith("libc.so")), None)
    if not libc:
        raise SystemExit("debs.py: ldd /bin/sh shows no libc.so")
    deps = {d for ds in depends(dev_pkgs).values() for d in ds}
    sec = sections(deps)
    roots = {d for d in deps if sec.get(d) == "libs"}
    libc_pkg = owner(libc)
    graph = depends(roots | {libc_pkg}, recurse=True)
    reach = lambda start, stop: _reach(graph, start, stop)  # noqa: E731
    base = reach({libc_pkg}, set())
    carried = reach(roots - base, base)
    return sorted(carried), sorted(base)


def base_sonames(base):
    """The shared objects the C library's packages install (libc.so.6,
    libm.so.6, ld-linux-x86-64.so.2, libgcc_s.so.1, ...)."""
    names = set()
    for line in run(["dpkg", "-L"] + base).splitlines():
        if SONAME.match(os.path.basename(line)):
            names.add(os.path.basename(line))
    return sorted(names)


def glibc_needed(paths):
    """The highest GLIBC_x.y symbol version any of `paths` needs (readelf
    -V), as a tuple, and the file that needs it."""
    best, who = (0,), None
    for p in paths:
        out = subprocess.run(["readelf", "-V", "-W", p], capture_output=True, text=True).stdout
        for v in re.findall(r"Name: GLIBC_(\d+(?:\.\d+)+)", out):
            t = tuple(int(x) for x in v.split("."))
            if t > best:
                best, who = t, p
    return best, who


def check(root, manifest, binaries):
    """(ok, line) for run.sh's results."""
    root = os.path.realpath(root)
    base = set(manifest["base_sonames"])
    carried, system, problems = {}, {}, []
    for b in binaries:
        for name, path in ldd(b):
            if path is None:
                problems.append(f"{os.path.basename(b)} needs {name}: not found")
            elif os.path.realpath(path).startswith(root + os.sep):
                carried[name] = os.path.realpath(path)
            elif name in base or os.path.basename(path) in base:
                system[name] = path
            else:
                problems.append(f"{os.path.basename(b)} loads {name} from the system ({path}), "
                                f"not from {root}: add its package to the closure")
    need, who = glibc_needed(list(carried.values()) + list(binaries))
    have = tuple(int(x) for x in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split("."))
    if need > have:
        problems.append(f"{who} needs GLIBC_{'.'.join(map(str, need))}, this system has glibc "
                        f"{'.'.join(map(str, have))}")
    if problems:
        return False, "; ".join(problems)
    return True, (f"{len(carried)} libraries from the carried packages, "
                  f"{len(system)} from the system's C library ({', '.join(sorted(system))}); "
                  f"they need glibc >= {'.'.join(map(str, need))}, this system has "
                  f"{'.'.join(map(str, have))}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("closure")
    c.add_argument("--manifest", required=True)
    c.add_argument("dev", nargs="+")
    k = sub.add_parser("check")
    k.add_argument("--root", required=True)
    k.add_argument("--manifest", required=True)
    k.add_argument("binaries", nargs="+")
    a = ap.parse_args()
    if a.cmd == "closure":
        carried, base = closure(a.dev)
        with open(a.manifest, "w") as f:
            json.dump({"build": sorted(a.dev), "carried": carried, "base": base,
                       "base_sonames": base_sonames(base)}, f, indent=1)
        print(" ".join(carried))
        return 0
    try:
        with open(a.manifest) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        print(f"FAIL runtime closure: no manifest ({e}): run tests/gpu/run.sh --fetch-debs again")
        return 1
    ok, line = check(a.root, manifest, a.binaries)
    print(f"{'PASS' if ok else 'FAIL'} runtime closure: {line}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
