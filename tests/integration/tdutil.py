"""Helpers for the integration tests: starting the daemon, plain HTTP with the
standard library, an independent safetensors reader, NumPy slice references,
multipart/byteranges parsing."""
import http.client
import json
import os
import shlex
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.parse

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "gen"))

import gen_models  # noqa: E402

READY_TIMEOUT = 20.0

# The test models' manifest, computed in memory (deterministic), so tests can
# be parametrized at collection time; the session fixture writes the same.
MANIFEST = gen_models.test_manifest()


# Symlinks the session fixture makes (name inside the models root -> target).
# None of them may be listed or served.
EVIL_FILE_LINK = ("with-config", "evil")             # -> /etc/passwd
EVIL_REL_LINK = ("with-config", "rel-evil.json")     # -> ../../outside/secret/config.json
OUTSIDE_DIR_LINK = "outside-link"                    # -> <tmp>/outside/secret (a valid model)
OUTSIDE_FILE_LINK = "leak.safetensors"               # -> <tmp>/outside/secret/model.safetensors


def valid_models():
    return [m for m in MANIFEST.models if m not in MANIFEST.invalid]


def all_tensors():
    """[(model, tensor)] over every valid model."""
    return [(m, t) for m in MANIFEST for t in MANIFEST[m]]


# ---------------------------------------------------------------------------
# Daemon


def tensord_bin():
    b = os.environ.get("TENSORD_BIN") or os.path.join(REPO, "build", "tensord")
    return b if os.path.isabs(b) else os.path.join(REPO, b)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """A running `tensord serve` on a loopback port. `prefix` goes before the
    binary (e.g. setpriv to drop privileges); `probe_headers` go with the
    readiness probe (a bearer token when auth is on)."""

    def __init__(self, models, workdir, extra_args=(), prefix=(), probe_headers=None):
        self.models = models
        self.workdir = workdir
        self.extra_args = list(extra_args)
        self.prefix = list(prefix)
        self.probe_headers = probe_headers or {}
        self.proc = None
        self.port = None
        self.log_path = os.path.join(workdir, "tensord.log")
        self.state_dir = os.path.join(workdir, "state")

    @property
    def pid(self):
        return self.proc.pid

    def log_tail(self, n=4000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def start(self, port=None):
        """Starts it on a free port, or on port (a restart where clients
        know the old one)."""
        binary = tensord_bin()
        if not os.path.exists(binary):
            raise RuntimeError(f"daemon binary {binary} does not exist (run make, or set TENSORD_BIN)")
        last = ""
        for _attempt in range(3):
            self.port = port or free_port()
            cmd = self.prefix + [binary, "serve", "--models", self.models,
                   "--listen", f"127.0.0.1:{self.port}", "--threads", "2",
                   "--ipc-socket", os.path.join(self.workdir, "tensord.sock")]
            if not any(a.startswith(("--state-dir", "--state_dir")) for a in self.extra_args):
                # Content hashes persist here, never in the machine's /var/lib/tensord.
                cmd += ["--state-dir", self.state_dir]
            cmd += self.extra_args + shlex.split(os.environ.get("TENSORD_ARGS", ""))
            log = open(self.log_path, "ab")
            log.write(("\n$ " + " ".join(shlex.quote(c) for c in cmd) + "\n").encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=self.workdir)
            log.close()
            deadline = time.monotonic() + READY_TIMEOUT
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    r = request(self.port, "GET", "/readyz", self.probe_headers, timeout=2)
                    if r.status == 200:
                        return self
                except OSError:
                    pass
                time.sleep(0.05)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"tensord not ready within {READY_TIMEOUT}s:\n{self.log_tail()}")
            last = self.log_tail()
            if "in use" not in last.lower():
                break
        raise RuntimeError(f"tensord exited with {self.proc.returncode} before ready:\n{last}")

    def wait_hashed(self, timeout=30):
        """Waits until every served file's content hash is known, so ETags
        are strong (a weak one never satisfies If-Range or If-Match). Files
        changed in the last 2 s wait that long first (hasher.h)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = request(self.port, "GET", "/v1/models", self.probe_headers, timeout=5)
            if r.status == 200:
                h = json.loads(r.body)["hashing"]
                if h["files_pending"] == 0 and h["files_known"] == h["files"]:
                    return self
            time.sleep(0.1)
        raise RuntimeError(f"content hashes still unknown after {timeout}s")

    def stop(self, timeout=15):
        """SIGTERM; returns the exit status (kills after timeout and returns None)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop_checked(self):
        """SIGTERM at the end of a test or fixture: fails unless the daemon was
        still alive and exits 0 (sanitizer builds exit non-zero on a leak or an
        error report). The log is read before anything is asserted, so a caller
        may remove the work directory in a `finally`."""
        alive = self.alive()
        status = self.proc.returncode if self.proc else None
        rc = self.stop()
        log = self.log_tail()
        assert alive, f"daemon died (status {status}):\n{log}"
        assert rc == 0, f"daemon exited with {rc} on SIGTERM:\n{log}"

    def rss_kib(self):
        """VmRSS of the daemon in KiB."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    # HTTP shortcuts
    def request(self, method, path, headers=None, body=None, timeout=30):
        return request(self.port, method, path, headers, body, timeout)

    def get(self, path, headers=None):
        return self.request("GET", path, headers)

    def head(self, path, headers=None):
        return self.request("HEAD", path, headers)

    def json(self, path):
        r = self.get(path)
        assert r.status == 200, f"GET {path}: {r.status} {r.body[:500]!r}"
        assert r.ctype == "application/json", f"GET {path}: Content-Type {r.ctype!r}"
        return json.loads(r.body)

    def rescan(self, timeout=30.0):
        """SIGHUP, then waits until the snapshot of the rescan it asks for
        is served (a later generation in /v1/models: the hasher has been
        given it too); returns that generation. A test that checks what a
        reload did waits here instead of sleeping."""
        before = self.json("/v1/models")["generation"]
        os.kill(self.pid, signal.SIGHUP)
        deadline = time.monotonic() + timeout
        while (gen := self.json("/v1/models")["generation"]) <= before:
            assert time.monotonic() < deadline, f"no rescan served within {timeout} s"
            time.sleep(0.02)
        return gen


# ---------------------------------------------------------------------------
# HTTP


class Response:
    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers      # http.client.HTTPMessage (case-insensitive)
        self.body = body

    def header(self, name, default=None):
        return self.headers.get(name, default)

    @property
    def ctype(self):
        """Content-Type without parameters, lower case."""
        v = self.headers.get("Content-Type", "")
        return v.split(";")[0].strip().lower()

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<{self.status} {self.reason} {dict(self.headers)} {self.body[:300]!r}>"


def request(port, method, path, headers=None, body=None, timeout=30):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        own_host = any(k.lower() == "host" for k in (headers or {}))
        conn.putrequest(method, path, skip_host=own_host, skip_accept_encoding=True)
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        r = conn.getresponse()
        data = r.read()
        return Response(r.status, r.reason, r.headers, data)
    finally:
        conn.close()


def q(name):
    """Percent-encodes one name as a single path segment (including '/')."""
    return urllib.parse.quote(name, safe="")


def tensor_url(model, tensor, query=None, encode_model=True):
    m = q(model) if encode_model else model
    url = f"/v1/models/{m}/tensors/{q(tensor)}"
    if query:
        url += "?" + query
    return url


def slice_query(spec, fmt=None):
    s = "slice=" + urllib.parse.quote(spec, safe=":,-")
    if fmt:
        s += "&format=" + fmt
    return s


def prom_counter(d, prefix):
    """The value of the first Prometheus line of /metrics that starts with prefix (0 if none)."""
    for line in d.get("/metrics").body.decode().splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    return 0.0


def wait_for(cond, timeout, what):
    """cond()'s first true value within timeout seconds; fails saying what
    did not happen."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.02)


def counted_since(d, prefix, before, want, timeout=5.0):
    """How much the counter grew since before, once it has grown by want or
    timeout passed: an answer's bytes are counted when libmicrohttpd completes
    it, which may be after the client has read the body and asked again."""
    deadline = time.monotonic() + timeout
    while True:
        grown = prom_counter(d, prefix) - before
        if grown >= want or time.monotonic() > deadline:
            return grown
        time.sleep(0.01)


def assert_error(r, status, code=None, what=""):
    """An error answer: the status, JSON {"error": {"code", "message"}}."""
    ctx = f"{what}: {r!r}"
    assert r.status == status, f"expected {status}, got {ctx}"
    assert r.ctype == "application/json", f"error Content-Type {r.ctype!r}: {ctx}"
    try:
        j = json.loads(r.body)
    except ValueError:
        raise AssertionError(f"error body is not JSON: {ctx}")
    assert isinstance(j, dict) and isinstance(j.get("error"), dict), f"no error object: {ctx}"
    err = j["error"]
    assert isinstance(err.get("code"), str) and err["code"], f"no error code: {ctx}"
    assert isinstance(err.get("message"), str) and err["message"], f"no error message: {ctx}"
    if code is not None:
        assert err["code"] == code, f"expected code {code!r}, got {err['code']!r}: {ctx}"
    return err


def parse_shape_header(v):
    v = (v or "").strip()
    if v == "":
        return ()
    return tuple(int(x) for x in v.split(","))


def parse_multipart_byteranges(ctype_header, body):
    """Parses a multipart/byteranges body. Returns [(first, last, size, part type, bytes)]."""
    ctype, _, params = ctype_header.partition(";")
    assert ctype.strip().lower() == "multipart/byteranges", ctype_header
    boundary = None
    for p in params.split(";"):
        k, _, v = p.strip().partition("=")
        if k.strip().lower() == "boundary":
            boundary = v.strip().strip('"')
    assert boundary, f"no boundary in {ctype_header!r}"
    delim = b"--" + boundary.encode()
    parts = []
    pos = body.find(delim)
    assert pos >= 0, "no first boundary"
    assert body[:pos].strip(b"\r\n") == b"", f"junk before the first boundary: {body[:pos]!r}"
    while True:
        pos += len(delim)
        if body[pos:pos + 2] == b"--":
            assert body[pos + 2:].strip(b"\r\n") == b"", "junk after the closing boundary"
            return parts
        assert body[pos:pos + 2] == b"\r\n", f"no CRLF after boundary at {pos}"
        pos += 2
        hend = body.find(b"\r\n\r\n", pos)
        assert hend >= 0, "part headers do not end"
        hdrs = {}
        for line in body[pos:hend].split(b"\r\n"):
            k, _, v = line.decode("latin-1").partition(":")
            hdrs[k.strip().lower()] = v.strip()
        pos = hend + 4
        cr = hdrs.get("content-range", "")
        assert cr.startswith("bytes "), f"part Content-Range {cr!r}"
        span, _, size = cr[6:].partition("/")
        first, _, last = span.partition("-")
        first, last = int(first), int(last)
        data = body[pos:pos + last - first + 1]
        assert len(data) == last - first + 1, "part shorter than its Content-Range"
        pos += len(data)
        assert body[pos:pos + 2 + len(delim)] == b"\r\n" + delim, \
            f"part not followed by CRLF and boundary at {pos}"
        pos += 2
        parts.append((first, last, int(size), hdrs.get("content-type"), data))


# ---------------------------------------------------------------------------
# safetensors reading (independent of the writer's bookkeeping)


def read_safetensors_bytes(blob):
    """Returns (header dict, header length N, {name: (dtype, shape, bytes)})."""
    (n,) = struct.unpack("<Q", blob[:8])
    assert 0 < n <= len(blob) - 8, f"header length {n} for {len(blob)} bytes"
    hdr = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    out = {}
    for name, e in hdr.items():
        if name == "__metadata__":
            continue
        b, e_ = e["data_offsets"]
        out[name] = (e["dtype"], tuple(e["shape"]), data[b:e_])
    return hdr, n, out


def read_tensor_from_file(path, dtype, shape, begin, end):
    """What NumPy reads from the file itself at the tensor's offsets."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
    count = end - begin
    raw = np.fromfile(path, dtype=np.uint8, count=count, offset=8 + n + begin)
    assert raw.size == count
    std = gen_models.standin_dtype(dtype)
    if std is not None and count:
        arr = raw.view(std).reshape(shape)
        return np.ascontiguousarray(arr).tobytes()
    return raw.tobytes()


# ---------------------------------------------------------------------------
# Slices


def render_index(idx):
    """A tuple of ints/slices -> the SPEC string."""
    out = []
    for x in idx:
        if isinstance(x, slice):
            s = ("" if x.start is None else str(x.start)) + ":" + \
                ("" if x.stop is None else str(x.stop))
            if x.step is not None:
                s += ":" + str(x.step)
            out.append(s)
        else:
            out.append(str(x))
    return ",".join(out)


def random_index(rng, shape):
    """A random valid basic index for shape (1..ndim specs)."""
    k = int(rng.integers(1, len(shape) + 1))
    idx = []
    for d in range(k):
        n = shape[d]
        r = rng.random()

        def pos():
            return int(rng.integers(-n - 3, n + 4))  # clamps on both sides sometimes
        if r < 0.18 and n > 0:
            idx.append(int(rng.integers(-n, n)))
        elif r < 0.28:
            idx.append(slice(None))
        elif r < 0.50:
            idx.append(slice(pos(), pos()))
        elif r < 0.60:
            idx.append(slice(pos(), pos(), int(rng.integers(1, 4))))
        elif r < 0.68:
            idx.append(slice(pos(), pos(), -int(rng.integers(1, 4))))
        elif r < 0.78:
            idx.append(slice(pos(), None))
        elif r < 0.88:
            idx.append(slice(None, pos()))
        else:
            idx.append(slice(None, None, int(rng.integers(1, 5))))
    return tuple(idx)


def numpy_slice(dtype, shape, data, idx):
    """(bytes, shape) of the packed NumPy result, for dtypes of 8+ bits."""
    std = gen_models.standin_dtype(dtype)
    arr = np.frombuffer(data, dtype=std).reshape(shape)
    res = arr[idx]
    return np.ascontiguousarray(res).tobytes(), tuple(res.shape)


def subbyte_slice(dtype, shape, data, idx):
    """(bytes or None when a cut is off a byte boundary, shape) for F4/F6 slices.

    Elements are taken as consecutive bit groups; with byte-aligned cuts the
    resulting bytes do not depend on the order of elements inside a byte."""
    bits = gen_models.dtype_bits(dtype)
    n = gen_models.nelems(shape)
    flat = np.arange(n, dtype=np.int64).reshape(shape)[idx]
    out_shape = tuple(flat.shape)
    sel = flat.ravel()
    if sel.size == 0:
        return b"", out_shape
    breaks = np.nonzero(np.diff(sel) != 1)[0] + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [sel.size]))
    for s, e in zip(starts, ends):
        if (int(sel[s]) * bits) % 8 or ((e - s) * bits) % 8:
            return None, out_shape
    allbits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")
    per = allbits[: n * bits].reshape(n, bits)
    return np.packbits(per[sel].ravel(), bitorder="little").tobytes(), out_shape


def expected_slice(dtype, shape, data, idx):
    if dtype in gen_models.SUB_BYTE:
        return subbyte_slice(dtype, shape, data, idx)
    return numpy_slice(dtype, shape, data, idx)
