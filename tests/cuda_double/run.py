#!/usr/bin/python3
"""`make test-cuda-double`: the tests of this directory under pytest, then
one "N passed, N failed" line (pytest's own summary says "N passed in Xs")."""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                        "-o", "cache_dir=/dev/null", HERE] + sys.argv[1:],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace")
    sys.stdout.write(p.stdout)
    counts = {"passed": 0, "failed": 0, "error": 0, "errors": 0, "skipped": 0}
    lines = [x for x in p.stdout.splitlines() if re.search(r"\d+ (passed|failed|error)", x)]
    for n, what in re.findall(r"(\d+) (passed|failed|errors?|skipped)", lines[-1] if lines else ""):
        counts[what] += int(n)
    failed = counts["failed"] + counts["error"] + counts["errors"]
    if p.returncode != 0 and failed == 0:
        failed = 1  # pytest failed without saying which test
    print(f"{counts['passed']} passed, {failed} failed, {counts['skipped']} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
