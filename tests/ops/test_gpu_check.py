"""tests/gpu/run.sh's judgement and its .debs closure, without a GPU or a
daemon: the verdict (tests/gpu/verdict.py) over benchmark figures made
up here, the exit statuses, and tests/gpu/debs.py's reading of apt and ldd.
The dry run itself (make test's "GPU check script" stage) runs the real
thing on the host backend."""
import copy
import io
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import debs  # noqa: E402
import verdict  # noqa: E402

RUN_SH = os.path.join(ROOT, "tests", "gpu", "run.sh")
PHASES = {"alloc": 0.01, "ring": 0.0, "plan": 0.002, "copy": 0.4, "finish": 0.008}

# A GPU run where every target is met (figures of the shape bench/preload.py
# writes; the link at 54 GB/s).
GOOD = {
    "device": "cuda:0", "bytes": 8 << 30, "threads": 14,
    "median": {"h2d": 54.0, "direct": 3.0, "safetensors": 4.6, "safetensors_cold": 2.5,
               "warm": 40.0, "tmpfs": 35.0, "cold": 2.9, "first": 36.0, "pagecache_n": 60.0},
    "missing": {},
    "warm_preload": {"gbps": 40.0, "seconds": 0.42, "phases": PHASES},
    "opens": {"1": {"p50": 0.5, "p99": 1.0}, "8": {"p50": 2.0, "p99": 9.0}},
}
CHECKS = [("PASS", "preload", "ready"), ("PASS", "C client open", "ok")]


def judge(checks, bench, no_bench="no benchmark"):
    out = io.StringIO()
    st = verdict.report(checks, bench, no_bench, out)
    return st, out.getvalue().splitlines()


def targets(lines):
    return {ln.split(": ")[0][len("TARGET "):]: ln.split(": ", 1)[1]
            for ln in lines if ln.startswith("TARGET ")}


def test_all_met_is_zero_with_one_line_per_target():
    st, lines = judge(CHECKS, GOOD)
    assert st == verdict.PASS == 0
    t = targets(lines)
    assert list(t) == [x.name for x in verdict.TARGETS]
    assert all(v.endswith(" MET") for v in t.values()), t
    assert t["warm preload / pinned link"] == "0.741 (0.7) MET"
    assert t["open p99, 8 workers at once"] == "9.00 ms (< 20 ms) MET"
    assert not [ln for ln in lines if ln.startswith("SKIP")]
    assert lines[-1].startswith("tensord GPU check: PASS (exit 0)")


def test_headline_is_the_warm_preload_with_its_phases():
    _, lines = judge(CHECKS, GOOD)
    head = [ln for ln in lines if ln.startswith("HEADLINE")]
    assert len(head) == 1
    assert "warm preload: 40.00 GB/s = 0.74x the pinned link (54.00 GB/s)" in head[0]
    assert "alloc 0.010 + ring 0.000 + plan 0.002 + copy 0.400 + finish 0.008 = 0.420 s" in head[0]
    older = copy.deepcopy(GOOD)
    del older["warm_preload"]["phases"]  # today's daemon
    _, lines = judge(CHECKS, older)
    assert "phases n/a" in [ln for ln in lines if ln.startswith("HEADLINE")][0]


def test_a_short_target_is_three():
    b = copy.deepcopy(GOOD)
    b["median"]["warm"] = 30.0  # 0.56x the link
    st, lines = judge(CHECKS, b)
    assert st == verdict.SHORT == 3
    assert targets(lines)["warm preload / pinned link"] == "0.556 (0.7) SHORT"
    assert "SHORT (exit 3)" in lines[-1]


def test_the_goal_itself_is_met_and_the_latency_limit_is_not():
    b = copy.deepcopy(GOOD)
    b["median"]["cold"], b["median"]["direct"] = 2.25, 2.5  # exactly 0.9x O_DIRECT
    b["median"]["safetensors_cold"] = 2.25
    b["opens"]["8"]["p99"] = 20.0  # the limit is "below 20 ms"
    st, lines = judge(CHECKS, b)
    t = targets(lines)
    assert t["cold preload / O_DIRECT at the same depth"].endswith(" MET")
    assert t["open p99, 8 workers at once"] == "20.00 ms (< 20 ms) SHORT"
    assert st == verdict.SHORT


def test_a_failed_check_is_one_whatever_the_targets():
    st, lines = judge(CHECKS + [("FAIL", "drain", "still draining")], GOOD)
    assert st == verdict.FAILED == 1
    assert "failed: drain" in lines[-1]
    b = copy.deepcopy(GOOD)
    b["median"]["warm"] = 1.0
    assert judge(CHECKS + [("FAIL", "drain", "x")], b)[0] == verdict.FAILED


def test_a_skip_is_never_a_pass():
    st, lines = judge(CHECKS + [("SKIP", "real model/legacy_cupy", "cupy is not installed")], GOOD)
    assert st == verdict.INCOMPLETE == 4
    assert "SKIP check real model/legacy_cupy: cupy is not installed" in lines
    assert "INCOMPLETE (exit 4)" in lines[-1]


def test_host_backend_skips_the_link_targets_by_name():
    b = copy.deepcopy(GOOD)
    b["device"] = "host"
    del b["median"]["h2d"]
    b["missing"]["h2d"] = "needs a GPU: the host backend has no link"
    st, lines = judge(CHECKS, b)
    assert st == verdict.INCOMPLETE
    t = targets(lines)
    link = [x.name for x in verdict.TARGETS if getattr(x, "den", None) == "h2d"]
    assert len(link) == 3
    for name in link:
        assert t[name] == "SKIP (needs a GPU: the host backend has no link)"
        assert f"SKIP target {name}" in lines
    others = [v for k, v in t.items() if k not in link]
    assert others and all(v.endswith(" MET") for v in others)


def test_short_outranks_skip():
    b = copy.deepcopy(GOOD)
    del b["median"]["safetensors"]
    b["missing"]["safetensors"] = "safetensors is not installed"
    b["median"]["tmpfs"] = 10.0
    st, lines = judge(CHECKS, b)
    assert st == verdict.SHORT
    assert targets(lines)["warm preload / safetensors"] == "SKIP (safetensors is not installed)"


def test_no_benchmark_skips_every_target():
    st, lines = judge(CHECKS, None, "the preload benchmark did not run (--no-bench)")
    assert st == verdict.INCOMPLETE
    assert not [ln for ln in lines if ln.startswith("HEADLINE")]
    t = targets(lines)
    assert len(t) == len(verdict.TARGETS)
    assert set(t.values()) == {"SKIP (the preload benchmark did not run (--no-bench))"}


def test_dry_run_judge_wants_the_tensor_parallel_check_whole():
    """make test's judge of run.sh --device host: exit 4 allows a SKIP, but
    not of the tensor-parallel check (torch is a test dependency), nor a
    check that never reached its end."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import run_all
    b = copy.deepcopy(GOOD)
    del b["median"]["h2d"]
    b["missing"]["h2d"] = "needs a GPU: the host backend has no link"
    tp = [("PASS", f"tensor-parallel/{c}", "ok") for c in ("preload", "workers", "outputs", "evict")]

    def dry_run(checks, end="tensor-parallel checks: 0 failed\n"):
        st, lines = judge(checks, b)
        return end + "\n".join(lines) + f"\nrun.sh exit {st}\n"

    assert run_all.judge_gpu_dry_run(dry_run(CHECKS + tp)) is None
    assert "did not run to its end" in run_all.judge_gpu_dry_run(dry_run(CHECKS + tp, end=""))
    skipped = tp[:2] + [("SKIP", "tensor-parallel/outputs", "torch not installed")] + tp[3:]
    why = run_all.judge_gpu_dry_run(dry_run(CHECKS + skipped))
    assert why == "the tensor-parallel check skipped: tensor-parallel/outputs: torch not installed"
    failed = tp[:2] + [("FAIL", "tensor-parallel/outputs", "differs by up to 5.6")] + tp[3:]
    assert "exited 1" in run_all.judge_gpu_dry_run(dry_run(CHECKS + failed, end=""))


def test_cli_reads_results_and_a_missing_benchmark_fails(tmp_path):
    res = tmp_path / "results"
    res.write_text("PASS preload: ready\nsome tool's own output\nFAIL drain: still draining\n"
                   "SKIP real model: no model\n")
    assert verdict.read_results(str(res)) == [("PASS", "preload", "ready"),
                                              ("FAIL", "drain", "still draining"),
                                              ("SKIP", "real model", "no model")]
    good = tmp_path / "bench.json"
    good.write_text(json.dumps(GOOD))
    res.write_text("PASS preload: ready\n")
    cli = [sys.executable, os.path.join(ROOT, "tests", "gpu", "verdict.py"), "--results", str(res)]
    assert subprocess.run(cli + ["--bench", str(good)], capture_output=True).returncode == 0
    p = subprocess.run(cli + ["--bench", str(tmp_path / "none.json")], capture_output=True, text=True)
    assert p.returncode == verdict.FAILED, p.stdout
    assert "failed: preload benchmark" in p.stdout


def test_run_sh_usage_and_missing_dependencies_are_two(tmp_path):
    p = subprocess.run([RUN_SH, "--no-such-option"], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown argument" in p.stderr
    p = subprocess.run([RUN_SH, "--device", "host", "--debs", str(tmp_path)],
                       capture_output=True, text=True, env=dict(os.environ, TENSORD_USE_DEBS="1"),
                       timeout=120)
    assert p.returncode == 2, p.stderr
    assert "cannot run (exit 2): missing build dependencies" in p.stderr


# ---- debs.py ------------------------------------------------------------------

APT_DEPENDS = """libfoo1
  Depends: libc6
 |Depends: libbar1
  Depends: libbar-alt1
  PreDepends: libpre0
  Recommends: librec1
  Depends: <libvirtual>
    libprovider2
    libprovider3
libbar1
  Depends: libc6
"""


def test_depends_takes_the_first_alternative_and_a_virtual_s_first_provider(monkeypatch):
    monkeypatch.setattr(debs, "run", lambda cmd: APT_DEPENDS)
    assert debs.depends(["libfoo1"]) == {"libfoo1": ["libc6", "libbar1", "libpre0", "libprovider2"],
                                         "libbar1": ["libc6"]}


def test_reach_stops_at_the_c_library():
    g = {"libcurl4": ["libc6", "libldap-2.5-0", "zlib1g"], "libldap-2.5-0": ["libc6", "libsasl2-2"],
         "libc6": ["libgcc-s1"], "libgcc-s1": ["gcc-12-base", "libc6"]}
    base = debs._reach(g, {"libc6"}, set())
    assert base == {"libc6", "libgcc-s1", "gcc-12-base"}
    assert debs._reach(g, {"libcurl4"}, base) == {"libcurl4", "libldap-2.5-0", "zlib1g", "libsasl2-2"}


def test_check_names_a_library_the_packages_lack(tmp_path):
    """/bin/true loads the C library only: fine when it is the base, named
    as loaded from the system when the manifest's base lacks it."""
    if not shutil.which("ldd") or not shutil.which("readelf"):
        pytest.skip("ldd or readelf missing")
    true = shutil.which("true")
    base = {"base_sonames": ["libc.so.6", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"]}
    ok, line = debs.check(str(tmp_path), base, [true])
    assert ok, line
    assert "0 libraries from the carried packages" in line and "libc.so.6" in line
    ok, line = debs.check(str(tmp_path), {"base_sonames": []}, [true])
    assert not ok
    assert "loads libc.so.6 from the system" in line


def test_closure_of_the_build_carries_libcurl_s_own_libraries(tmp_path):
    """From the archive (skipped where apt has no lists): libcurl4 and its
    libraries, and nothing of the C library."""
    if not shutil.which("apt-cache") or subprocess.run(
            ["apt-cache", "show", "--no-all-versions", "libcurl4-openssl-dev"],
            capture_output=True).returncode != 0:
        pytest.skip("no apt lists with libcurl4-openssl-dev (apt-get update)")
    carried, base = debs.closure(["libcurl4-openssl-dev", "libmicrohttpd-dev"])
    for pkg in ("libcurl4", "libmicrohttpd12", "libldap-2.5-0", "librtmp1", "libssh2-1",
                "libnghttp2-14", "libpsl5", "libbrotli1", "libgssapi-krb5-2", "libgnutls30",
                "libunistring2"):
        assert pkg in carried, (pkg, carried)
    assert "libc6" in base and "libc6" not in carried and "libgcc-s1" not in carried


# ---- bench/preload.py's figures are what the verdict reads ---------------------

def bench_rows(device):
    """Runs of the shape bench/preload.py's one_run makes."""
    io_ = {"page_cache_bytes": 1 << 30, "disk_bytes": 0, "disk_reads": "none", "threads": 2}
    pre = lambda g: {"gbps": g, "seconds": 1.0 / g, "io": io_, "phases": PHASES}  # noqa: E731
    rows = []
    for k in range(3):
        r = {"pagecache_1": 9.0, "pagecache_n": 12.0, "mmapcopy_1": 2.0, "mmapcopy_warm_1": 11.0,
             "direct": 3.0, "first": pre(30.0 + k), "first_configured": pre(31.0),
             "cold": pre(2.9), "warm": pre(40.0 + k), "tmpfs": pre(35.0),
             "safetensors_cold": (2.5, "safetensors.torch.load_file"),
             "safetensors": (4.6, "safetensors.torch.load_file"),
             "sweep": {"1": pre(20.0), "2": pre(38.0)}}
        if device != "host":
            r["h2d"], r["h2d_device"] = 54.0, "NVIDIA H200"
        rows.append(r)
    return rows


@pytest.mark.parametrize("device", ["cuda:0", "host"])
def test_bench_summary_feeds_every_target(device):
    """The keys bench/preload.py writes are those verdict.py reads: on a GPU
    every target is measured; on the host only the link targets skip."""
    import preload

    class A:
        double, shards, depth, chunk_mib, tmpfs = False, 4, 4, 64, "/dev/shm"
    A.device = device
    opens = {1: {"p50": 0.1, "p99": 0.2, "max": 0.3, "n": 200},
             8: {"p50": 0.4, "p99": 2.0, "max": 5.0, "n": 1600}}
    s = json.loads(json.dumps(preload.summary(bench_rows(device), opens, A, 8 << 30, 2, 100.0)))
    assert s["median"]["warm"] == 41.0 and s["sweep_best"] == "2"
    assert s["warm_preload"]["phases"] == PHASES
    skipped = [t.name for t, _, v, _ in verdict.evaluate(s, None) if v == "SKIP"]
    if device == "host":
        assert skipped == [t.name for t in verdict.TARGETS if getattr(t, "den", None) == "h2d"]
    else:
        assert skipped == []
    table = preload.table(s)
    assert "| **tensord, warm (page cache)** | **41.00** |" in table
    assert ("0.76x link" in table) == (device != "host")
    assert ("fresh-mmap copy" in table) == (device == "host")
    assert "0.7x link, 1.0x safetensors" in table
