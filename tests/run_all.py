#!/usr/bin/python3
"""`make test`: every test stage, then one "N passed, N failed" line.

Stages: builds (with and without CUDA, the unit tests plain and under
ASan+UBSan) and the dependency-circle check of every layer; then the
integration suite against the real daemon and, side by side, against the
ASan+UBSan daemon, both in the background while the
CPU-bound stages run in the foreground: the C unit tests, the same under
ASan+UBSan and ThreadSanitizer, the st_header differential (tests/diff/),
libFuzzer smoke runs with crash-regression replay; then the CUDA backend
against the CUDA driver test double (make test-cuda-double), the GPU check
script dry on the host backend (built from fetched .debs), and the
operations checks. Each stage's own count is added to the total; a stage
that cannot run at all counts as one failure. Exits non-zero on any
failure."""
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The interpreter make runs this with: the tests' virtual environment (make deps).
PY = sys.executable
JOBS = str(os.cpu_count() or 2)
SAN = "address,undefined"
SAN_BUILD = "build/san-address-undefined"
SUMMARY = re.compile(r"(\d+) (passed|failed|error|errors|skipped)")

totals = {"passed": 0, "failed": 0, "skipped": 0}


def banner(name):
    print(f"\n=== {name}", flush=True)


def count(output):
    """Counts from the last summary line of a runner's output."""
    for line in reversed(output.splitlines()):
        found = SUMMARY.findall(line)
        if found and ("passed" in line or "failed" in line):
            c = {"passed": 0, "failed": 0, "skipped": 0}
            for n, what in found:
                key = {"error": "failed", "errors": "failed"}.get(what, what)
                c[key] += int(n)
            return c
    return None


def start(cmd, env=None):
    """Starts a stage's command, its output going to a temporary file (so
    two stages side by side never block on a full pipe); finish() collects it."""
    log = tempfile.TemporaryFile(mode="w+", errors="replace")
    p = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=log,
                         stderr=subprocess.STDOUT, text=True)
    return (time.time(), p, log)


def finish(name, started, counted=True, judge=None):
    """Prints a started stage's output and adds its count to the totals;
    `judge(output)`, when given, says whether the stage passed (None) or
    why not, instead of the exit status."""
    t0, p, log = started
    p.wait()
    log.seek(0)
    out = log.read()
    log.close()
    banner(name)
    why = judge(out) if judge else (None if p.returncode == 0 else "failed")
    print(out[-20000:] if why else out[-6000:], end="")
    if judge and why:
        print(f"--- {why}")
    c = count(out) if counted else None
    if c is None:
        c = {"passed": 0 if why else 1, "failed": 1 if why else 0, "skipped": 0}
    elif why and c["failed"] == 0:
        c["failed"] = 1  # the runner failed without saying which test
    for k in totals:
        totals[k] += c[k]
    print(f"--- {name}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped "
          f"({time.time() - t0:.0f}s)", flush=True)
    return why is None


def stage(name, cmd, env=None, counted=True, judge=None):
    return finish(name, start(cmd, env), counted, judge)


def judge_gpu_dry_run(out):
    """tests/gpu/run.sh --device host, as make test runs it: a host cannot
    meet a GPU's targets, so the dry run passes when no check failed (exit
    0, 3 SHORT or 4 SKIP), every target printed its line, and the only
    targets skipped are those against the link, which needs a GPU: a figure
    the host can measure that went missing fails it, and so does a
    tensor-parallel check (tests/gpu/split_check.py) that did not pass."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
    import verdict
    m = re.findall(r"^run\.sh exit (\d+)$", out, re.M)
    if not m:
        return "run.sh did not finish"
    st = int(m[-1])
    if st not in (verdict.PASS, verdict.SHORT, verdict.INCOMPLETE):
        return f"run.sh exited {st}: a check failed or could not run"
    # torch is a test dependency (python3-torch), so the tensor-parallel
    # check runs on the host: a SKIP of it, which run.sh's exit 4 allows,
    # would hide it from make test (the verdict names every SKIP).
    if not re.search(r"^tensor-parallel checks: 0 failed$", out, re.M):
        return "the tensor-parallel check (tests/gpu/split_check.py) did not run to its end"
    skipped = re.findall(r"^SKIP check (tensor-parallel/.*)$", out, re.M)
    if skipped:
        return f"the tensor-parallel check skipped: {skipped[0]}"
    lines = dict(re.findall(r"^TARGET (.+?): (.*)$", out, re.M))
    for t in verdict.TARGETS:
        if t.name not in lines:
            return f"no TARGET line for {t.name}"
        if lines[t.name].startswith("SKIP") and getattr(t, "den", None) != "h2d":
            return f"target {t.name} skipped on the host: {lines[t.name]}"
    return None


def start_integration(built, san_built):
    """Starts the integration suite against the plain daemon and, side by
    side, against the ASan+UBSan one; returns what finish_integration needs."""
    runs = []
    for f in os.listdir(os.path.join(ROOT, "build")):
        if f.startswith("asan-daemon."):
            os.remove(os.path.join(ROOT, "build", f))
    # -rs: every skip says why in the summary.
    if built:
        runs.append(("integration", start([PY, "-m", "pytest", "-q", "-rs", "-p",
                                           "no:cacheprovider", "tests/integration"])))
    if san_built:
        runs.append(("integration against the ASan+UBSan daemon", start(
            [PY, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "--maxfail=20",
             "-m", "not slow", "tests/integration"],
            env={"TENSORD_BIN": f"{SAN_BUILD}/tensord",
                 "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:log_path="
                                 + os.path.join(ROOT, "build", "asan-daemon"),
                 "TENSORD_SANITIZED": "1"})))
    return runs


def finish_integration(runs):
    for name, started in runs:
        finish(name, started)
    reports = [f for f in os.listdir(os.path.join(ROOT, "build"))
               if f.startswith("asan-daemon.")]
    banner("sanitizer reports from the daemon")
    for f in reports:
        print(open(os.path.join(ROOT, "build", f), errors="replace").read()[-6000:])
    totals["passed" if not reports else "failed"] += 1
    print(f"--- {len(reports)} sanitizer report(s)")


def main():
    t0 = time.time()
    built = stage("build (CUDA=auto)", ["make", "-j", JOBS, "all"], counted=False)
    stage("build (CUDA=no)", ["make", "-j", JOBS, "CUDA=no", "BUILD=build/nocuda", "all"],
          counted=False)
    # No include or call circle in any layer, nor across them (make circles).
    stage("dependency circles (every layer)", ["make", "--no-print-directory", "circles"],
          counted=False)
    unit_bins = sorted(
        f"build/tests/{f[:-2]}" for f in os.listdir(os.path.join(ROOT, "tests/unit"))
        if f.startswith("test_") and f.endswith(".c"))
    unit_built = stage("unit tests: build", ["make", "-j", JOBS] + unit_bins, counted=False)
    san_bins = [b.replace("build/", SAN_BUILD + "/", 1) for b in unit_bins]
    san_built = stage("unit tests under ASan+UBSan: build",
                      ["make", "-j", JOBS, f"SANITIZER={SAN}"] + san_bins + [f"{SAN_BUILD}/tensord"],
                      counted=False)
    # The two integration runs go side by side, and beside the CPU-bound
    # stages that follow: they spend most of their time waiting on the
    # daemons they start (each in its own temporary directory, on its own
    # port), about 0.4 CPU seconds per second each.
    runs = start_integration(built, san_built)
    if unit_built:
        stage("unit tests", [PY, "tests/run_unit.py"] + unit_bins)
    if san_built:
        stage("unit tests under ASan+UBSan", [PY, "tests/run_unit.py"] + san_bins,
              env={"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
                   "UBSAN_OPTIONS": "print_stacktrace=1"})
    # The unit tests whose threads share state, under ThreadSanitizer
    # (`make tsan`; about 30 s, most of it test_conns' timeouts).
    stage("unit tests under ThreadSanitizer", ["make", "--no-print-directory", "-j", JOBS, "tsan",
                                               f"PYTHON={PY}"])
    # One stage, not 20,000 counted cases: it says whether the parser still
    # agrees with the jansson-based one it replaced, and with Python's json.
    stage("st_header differential (20,000 generated headers)",
          [PY, "tests/diff/diff_st_header.py", "--cases", "20000"], counted=False)
    stage("fuzz smoke", ["make", "-j", JOBS, "fuzz-smoke",
                         f"FUZZ_SMOKE_SECONDS={os.environ.get('FUZZ_SMOKE_SECONDS', '5')}"])
    finish_integration(runs)
    if built:
        # The CUDA backend and the client's CUDA path against the driver test
        # double (tests/cuda_double/), ASan+UBSan; prints its own count.
        stage("CUDA backend against the driver test double",
              ["make", "--no-print-directory", "test-cuda-double"])
        # tests/gpu/run.sh as it runs on a bare GPU machine, dry (host
        # backend): built from .debs fetched here (TENSORD_USE_DEBS=1, so a
        # library the build gains and the script's package list lacks fails
        # here), the runtime closure, the preload, workers, evict and the
        # preload benchmark; judged by judge_gpu_dry_run.
        debs = "build/debs-check"
        stage("GPU check script (tests/gpu/run.sh --device host, built from .debs)",
              ["bash", "-c",
               f"tests/gpu/run.sh --fetch-debs --no-model --debs {debs} >/dev/null && "
               f"{{ tests/gpu/run.sh --device host --size-mb 64 --bench-gib 0.25 --debs {debs}; "
               "echo \"run.sh exit $?\"; }"],
              env={"TENSORD_USE_DEBS": "1", "TENSORD_GPU_BUILD": "build/gpu-check",
                   "PYTHON": PY}, counted=False, judge=judge_gpu_dry_run)
        if os.path.isdir(os.path.join(ROOT, "tests/ops")):
            stage("operations checks", [PY, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                                        "tests/ops"])
    print(f"\nmake test took {time.time() - t0:.0f}s")
    print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")
    return 1 if totals["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
