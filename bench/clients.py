"""Load generators and clients: wrk for request rates and throughput, a minimal
keep-alive HTTP/1.1 client for the slice and metadata tests (a real client would be
no faster: it reads bodies straight into one preallocated buffer with recv_into)."""
import json
import os
import re
import socket
import subprocess
import time

import numpy as np

WRK = "/usr/bin/wrk"
HERE = os.path.dirname(os.path.abspath(__file__))
WRK_SCRIPT = os.path.join(HERE, "wrk_report.lua")


def run_wrk(port, path, conns, seconds, range_header=None, timeout_s=10):
    """One wrk run; returns the dict printed by wrk_report.lua plus req/s.
    Threads: 2 where there are 2+ connections (wrk needs threads <= connections)."""
    threads = min(2, conns)
    env = dict(os.environ, BENCH_RANGE=range_header or "")
    argv = [WRK, f"-t{threads}", f"-c{conns}", f"-d{seconds}s", f"--timeout={timeout_s}s",
            "-s", WRK_SCRIPT, f"http://127.0.0.1:{port}{path}"]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=seconds + 60)
    m = re.search(r"^BENCH_JSON (.*)$", p.stdout, re.M)
    if p.returncode != 0 or not m:
        raise RuntimeError(f"wrk failed ({p.returncode}): {p.stdout[-500:]} {p.stderr[-500:]}")
    r = json.loads(m.group(1))
    r["rps"] = r["requests"] / (r["duration_us"] / 1e6)
    r["argv"] = " ".join(argv)
    return r


class Conn:
    """One keep-alive HTTP/1.1 connection. get() reads the body into `into` (a
    writable buffer) when given, else returns it as bytes; it counts every byte
    received, headers included, in self.rx."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rx = 0
        self.requests = 0
        self.pending = b""

    def close(self):
        self.s.close()

    def get(self, path, range_header=None, into=None):
        req = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        if range_header:
            req += f"Range: {range_header}\r\n"
        self.s.sendall((req + "\r\n").encode())
        self.requests += 1
        head = self.pending
        while b"\r\n\r\n" not in head:
            chunk = self.s.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed before the response header")
            head += chunk
        head, _, rest = head.partition(b"\r\n\r\n")
        self.rx += len(head) + 4
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        hdrs = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            hdrs[k.strip().lower()] = v.strip()
        n = int(hdrs.get("content-length", "0"))
        if status >= 300:
            raise RuntimeError(f"GET {path} ({range_header}): {status} {rest[:200]!r}")
        if into is None:
            body = bytearray(n)
            mv = memoryview(body)
        else:
            if len(into) < n:
                raise ValueError(f"GET {path}: body of {n} bytes does not fit {len(into)}")
            body = into
            mv = memoryview(into)[:n]
        k = min(n, len(rest))
        mv[:k] = rest[:k]
        self.pending = rest[k:]
        while k < n:
            got = self.s.recv_into(mv[k:])
            if got == 0:
                raise ConnectionError("connection closed inside a body")
            k += got
        self.rx += n
        return status, hdrs, (body if into is None else n)


def slice_fetch_tensord(conn, model, tensor, spec, buf, shape, dtype=np.float32):
    """tensord slices server-side: one request, the packed slice is the result."""
    _, hdrs, n = conn.get(f"/v1/models/{model}/tensors/{tensor}?slice={spec}", into=buf)
    out_shape = tuple(int(x) for x in hdrs["x-tensor-shape"].split(","))
    return np.frombuffer(buf, dtype=dtype, count=n // np.dtype(dtype).itemsize).reshape(out_shape)


def slice_fetch_static(conn, path, data_begin, shape, rows, cols, buf, dtype=np.float32):
    """The best a client of a static server can do for a 2-D slice with step 1: fetch
    the one byte range that covers rows[0]..rows[1]-1, cols[0]..cols[1]-1 and cut the
    block out with NumPy (a packed copy, as tensord returns). Many small ranges would
    move fewer bytes but cost one request each (16,384 for a column block), and a
    multi-range request of that many ranges overflows any server's header limit."""
    item = np.dtype(dtype).itemsize
    ncols = shape[1]
    first = (rows[0] * ncols + cols[0]) * item
    last = ((rows[1] - 1) * ncols + cols[1]) * item  # one past the last byte needed
    rng = f"bytes={data_begin + first}-{data_begin + last - 1}"
    conn.get(path, range_header=rng, into=buf)
    nrows = rows[1] - rows[0]
    # View the fetched bytes as if the block started at column 0 of a full-width row:
    # the covering range starts at column cols[0] of row rows[0].
    flat = np.frombuffer(buf, dtype=dtype, count=(last - first) // item)
    view = np.lib.stride_tricks.as_strided(flat, shape=(nrows, cols[1] - cols[0]),
                                           strides=(ncols * item, item))
    return np.ascontiguousarray(view)


def metadata_tensord(conn, model):
    """One request: the merged header of every shard."""
    _, _, body = conn.get(f"/v1/models/{model}/header")
    return json.loads(bytes(body))


def metadata_static(conn, prefix, index_name):
    """What a client of a static server does: read the index, then for every shard
    its first 8 bytes (the header length) and the header, and merge them."""
    _, _, body = conn.get(f"{prefix}/{index_name}")
    shards = sorted(set(json.loads(bytes(body))["weight_map"].values()))
    merged = {}
    for fn in shards:
        _, _, b8 = conn.get(f"{prefix}/{fn}", range_header="bytes=0-7")
        hlen = int.from_bytes(b8, "little")
        _, _, hb = conn.get(f"{prefix}/{fn}", range_header=f"bytes=8-{7 + hlen}")
        hdr = json.loads(bytes(hb))
        hdr.pop("__metadata__", None)
        for name, entry in hdr.items():
            entry["file"] = fn
            merged[name] = entry
    return merged


def timed(fn, *args, **kw):
    t0 = time.perf_counter()
    out = fn(*args, **kw)
    return time.perf_counter() - t0, out
