"""Faults: model files changed under an in-flight download, clients that go
away or crawl, connection floods, hostile models roots, and a disk that
answers EIO. Each test runs its own daemon on its own models root."""
import os
import signal
import socket
import stat
import struct
import tempfile
import threading
import time

import pytest

import faultlib
from faultlib import (PausedDownload, connect, raw_get, read_head, request_bytes, running_daemon,
                      wait_closed, wait_for)
from tdutil import gen_models, parse_multipart_byteranges

ROWS, COLS = 512, 65536          # the big tensor: 32 MiB of random bytes
WHOLE = "/v1/models/big/tensors/w"                   # contiguous: sendfile
STRIDED = "/v1/models/big/tensors/w?slice=:,0:65535"   # 512 runs: streamed with pread


def strided_expected(data):
    return b"".join(data[r * COLS:r * COLS + COLS - 1] for r in range(ROWS))


@pytest.fixture
def root():
    base = tempfile.mkdtemp(prefix="tensord-faults-")
    models = os.path.join(base, "models")
    os.makedirs(models)
    yield models
    import shutil
    shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------------
# The file changes while a large download of it is in flight


def _truncate(path, data):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
    os.truncate(path, 8 + n + 8 * (1 << 20))
    return None                     # the model becomes invalid


def _rewrite_in_place(path, data):
    """What `cp new old` or open(path, "wb") does: same inode, O_TRUNC, new bytes."""
    new = os.urandom(len(data))
    blob, _, _ = gen_models.encode_safetensors([("w", "U8", (ROWS, COLS), new)],
                                               {"format": "pt"})
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    return new


def _replace(path, data):
    """The safe way to update a model: write a new file, rename it over the old."""
    new = os.urandom(len(data))
    tmp = os.path.join(os.path.dirname(path), ".model.safetensors.tmp")
    gen_models.write_safetensors(tmp, [("w", "U8", (ROWS, COLS), new)], {"format": "pt"})
    os.replace(tmp, path)
    return new


def _delete(path, data):
    os.unlink(path)
    return None


CHANGES = {"truncate": _truncate, "rewrite_in_place": _rewrite_in_place,
           "replace": _replace, "delete": _delete}


def _change_during_download(root, change, url, *args):
    path, data = faultlib.big_model(root, ROWS, COLS)
    expected = data if url == WHOLE else strided_expected(data)
    with running_daemon(root, *args) as d:
        dl = PausedDownload(d.port, url)
        assert dl.status == 200, dl.headers
        assert dl.length == len(expected)
        assert dl.start == expected[:len(dl.start)], "first bytes differ before any change"
        new = CHANGES[change](path, data)
        body, complete, took = dl.finish(timeout=10)

        what = f"{change} during {url}: got {len(body)} of {len(expected)} bytes"
        assert took is not None, f"{what}: the download stalled (no byte, no close for 10 s)"
        if complete:
            assert body == expected, f"{what}: a complete body that is not the old bytes"
        else:
            n = len(body)
            assert body == expected[:n], \
                f"{what}: the bytes before the error are not the old bytes " \
                f"(first difference at {next(i for i in range(n) if body[i] != expected[i])})"
        if change in ("replace", "delete"):
            assert complete, f"{what}: the old inode is still open, its bytes must all arrive"

        # The daemon lives, and after its reload serves the new state: never
        # the old length over the changed file.
        assert d.get("/healthz").status == 200
        want = 404 if change == "delete" else 409 if new is None else 200
        last = []

        def settled():
            r = raw_get(d.port, WHOLE, timeout=5 * faultlib.SLACK)
            last[:] = [r]
            if want == 200:
                return r.status == 200 and r.complete and r.body == new
            return r.status == want
        assert wait_for(settled, 10, 0.5), \
            f"{change}: 10 s later GET {WHOLE} still answers {last[0]!r} (want {want})"


@pytest.mark.parametrize("url", [WHOLE, STRIDED], ids=["whole", "strided"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_file_changes_during_download(root, change, url):
    """With sendfile off every block is read with pread and checked against the
    snapshot's size and mtime: an in-place change aborts the download."""
    _change_during_download(root, change, url, "--connection-timeout", 30, "--sendfile", "false")


@pytest.mark.parametrize("change", ["truncate", "replace", "delete"])
def test_file_changes_during_sendfile(root, change):
    """With sendfile on (the default), a truncation mid-transfer leaves
    libmicrohttpd waiting for a write edge that never comes; the idle timeout
    then closes the connection, so the client gets an error after
    connection_timeout, never bytes of another version. (An in-place rewrite
    cannot be detected under sendfile: docs/SECURITY.md.)"""
    _change_during_download(root, change, WHOLE, "--connection-timeout", 3)


def _wide_model(root, n=6000):
    """A model whose header (about 600 KB) is kept in the snapshot's memory."""
    path = os.path.join(root, "wide", "model.safetensors")
    tensors = [(f"model.layers.{i}.self_attn.q_proj.weight.with.a.long.name", "U8", (4,),
                bytes([i % 256] * 4)) for i in range(n)]
    gen_models.write_safetensors(path, tensors, {"format": "pt"})
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
    return path, hlen


@pytest.mark.parametrize("what", ["file_header", "file_range", "multirange", "model_header",
                                  "model"])
def test_snapshot_memory_outlives_reload(root, what):
    """Headers and model documents are sent straight from the snapshot's
    memory. A download paused mid-body while a reload drops that snapshot
    (the file is deleted) must still end with the old bytes, whole: the
    response keeps the snapshot alive (under ASan a use-after-free shows)."""
    # File headers are kept up to 1 MiB; model documents are made larger than
    # what the socket buffers hold (4 MiB send + 64 KiB receive), so the
    # response is still reading the snapshot's memory when it is dropped.
    path, hlen = _wide_model(root, 6000 if what.startswith("file") or what == "multirange"
                             else 60000)
    urls = {"file_header": ("/v1/models/wide/files/model.safetensors/header", None),
            "file_range": ("/v1/models/wide/files/model.safetensors",
                           {"Range": f"bytes=0-{8 + hlen - 1}"}),
            "multirange": ("/v1/models/wide/files/model.safetensors/header",
                           {"Range": f"bytes=0-99999,200000-{hlen - 1}"}),
            "model_header": ("/v1/models/wide/header", None),
            "model": ("/v1/models/wide", None)}
    url, headers = urls[what]
    with running_daemon(root) as d:
        r = raw_get(d.port, url, headers)
        expected, expected_type = r.body, r.headers["content-type"]
        assert len(expected) > (200000 if hlen < (1 << 20) else 5 << 20)
        dl = PausedDownload(d.port, url, headers, first=16 * 1024)
        assert dl.status in (200, 206), dl.headers
        os.unlink(path)
        assert wait_for(lambda: d.get("/v1/models/wide").status == 404, 10, 0.1), \
            "the reload did not drop the model"
        body, complete, took = dl.finish(timeout=10)
        assert complete, f"{what}: got {len(body)} of {dl.length} bytes after the reload"
        if what == "multirange":
            # Each answer has its own boundary: compare the parts.
            got = parse_multipart_byteranges(dl.headers["content-type"], body)
            want = parse_multipart_byteranges(expected_type, expected)
            body, expected = [p[4] for p in got], [p[4] for p in want]
        assert body == expected, f"{what}: other bytes than before the reload"

        # Once the answer is sent its reference goes, the old snapshot is
        # freed and the deleted file's descriptor closed.
        def deleted_fds():
            fds = os.path.join("/proc", str(d.pid), "fd")
            out = []
            for fd in os.listdir(fds):
                try:
                    out.append(os.readlink(os.path.join(fds, fd)))
                except FileNotFoundError:
                    pass
            return [t for t in out if t.endswith("(deleted)")]
        assert wait_for(lambda: not deleted_fds(), 5, 0.1), \
            f"{what}: the dropped snapshot still holds {deleted_fds()}"


def test_sigterm_drains_in_flight_and_refuses_new(root):
    """SIGTERM: a download in flight finishes whole (with Connection: close
    semantics for anything after it), a new connection gets no answer, and the
    daemon exits 0 once the download is done."""
    path, data = faultlib.big_model(root, ROWS, COLS)
    with running_daemon(root, check_exit=False) as d:
        idle = connect(d.port)          # a keep-alive client that has not asked yet
        dl = PausedDownload(d.port, WHOLE)
        assert dl.status == 200
        os.kill(d.pid, signal.SIGTERM)
        # Answered until the drain begins (after the hasher has stopped),
        # then closed unanswered.
        assert wait_for(lambda: raw_get(d.port, "/healthz", timeout=5).status is None,
                        10 * faultlib.SLACK, 0.02), "connections made while draining were answered"
        idle.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        status, headers, _ = read_head(idle)
        assert status == 200 and headers.get("connection", "").lower() == "close", \
            f"an open connection's request while draining: {status} {headers}"
        idle.close()
        body, complete, _ = dl.finish(timeout=10)
        assert complete and body == data, "the in-flight download was cut by the drain"
        d.proc.wait(10)
        assert d.proc.returncode == 0, f"exit status {d.proc.returncode}:\n{d.log_tail()}"


# ---------------------------------------------------------------------------
# Clients that go away


@pytest.mark.concurrent
def test_client_disconnect_mid_body(root):
    path, data = faultlib.big_model(root, ROWS, COLS)
    urls = [WHOLE, STRIDED, "/v1/models/big/tensors/w?slice=0:300&format=npy"]
    with running_daemon(root, "--threads", 2) as d:
        assert d.get("/v1/models/big").status == 200
        base_fds = d.fds()

        def one(i):
            s = connect(d.port)
            try:
                hdrs = {"Range": "bytes=100-20000000,25000000-"} if i % 4 == 3 else None
                s.sendall(request_bytes(urls[i % len(urls)], hdrs))
                status, _, _ = read_head(s)
                assert status in (200, 206)
                s.recv(256 * 1024)
                if i % 2:   # abortive close: RST instead of FIN
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            finally:
                s.close()

        errors = []

        def run(i):
            try:
                one(i)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
        threads = [threading.Thread(target=run, args=(i,)) for i in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        assert wait_for(lambda: d.fds() <= base_fds, 10 * faultlib.SLACK), \
            f"descriptors not released: {d.fds()} open, {base_fds} before"
        r = raw_get(d.port, WHOLE, timeout=30)
        assert r.status == 200 and r.complete and r.body == data
        assert d.get("/v1/metrics").status == 200


# ---------------------------------------------------------------------------
# Slow clients


def test_idle_and_stalled_connections_are_closed(root):
    faultlib.small_models(root)
    with running_daemon(root, "--connection-timeout", 2) as d:
        idle = connect(d.port)
        partial = connect(d.port)
        partial.sendall(b"GET /v1/models HT")
        t_idle = wait_closed(idle, 8 * faultlib.SLACK)
        t_partial = wait_closed(partial, 8 * faultlib.SLACK)
        idle.close()
        partial.close()
        assert t_idle is not None, "a connection that never sent a byte was not closed"
        assert t_partial is not None, "a connection stalled in its request line was not closed"
        assert t_idle >= 1.0, f"idle connection closed after {t_idle:.1f}s, before the timeout"


def test_slowloris_dribbling_headers_is_capped(root):
    """A client that sends one header byte every 0.5 s never trips an idle
    timeout; header_timeout (here 2 s) must still end it within 6 s."""
    faultlib.small_models(root)
    with running_daemon(root, "--connection-timeout", 2, "--header-timeout", 2) as d:
        s = connect(d.port)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        t0 = time.monotonic()
        closed = False
        s.settimeout(0.5)
        while time.monotonic() - t0 < 6:
            try:
                s.send(b"a")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            try:
                if s.recv(4096) == b"":
                    closed = True
                    break
            except socket.timeout:
                pass
            except ConnectionResetError:
                closed = True
                break
        s.close()
        assert closed, (f"a client dribbling its headers (1 byte / 0.5 s) was still connected "
                        f"after {time.monotonic() - t0:.1f}s: no header timeout caps slowloris")


@pytest.mark.concurrent
def test_slowloris_does_not_starve_others(root):
    t = faultlib.small_models(root)
    with running_daemon(root, "--connection-timeout", 30, "--threads", 2) as d:
        slow = []
        try:
            for i in range(200):
                s = connect(d.port)
                s.sendall(b"GET /v1/models/m/tensors/v HTTP/1.1\r\nHost: 127.0.0.1\r\nX-" + str(i).encode())
                slow.append(s)
            for _ in range(5):
                r = raw_get(d.port, "/v1/models/m/tensors/v", timeout=5)
                assert r.status == 200 and r.body == t["v"], r
                assert r.elapsed < 2 * faultlib.SLACK, f"answer took {r.elapsed:.1f}s"
        finally:
            for s in slow:
                s.close()


# ---------------------------------------------------------------------------
# Connection floods


@pytest.mark.concurrent
@pytest.mark.parametrize("limit,clients", [(16, 48), (4, 120)],
                         ids=["within-mhd-headroom", "beyond-mhd-headroom"])
def test_connection_flood_gets_503_not_a_hang(root, limit, clients):
    t = faultlib.small_models(root)
    with running_daemon(root, "--max-connections", limit, "--threads", 2) as d:
        socks = []
        try:
            for _ in range(clients):
                socks.append(connect(d.port, timeout=10 * faultlib.SLACK))
            time.sleep(0.3)     # let the daemon accept them all
            for s in socks:
                s.sendall(request_bytes("/v1/models/m/tensors/v"))
            results = []
            for s in socks:
                t0 = time.monotonic()
                try:
                    status, hdrs, rest = read_head(s)
                except socket.timeout:
                    status, hdrs, rest = "hang", {}, b""
                except OSError:
                    status, hdrs, rest = None, {}, b""
                results.append((status, hdrs, rest, time.monotonic() - t0))
        finally:
            for s in socks:
                s.close()
        hung = [r for r in results if r[0] == "hang"]
        assert not hung, f"{len(hung)} of {clients} connections got no answer and no close"
        statuses = [r[0] for r in results]
        assert set(statuses) <= {200, 503, None}, statuses
        over = [r for r in results if r[0] == 503]
        assert over, f"{clients} connections with max_connections={limit}: no 503 ({statuses})"
        for status, hdrs, rest, _ in over:
            assert hdrs.get("connection", "").lower() == "close", hdrs
            assert hdrs.get("retry-after"), hdrs
            assert b'"overloaded"' in rest, rest
        assert statuses.count(200) + statuses.count(None) <= clients - len(over)
        # Once the flood is gone the daemon serves again (its count did not drift).
        assert wait_for(lambda: raw_get(d.port, "/v1/models/m/tensors/v").status == 200, 10)
        r = raw_get(d.port, "/v1/models/m/tensors/v")
        assert r.body == t["v"]


# ---------------------------------------------------------------------------
# A hostile models root


def _hostile_root(models):
    """Thousands of files, FIFOs, device nodes, a socket, symlink loops and a
    directory symlink that leads back up (which a naive scanner follows
    forever). Returns the names of the valid models."""
    valid = ["m"]
    faultlib.small_models(models)
    blob, _, _ = gen_models.encode_safetensors([("x", "U8", (4,), b"abcd")])
    for i in range(1500):
        name = f"tiny-{i:04d}"
        with open(os.path.join(models, name + ".safetensors"), "wb") as f:
            f.write(blob)
        valid.append(name)
    many = os.path.join(models, "many-files")
    gen_models.write_safetensors(os.path.join(many, "model.safetensors"), [("x", "U8", (4,), b"abcd")])
    for i in range(2000):
        with open(os.path.join(many, f"extra-{i:04d}.json"), "w") as f:
            f.write("{}")
    valid.append("many-files")

    os.mkfifo(os.path.join(models, "fifo.safetensors"))
    os.mkfifo(os.path.join(models, "m", "fifo.json"))
    os.mkfifo(os.path.join(models, "m", "shard.safetensors.index.json"))
    os.mknod(os.path.join(models, "zero.safetensors"), 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    os.mknod(os.path.join(models, "m", "zero.bin"), 0o666 | stat.S_IFCHR, os.makedev(1, 5))
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(os.path.join(models, "m", "sock.safetensors"))
    sock.close()
    os.symlink("self.safetensors", os.path.join(models, "self.safetensors"))
    os.symlink("b.safetensors", os.path.join(models, "a.safetensors"))
    os.symlink("a.safetensors", os.path.join(models, "b.safetensors"))
    loopy = os.path.join(models, "loopy")
    os.makedirs(loopy)
    os.symlink("..", os.path.join(loopy, "up"))
    os.symlink(".", os.path.join(loopy, "here"))
    os.symlink(loopy, os.path.join(loopy, "abs"))
    gen_models.write_safetensors(os.path.join(loopy, "model.safetensors"), [("x", "U8", (4,), b"abcd")])
    valid.append("loopy")
    return valid


@pytest.mark.concurrent
def test_hostile_models_root(root):
    valid = _hostile_root(root)
    t0 = time.monotonic()
    with running_daemon(root) as d:
        took = time.monotonic() - t0
        listing = d.json("/v1/models")
        names = {m["name"]: m for m in listing["models"]}
        for v in valid:
            assert v in names and names[v]["state"] == "ready", f"{v}: {names.get(v)}"
        # FIFOs, devices and symlink loops are never listed (nor opened).
        for special in ("fifo", "zero", "self", "a", "b"):
            assert special not in names, names[special]
        for name in names:
            assert "/up" not in name and "/here" not in name and "/abs" not in name, \
                f"a symlink loop was followed: {name}"
        for f in ("fifo.json", "zero.bin", "sock.safetensors"):
            r = d.get(f"/v1/models/m/files/{f}")
            assert r.status == 404, f"{f}: {r!r}"
        assert d.get("/v1/models/m/tensors/v").status == 200
        assert d.get("/v1/models/tiny-1499/tensors/x").body == b"abcd"
        assert d.get("/v1/models/loopy/tensors/x").body == b"abcd"
        # A rescan of the same root (SIGHUP) also finishes.
        d.rescan(20 * faultlib.SLACK)
        assert d.get("/healthz").status == 200
        assert took < 20


def test_unreadable_files(root):
    """As an unprivileged user (root reads everything): an unreadable model
    file makes its model invalid (listed with the error, 409); a directory
    that cannot be read is not known to hold a model, so it is absent; an
    unreadable plain file of a valid model answers 500 io_error. None stops
    the scan."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the daemon as another user")
    faultlib.small_models(root)
    gen_models.write_safetensors(os.path.join(root, "locked", "model.safetensors"),
                                 [("x", "U8", (4,), b"abcd")])
    gen_models.write_safetensors(os.path.join(root, "shut", "model.safetensors"),
                                 [("x", "U8", (4,), b"abcd")])
    gen_models.write_safetensors(os.path.join(root, "m", "extra.safetensors"),
                                 [("y", "U8", (4,), b"efgh")])
    with open(os.path.join(root, "m", "secret.json"), "w") as f:
        f.write("{}")
    os.chmod(os.path.join(root, "locked", "model.safetensors"), 0)
    os.chmod(os.path.join(root, "m", "secret.json"), 0)
    os.chmod(os.path.join(root, "shut"), 0)
    p = root
    while p != "/":
        os.chmod(p, os.stat(p).st_mode | 0o005)
        p = os.path.dirname(p)
    workdir = tempfile.mkdtemp(prefix="tensord-nobody-")
    os.chmod(workdir, 0o777)
    with running_daemon(root, prefix=["setpriv", "--reuid=65534", "--regid=65534",
                                      "--clear-groups"], workdir=workdir) as d:
        names = {m["name"]: m for m in d.json("/v1/models")["models"]}
        assert names["m"]["state"] == "ready", names["m"]
        locked = names.get("locked")
        assert locked and locked["state"] == "invalid", locked
        assert locked["error"]["code"] == "shard_invalid", locked
        assert "Permission denied" in locked["error"]["message"], locked
        assert "shut" not in names, names["shut"]
        r = d.get("/v1/models/locked/tensors/x")
        assert r.status == 409 and b'"model_invalid"' in r.body, r
        r = d.get("/v1/models/m/files/secret.json")
        assert r.status == 500 and b'"io_error"' in r.body, r
        assert d.get("/v1/models/m/tensors/v").status == 200
    import shutil
    shutil.rmtree(workdir, ignore_errors=True)


# ---------------------------------------------------------------------------
# The disk fails under the daemon


def test_disk_read_error(root):
    why = faultlib.FailingDisk.unavailable()
    if why:
        pytest.skip(f"disk read errors need a loop device: {why}")
    try:
        disk = faultlib.FailingDisk()
        disk.__enter__()
    except OSError as e:
        pytest.skip(f"cannot make a loop-device filesystem here: {e}")
    try:
        models = disk.mnt
        small = os.urandom(4096)
        large = os.urandom(64 * 65536)
        model = os.path.join(models, "d", "model.safetensors")
        gen_models.write_safetensors(model, [("small", "U8", (4096,), small),
                                             ("large", "U8", (64, 65536), large)])
        cut = disk.first_block(model)   # every block of the file lies past the cut
        with running_daemon(models, "--watch", "false") as d:
            assert d.get("/v1/models/d/tensors/small").body == small
            disk.drop_cache(model)
            disk.fail_beyond(cut)
            with pytest.raises(OSError):
                with open(model, "rb") as f:
                    f.read(4096)

            r = raw_get(d.port, "/v1/models/d/tensors/small", timeout=10)
            assert r.status == 500 and b'"io_error"' in r.body, r
            for url, good in [("/v1/models/d/tensors/large", large),
                              ("/v1/models/d/tensors/large?slice=:,0:1000",
                               b"".join(large[i * 65536:i * 65536 + 1000] for i in range(64)))]:
                r = raw_get(d.port, url, timeout=10 * faultlib.SLACK)
                assert r.status in (200, 500, None), r
                if r.status == 200:
                    assert not r.complete, f"{url}: a complete body from a failing disk"
                    assert r.body == good[:len(r.body)], f"{url}: wrong bytes before the error"
                assert r.elapsed < 8 * faultlib.SLACK, f"{url}: took {r.elapsed:.1f}s"
            assert d.get("/healthz").status == 200
            assert d.get("/v1/models/d").status == 200
    finally:
        disk.__exit__(None, None, None)


def test_idle_keepalive_outlives_header_timeout(root):
    """header_timeout caps requests in progress, not idle keep-alive
    connections between requests (connection_timeout governs those)."""
    faultlib.small_models(root)
    with running_daemon(root, "--connection-timeout", 10, "--header-timeout", 1) as d:
        s = connect(d.port)
        for _ in range(2):
            s.sendall(request_bytes("/healthz"))
            status, _, _ = read_head(s)
            assert status == 200
            time.sleep(2.5)  # idle longer than header_timeout
        s.close()
