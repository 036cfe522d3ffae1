#!/usr/bin/python3
"""tests/gpu/run.sh's HTTP client (the standard library only: a GPU
machine or a minimal root need not have curl, whose libraries are the
ones the check is about).

    api.py PORT METHOD PATH [BODY]       the answer's body on stdout, whatever
                                         its status; exit 1 when none came
    api.py PORT ready TIMEOUT            exit 0 once /readyz answers 200
    api.py PORT until PATH TIMEOUT STATE...
                                         GET PATH until its "state" is not
                                         one of STATE (e.g. loading); prints
                                         the last answer; exit 1 on timeout

Proxies in the environment are ignored: the daemon is on the loopback.
"""
import json
import sys
import time
import urllib.error
import urllib.request

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def call(port, method, path, body=None, timeout=30):
    """(status, body) of one request; raises OSError when nothing answers."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 data=body.encode() if body is not None else None)
    try:
        with OPENER.open(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def main():
    port, what = sys.argv[1], sys.argv[2]
    if what == "ready":
        deadline = time.monotonic() + float(sys.argv[3])
        while time.monotonic() < deadline:
            try:
                if call(port, "GET", "/readyz", timeout=2)[0] == 200:
                    return 0
            except OSError:
                pass
            time.sleep(0.1)
        return 1
    if what == "until":
        path, timeout, states = sys.argv[3], float(sys.argv[4]), sys.argv[5:]
        deadline = time.monotonic() + timeout
        while True:
            status, body = call(port, "GET", path)
            try:
                state = json.loads(body).get("state")
            except ValueError:
                state = None
            if state not in states or time.monotonic() > deadline:
                print(body)
                return 0 if state not in states else 1
            time.sleep(0.05)
    try:
        _, body = call(port, what, sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
    except OSError as e:
        print(f"{what} {sys.argv[3]}: {e}", file=sys.stderr)
        return 1
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
