#!/usr/bin/python3
"""Runs C unit-test binaries and prints one combined "N passed, N failed" line.

Each binary prints its own "N passed, N failed" summary last; a binary that
crashes or prints no summary counts as one failure."""
import re
import subprocess
import sys

SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed", re.M)


def run(binaries):
    passed = failed = 0
    for b in binaries:
        p = subprocess.run([b], capture_output=True, text=True, errors="replace")
        m = list(SUMMARY.finditer(p.stdout))
        if p.returncode not in (0, 1) or not m:
            print(f"  {b}: crashed or no summary (exit {p.returncode})")
            sys.stdout.write(p.stdout[-4000:])
            sys.stdout.write(p.stderr[-4000:])
            failed += 1
            continue
        bp, bf = int(m[-1].group(1)), int(m[-1].group(2))
        status = "ok" if bf == 0 and p.returncode == 0 else "FAILED"
        print(f"  {b}: {bp} passed, {bf} failed  {status}")
        if bf or p.returncode:
            sys.stdout.write(p.stderr[-4000:])
            bf = max(bf, 1)
        passed += bp
        failed += bf
    return passed, failed


if __name__ == "__main__":
    p, f = run(sys.argv[1:])
    print(f"{p} passed, {f} failed")
    sys.exit(1 if f else 0)
