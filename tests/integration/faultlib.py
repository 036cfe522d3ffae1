"""Helpers for the fault, security and limits tests: daemons with their own
models root and options, raw sockets, descriptor counts, slow readers, and a
loop-device filesystem whose reads can be made to fail.

Every helper here starts processes or devices only through context managers
that undo them, so a failing test leaves nothing running or mounted."""
import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

import tdutil
from tdutil import gen_models

SANITIZED = bool(os.environ.get("TENSORD_SANITIZED"))
# Sanitizer builds are several times slower: stretch the waits, not the checks.
SLACK = 3.0 if SANITIZED else 1.0


class Daemon(tdutil.Daemon):
    """tdutil.Daemon with what the fault tests read off the process."""

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def fds(self):
        """Open descriptors of the daemon."""
        return len(os.listdir(f"/proc/{self.pid}/fd"))

    def socket_fds(self):
        n = 0
        for fd in os.listdir(f"/proc/{self.pid}/fd"):
            try:
                if os.readlink(f"/proc/{self.pid}/fd/{fd}").startswith("socket:"):
                    n += 1
            except OSError:
                pass
        return n


@contextlib.contextmanager
def running_daemon(models, *args, prefix=(), workdir=None, check_exit=True, probe_headers=None):
    """Starts a daemon on `models` with extra command-line args; on exit checks
    it is still alive and stops cleanly with status 0 (sanitizer builds exit
    non-zero on a leak or an error report)."""
    own = workdir is None
    if own:
        workdir = tempfile.mkdtemp(prefix="tensord-fault-")
    d = Daemon(models, workdir, [str(a) for a in args], prefix, probe_headers)
    try:
        d.start()
    except RuntimeError:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
        raise
    try:
        yield d
        if check_exit:
            d.stop_checked()
    finally:
        if d.proc and d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()
        if own:
            shutil.rmtree(workdir, ignore_errors=True)


def run_daemon_expect_failure(models, *args, timeout=20):
    """Runs `tensord serve` expecting it to refuse to start. Returns
    (exit status, combined output)."""
    port = tdutil.free_port()
    cmd = [tdutil.tensord_bin(), "serve", "--models", models, "--listen", f"127.0.0.1:{port}",
           "--threads", "1"] + [str(a) for a in args]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    return p.returncode, (p.stdout + p.stderr).decode("utf-8", "replace")


def small_models(root):
    """A models root with one small valid model "m" (F32 [16, 16] "w" and a
    U8 vector "v"). Returns {tensor: bytes}."""
    w = bytes(range(256)) * 4
    v = bytes((i * 7) & 255 for i in range(100))
    gen_models.write_safetensors(os.path.join(root, "m", "model.safetensors"),
                                 [("w", "F32", (16, 16), w), ("v", "U8", (100,), v)],
                                 {"format": "pt"})
    return {"w": w, "v": v}


def big_model(root, rows=512, cols=65536, name="big"):
    """A model `name` with one U8 [rows, cols] tensor "w" of random bytes
    (written, not sparse, so any stale or foreign byte shows). Returns
    (file path, data bytes)."""
    data = os.urandom(rows * cols)
    path = os.path.join(root, name, "model.safetensors")
    gen_models.write_safetensors(path, [("w", "U8", (rows, cols), data)], {"format": "pt"})
    return path, data


# ---------------------------------------------------------------------------
# Raw HTTP


def connect(port, source=None, timeout=10):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    if source:
        s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def request_bytes(path, headers=None, method="GET"):
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class RawResponse:
    def __init__(self, status, headers, body, complete, elapsed):
        self.status = status
        self.headers = headers      # lower-case name -> value
        self.body = body
        self.complete = complete    # the whole Content-Length arrived
        self.elapsed = elapsed

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return (f"<{self.status} {self.headers} complete={self.complete} "
                f"{len(self.body)} bytes {self.body[:200]!r}>")


def read_head(sock):
    """Reads a response head. Returns (status, headers, bytes after the head),
    or (None, {}, b"") if the connection closed first."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        try:
            c = sock.recv(65536)
        except ConnectionResetError:
            c = b""
        if not c:
            return None, {}, b""
        buf += c
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers, rest


def read_body(sock, headers, rest, limit=None):
    """Reads the body announced by Content-Length, or at least its first
    `limit` bytes (and whatever already arrived with them: nothing received is
    dropped). Returns (bytes, complete)."""
    total = int(headers.get("content-length", "0"))
    want = total if limit is None else min(total, limit)
    chunks = [rest[:total]]
    got = len(chunks[0])
    while got < want:
        try:
            c = sock.recv(min(1 << 20, want - got))
        except (ConnectionResetError, socket.timeout):
            break
        if not c:
            break
        chunks.append(c)
        got += len(c)
    return b"".join(chunks), got >= want


def raw_get(port, path, headers=None, method="GET", timeout=10, source=None):
    t0 = time.monotonic()
    with connect(port, source, timeout) as s:
        s.sendall(request_bytes(path, headers, method))
        status, hdrs, rest = read_head(s)
        if status is None:
            return RawResponse(None, {}, b"", False, time.monotonic() - t0)
        # RFC 9112 6.3: HEAD answers, 1xx, 204 and 304 end at their head,
        # whatever Content-Length says (a 304 carries the 200's length).
        bodiless = method == "HEAD" or status in (204, 304) or 100 <= status < 200
        # Whatever came after such a head is kept as its "body": a test can
        # see the daemon send one where it must not.
        body, complete = (rest, True) if bodiless else read_body(s, hdrs, rest)
        return RawResponse(status, hdrs, body, complete, time.monotonic() - t0)


def wait_closed(sock, timeout):
    """Waits for the peer to close. Returns the seconds it took, or None if
    the connection was still open after timeout. Discards data."""
    t0 = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - t0 < timeout:
        try:
            c = sock.recv(65536)
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - t0
        if not c:
            return time.monotonic() - t0
    return None


def wait_for(pred, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(step)


class PausedDownload:
    """A GET whose client stops reading after `first` body bytes, so the
    daemon is left in the middle of the body (its socket buffer full) until
    finish() reads the rest."""

    def __init__(self, port, path, headers=None, first=1 << 20):
        self.sock = connect(port, timeout=10)
        # A small receive buffer keeps most of the body on the daemon's side.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        self.sock.sendall(request_bytes(path, headers))
        self.status, self.headers, rest = read_head(self.sock)
        assert self.status is not None, "connection closed before the response head"
        self.length = int(self.headers.get("content-length", "0"))
        self.start, _ = read_body(self.sock, self.headers, rest, limit=first)

    def finish(self, timeout=10):
        """Reads to the end. Returns (body, complete, seconds until the end or
        the close; None when it stalled for `timeout` seconds)."""
        self.sock.settimeout(timeout)
        chunks = [self.start]
        got = len(self.start)
        t0 = time.monotonic()
        stalled = False
        while got < self.length:
            try:
                c = self.sock.recv(1 << 20)
            except ConnectionResetError:
                break
            except socket.timeout:
                stalled = True
                break
            if not c:
                break
            chunks.append(c)
            got += len(c)
        self.sock.close()
        took = None if stalled else time.monotonic() - t0
        return b"".join(chunks), got == self.length, took


# ---------------------------------------------------------------------------
# A filesystem whose reads fail: ext2 on a loop device, then the device is
# shrunk under it so every block past the new end answers EIO.


class FailingDisk:
    """ext2 on a loop device over a sparse image. fail_beyond(n) shrinks the
    device to n bytes: reads of blocks past it then fail with EIO (the kernel
    refuses I/O beyond the end of a device), while the mount stays up."""

    def __init__(self, size=64 << 20):
        self.size = size
        self.base = tempfile.mkdtemp(prefix="tensord-disk-")
        self.image = os.path.join(self.base, "disk.img")
        self.mnt = os.path.join(self.base, "mnt")
        self.dev = None
        self.mounted = False

    @staticmethod
    def unavailable():
        """Why this cannot run here, or None."""
        if os.geteuid() != 0:
            return "needs root (losetup, mount)"
        for tool in ("losetup", "mkfs.ext2", "mount", "umount"):
            if not shutil.which(tool):
                return f"{tool} is not installed"
        if not os.path.exists("/dev/loop-control"):
            return "no /dev/loop-control: loop devices are not available"
        return None

    def _run(self, *cmd):
        p = subprocess.run(list(cmd), capture_output=True, text=True)
        if p.returncode != 0:
            raise OSError(f"{' '.join(cmd)}: {p.stderr.strip() or p.stdout.strip()}")
        return p.stdout.strip()

    def __enter__(self):
        with open(self.image, "wb") as f:
            f.truncate(self.size)
        try:
            self.dev = self._run("losetup", "-f", "--show", self.image)
            self._run("mkfs.ext2", "-q", "-F", "-b", "4096", self.dev)
            os.makedirs(self.mnt)
            self._run("mount", "-t", "ext2", self.dev, self.mnt)
            self.mounted = True
        except Exception:
            self.__exit__(None, None, None)
            raise
        os.chmod(self.mnt, 0o755)
        return self

    def drop_cache(self, path):
        """Writes back and evicts path's pages so the next read goes to the device."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    def first_block(self, path):
        """Byte offset on the device of the file's lowest data block (FIBMAP;
        ext2 spreads files over the group, so placement is not predictable)."""
        import fcntl
        import struct
        fibmap = 1
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            bs = os.fstatvfs(fd).f_bsize
            nblocks = (os.fstat(fd).st_size + bs - 1) // bs
            phys = [struct.unpack("i", fcntl.ioctl(fd, fibmap, struct.pack("i", i)))[0]
                    for i in range(nblocks)]
        finally:
            os.close(fd)
        return min(p for p in phys if p > 0) * bs

    def fail_beyond(self, nbytes):
        os.sync()
        os.truncate(self.image, nbytes)
        self._run("losetup", "-c", self.dev)

    def __exit__(self, *exc):
        if self.mounted:
            if subprocess.run(["umount", self.mnt], capture_output=True).returncode != 0:
                subprocess.run(["umount", "-l", self.mnt], capture_output=True)
            self.mounted = False
        if self.dev:
            subprocess.run(["losetup", "-d", self.dev], capture_output=True)
            self.dev = None
        shutil.rmtree(self.base, ignore_errors=True)
        return False
