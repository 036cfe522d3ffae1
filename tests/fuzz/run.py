#!/usr/bin/python3
"""Runs libFuzzer targets: replays tests/fuzz/regression/<target>/ (past crash
inputs, which must all pass), then fuzzes each target for --seconds on a
scratch copy of tests/fuzz/corpus/<target>/ (the committed corpus stays small).

Prints "N passed, N failed" (one per target)."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("binaries", nargs="+")
    args = ap.parse_args()
    passed = failed = 0
    for b in args.binaries:
        name = os.path.basename(b)[len("fuzz_"):]
        corpus = os.path.join(HERE, "corpus", name)
        regress = os.path.join(HERE, "regression", name)
        ok = True
        with tempfile.TemporaryDirectory() as work:
            if os.path.isdir(regress) and os.listdir(regress):
                files = [os.path.join(regress, f) for f in sorted(os.listdir(regress))]
                p = subprocess.run([b, "-runs=1"] + files, capture_output=True, text=True,
                                   errors="replace")
                if p.returncode != 0:
                    ok = False
                    print(f"  {name}: regression input failed")
                    print(p.stderr[-3000:])
            scratch = os.path.join(work, "corpus")
            if os.path.isdir(corpus):
                shutil.copytree(corpus, scratch)
            else:
                os.makedirs(scratch)
            if ok:
                p = subprocess.run(
                    [b, f"-max_total_time={args.seconds}", "-max_len=65536", "-timeout=10",
                     "-rss_limit_mb=2048", f"-artifact_prefix={work}/", "-print_final_stats=1",
                     scratch],
                    capture_output=True, text=True, errors="replace")
                stats = {}
                for line in p.stderr.splitlines():
                    if line.startswith("stat::"):
                        k, _, v = line[6:].partition(":")
                        stats[k.strip()] = v.strip()
                if p.returncode != 0:
                    ok = False
                    print(f"  {name}: FINDING (exit {p.returncode})")
                    print(p.stderr[-5000:])
                    for f in os.listdir(work):
                        if f.startswith(("crash-", "leak-", "timeout-", "oom-")):
                            dest = os.path.join(regress, f)
                            os.makedirs(regress, exist_ok=True)
                            shutil.copy(os.path.join(work, f), dest)
                            print(f"  saved {dest}: commit it once fixed")
                else:
                    print(f"  {name}: {stats.get('number_of_executed_units', '?')} runs in "
                          f"{args.seconds}s, ok")
        if ok:
            passed += 1
        else:
            failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
