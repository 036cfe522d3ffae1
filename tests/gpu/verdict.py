#!/usr/bin/python3
"""The verdict of tests/gpu/run.sh: its checks' results and the preload
benchmark's figures (bench/preload.py --json) against the targets, printed
as one line per target, the SKIPs by name, and an exit status.

    verdict.py --results FILE [--bench JSON | --no-bench REASON]

FILE has one line per check, as run.sh and tests/gpu/check.py print them:
`PASS name: detail`, `FAIL name: why` or `SKIP name: why`.

Each target prints `TARGET name: value (goal) MET|SHORT`, or `TARGET name:
SKIP (why)` where it cannot be measured (no link on the host backend,
safetensors not installed, no benchmark); then every SKIP, checks and
targets, is listed by name (`SKIP check name: why`, `SKIP target name`).
A SKIP is never a pass. Exit status (docs/GPU.md, "tests/gpu/run.sh"):

    0  every check ran and passed, every target ran and is MET
    1  a check FAILED (whatever the targets say)
    2  the check could not run at all (usage, dependencies, the build:
       run.sh exits so before any check)
    3  every check that ran passed, and at least one target is SHORT
    4  nothing failed and nothing is SHORT, but something was SKIPPED

bench/preload.py imports TARGETS for the goal column of its table.
"""
import argparse
import json
import sys

PASS, FAILED, CANNOT_RUN, SHORT, INCOMPLETE = 0, 1, 2, 3, 4
VERDICT = {PASS: "PASS", FAILED: "FAIL", SHORT: "SHORT", INCOMPLETE: "INCOMPLETE"}


class Ratio:
    """A preload figure against its denominator, both medians of the
    benchmark (keys of its "median" object): MET when num / den >= goal."""

    def __init__(self, name, num, den, goal):
        self.name, self.num, self.den, self.goal = name, num, den, goal

    def measure(self, bench):
        med, missing = bench.get("median", {}), bench.get("missing", {})
        for key in (self.num, self.den):
            if med.get(key) is None:
                return None, missing.get(key) or f"{key} was not measured"
        if not med[self.den] > 0:
            return None, f"{self.den} measured {med[self.den]}"
        return med[self.num] / med[self.den], None

    def met(self, value):
        return value >= self.goal

    def show(self, value):
        return f"{value:.3f} ({self.goal})"


class Latency:
    """A lease open latency percentile (ms) with `workers` opening at once:
    MET when below `limit`."""

    def __init__(self, name, workers, pct, limit):
        self.name, self.workers, self.pct, self.limit = name, workers, pct, limit

    def measure(self, bench):
        o = bench.get("opens", {}).get(str(self.workers))
        if not o or o.get(self.pct) is None:
            return None, bench.get("missing", {}).get("opens") or "open latency was not measured"
        return o[self.pct], None

    def met(self, value):
        return value < self.limit

    def show(self, value):
        return f"{value:.2f} ms (< {self.limit} ms)"


# The targets of issue 30 on an H100/H200; the denominators are the
# benchmark's rows (docs/PERFORMANCE.md, "GPU preload"): h2d the pinned
# host-to-device copy through the driver API, direct O_DIRECT io_uring reads
# at the loader's own depth and chunk size, safetensors the safetensors
# package's own load of the cached files (safetensors_cold: of the files
# dropped from the page cache, as the cold preload reads them).
TARGETS = [
    Ratio("warm preload / pinned link", "warm", "h2d", 0.7),
    Ratio("tmpfs preload / pinned link", "tmpfs", "h2d", 0.6),
    Ratio("cold preload / O_DIRECT at the same depth", "cold", "direct", 0.9),
    Ratio("first preload after a start / pinned link", "first", "h2d", 0.6),
    Ratio("warm preload / safetensors", "warm", "safetensors", 1.0),
    Ratio("cold preload / safetensors from the disk", "cold", "safetensors_cold", 1.0),
    Ratio("tmpfs preload / safetensors", "tmpfs", "safetensors", 1.0),
    Ratio("first preload after a start / safetensors", "first", "safetensors", 1.0),
    Latency("open p50, 1 worker", 1, "p50", 5),
    Latency("open p99, 1 worker", 1, "p99", 20),
    Latency("open p50, 8 workers at once", 8, "p50", 5),
    Latency("open p99, 8 workers at once", 8, "p99", 20),
]


def goals(row):
    """[(denominator, goal)] of the targets whose numerator is benchmark row
    `row`, for bench/preload.py's table."""
    return [(t.den, t.goal) for t in TARGETS if isinstance(t, Ratio) and t.num == row]


def read_results(path):
    """[(kind, name, detail)] of the lines of a results file that are check
    results; other lines (a tool's own output) are ignored."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            kind, _, rest = line.rstrip("\n").partition(" ")
            if kind in ("PASS", "FAIL", "SKIP") and rest:
                name, _, detail = rest.partition(": ")
                out.append((kind, name, detail))
    return out


def evaluate(bench, no_bench):
    """[(target, value or None, verdict MET|SHORT|SKIP, why)]."""
    out = []
    for t in TARGETS:
        if bench is None:
            out.append((t, None, "SKIP", no_bench))
            continue
        value, why = t.measure(bench)
        if value is None:
            out.append((t, None, "SKIP", why))
        else:
            out.append((t, value, "MET" if t.met(value) else "SHORT", None))
    return out


def status(checks, targets):
    kinds = [k for k, _, _ in checks]
    verdicts = [v for _, _, v, _ in targets]
    if "FAIL" in kinds:
        return FAILED
    if "SHORT" in verdicts:
        return SHORT
    if "SKIP" in kinds or "SKIP" in verdicts:
        return INCOMPLETE
    return PASS


def phases_text(p):
    """The preload's phases (GET's preload.phases: alloc, ring, plan, copy,
    finish, in seconds), or n/a where the daemon does not report them."""
    names = ("alloc", "ring", "plan", "copy", "finish")
    if not isinstance(p, dict) or not all(isinstance(p.get(n), (int, float)) for n in names):
        return "phases n/a (the daemon reports no preload.phases)"
    return "phases " + " + ".join(f"{n} {p[n]:.3f}" for n in names) + \
        f" = {sum(p[n] for n in names):.3f} s"


def headline(bench):
    """The warm preload (files in the page cache, ring already pinned): the
    figure the link is judged by, with where its time went."""
    med = bench.get("median", {})
    warm, h2d = med.get("warm"), med.get("h2d")
    if warm is None:
        return "HEADLINE warm preload: not measured"
    w = bench.get("warm_preload") or {}
    link = f" = {warm / h2d:.2f}x the pinned link ({h2d:.2f} GB/s)" if h2d else ""
    secs = f" in {w['seconds']:.3f} s" if isinstance(w.get("seconds"), (int, float)) else ""
    return (f"HEADLINE warm preload: {warm:.2f} GB/s{link}, {bench.get('bytes', 0) / 2**30:.2f} GiB"
            f"{secs} with {bench.get('threads', '?')} copy threads; {phases_text(w.get('phases'))}")


def report(checks, bench, no_bench, out=sys.stdout):
    """Prints the verdict; returns the exit status."""
    targets = evaluate(bench, no_bench)
    if bench is not None:
        print(headline(bench), file=out)
    for t, value, verdict, why in targets:
        print(f"TARGET {t.name}: " + (f"SKIP ({why})" if verdict == "SKIP"
                                      else f"{t.show(value)} {verdict}"), file=out)
    skips = [f"check {name}: {why}" for kind, name, why in checks if kind == "SKIP"]
    skips += [f"target {t.name}" for t, _, verdict, _ in targets if verdict == "SKIP"]
    for s in skips:
        print(f"SKIP {s}", file=out)
    failed = [name for kind, name, _ in checks if kind == "FAIL"]
    st = status(checks, targets)
    n = {k: sum(1 for c in checks if c[0] == k) for k in ("PASS", "FAIL", "SKIP")}
    m = {k: sum(1 for t in targets if t[2] == k) for k in ("MET", "SHORT", "SKIP")}
    print(f"tensord GPU check: {VERDICT[st]} (exit {st}): checks {n['PASS']} passed, "
          f"{n['FAIL']} failed, {n['SKIP']} skipped; targets {m['MET']} MET, {m['SHORT']} SHORT, "
          f"{m['SKIP']} skipped" + (f"; failed: {', '.join(failed)}" if failed else "")
          + (" (a SKIP is never a pass)" if skips else ""), file=out)
    return st


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", required=True, help="the checks' PASS/FAIL/SKIP lines")
    ap.add_argument("--bench", help="bench/preload.py --json output")
    ap.add_argument("--no-bench", default="the preload benchmark did not run",
                    help="why every target is skipped when --bench is absent")
    a = ap.parse_args()
    checks = read_results(a.results)
    bench = None
    if a.bench:
        try:
            with open(a.bench) as f:
                bench = json.load(f)
        except (OSError, ValueError) as e:
            checks.append(("FAIL", "preload benchmark", f"no result in {a.bench}: {e}"))
    sys.exit(report(checks, bench, a.no_bench))


if __name__ == "__main__":
    main()
