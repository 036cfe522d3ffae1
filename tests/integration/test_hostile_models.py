"""Hostile changes to the models directory, by someone who can write in it
(or a careless operator): symlink swaps racing the scan, running out of
descriptors during a rescan, changes that land while a rescan runs, and
in-place writes to files being downloaded. Each test says what the defect
was; each fails on a3a5bfa. The HTTP side is in test_hostile_http.py."""
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

import faultlib
import tdutil
from faultlib import SANITIZED, SLACK, PausedDownload, running_daemon, wait_for
from tdutil import gen_models

SECRET = b"SECRET-" + os.urandom(16).hex().encode()


@pytest.fixture
def base():
    b = tempfile.mkdtemp(prefix="tensord-hostile-m-")
    os.makedirs(os.path.join(b, "models"))
    os.makedirs(os.path.join(b, "outside"))
    yield b
    shutil.rmtree(b, ignore_errors=True)


def metrics(d):
    return d.json("/v1/metrics")


def write_model(path, tensors, metadata=None):
    """Writes a safetensors file with the current time as mtime (as a real
    writer does; the generator's default is a fixed mtime)."""
    gen_models.write_safetensors(path, tensors, metadata or {"format": "pt"}, mtime=None)


# ---------------------------------------------------------------------------
# Symlinks swapped in between the scan and the open


@pytest.mark.parametrize("walk", ["openat2", "walk"])
def test_symlink_swaps_never_leak_files_outside_the_root(base, walk):
    """The scan classified an entry without following symlinks, then opened
    it later with an openat that does follow them: swapping a file for a
    symlink in between (the writer's own write triggers the rescan) served
    any file the daemon could read. Opens are now race-free below the root,
    with openat2 and with the component walk taken where it is missing."""
    models = os.path.join(base, "models")
    outside = os.path.join(base, "outside")
    with open(os.path.join(outside, "secret.json"), "wb") as f:
        f.write(SECRET)
    write_model(os.path.join(outside, "evil", "model.safetensors"),
                [("secret", "U8", (len(SECRET),), SECRET)])
    mdir = os.path.join(models, "m")
    write_model(os.path.join(mdir, "model.safetensors"), [("w", "U8", (4,), b"good")])
    cfg = os.path.join(mdir, "config.json")
    with open(cfg, "wb") as f:
        f.write(b'{"ok": true}')
    prefix = ["env", "TENSORD_BENEATH_WALK=1"] if walk == "walk" else []
    with running_daemon(models, prefix=prefix) as d:
        stop = threading.Event()

        def swapper():
            tmp = os.path.join(mdir, ".swap")
            i = 0
            while not stop.is_set():
                i += 1
                try:  # config.json <-> link to the secret, model.safetensors <-> link outside
                    os.symlink(os.path.join(outside, "secret.json"), tmp)
                    os.replace(tmp, cfg)
                    with open(tmp, "wb") as f:
                        f.write(b'{"ok": true}')
                    os.replace(tmp, cfg)
                    target = os.path.join(mdir, "model.safetensors")
                    os.symlink(os.path.join(outside, "evil", "model.safetensors"), tmp)
                    os.replace(tmp, target)
                    write_model(tmp, [("w", "U8", (4,), b"good")])
                    os.replace(tmp, target)
                    if i % 7 == 0:  # and the whole directory for a link to another model
                        os.rename(mdir, mdir + ".away")
                        os.symlink(os.path.join(outside, "evil"), mdir)
                        time.sleep(0.002)
                        os.unlink(mdir)
                        os.rename(mdir + ".away", mdir)
                except OSError:
                    pass

        t = threading.Thread(target=swapper)
        t.start()
        seen = []
        try:
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                for path in ("/v1/models/m/files/config.json", "/v1/models/m/tensors/secret",
                             "/v1/models/m/files/model.safetensors", "/v1/models/m/header",
                             "/v1/models/m"):
                    r = d.get(path)
                    seen.append(r.status)
                    assert SECRET not in r.body, f"{path} served a file outside the root"
                    assert b"secret" not in r.body or r.status >= 400, (path, r)
                os.kill(d.pid, signal.SIGHUP)
        finally:
            stop.set()
            t.join()
        assert 200 in seen, "the model was never served while the swaps ran"
        assert d.alive()


def test_symlinks_inside_the_root_are_still_followed(base):
    """A link to another model's file or directory inside the root, absolute
    or relative, keeps working."""
    models = os.path.join(base, "models")
    write_model(os.path.join(models, "real", "model.safetensors"), [("w", "U8", (4,), b"real")])
    os.makedirs(os.path.join(models, "linked"))
    os.symlink("../real/model.safetensors", os.path.join(models, "linked", "model.safetensors"))
    os.symlink(os.path.join(os.path.realpath(models), "real"), os.path.join(models, "absdir"))
    os.symlink(os.path.join(base, "outside"), os.path.join(models, "out"))
    with running_daemon(models) as d:
        for m in ("real", "linked", "absdir"):
            r = d.get(f"/v1/models/{m}/tensors/w")
            assert r.status == 200 and r.body == b"real", (m, r)
        assert d.get("/v1/models/out").status == 404


# ---------------------------------------------------------------------------
# Resource errors during a rescan


def nofile(n):
    def set_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    return set_limit


def many_models(models, n):
    for i in range(n):
        write_model(os.path.join(models, f"m{i:04d}", "model.safetensors"),
                    [("w", "U8", (8,), b"v1-%05d" % i)])


def start_limited(models, workdir, limit, *args):
    """A daemon whose descriptor limit is `limit` (soft and hard, so it cannot
    raise it)."""
    d = faultlib.Daemon(models, workdir, [str(a) for a in args])
    real_popen = subprocess.Popen

    def popen(*a, **kw):
        kw["preexec_fn"] = nofile(limit)
        return real_popen(*a, **kw)
    subprocess.Popen = popen
    try:
        d.start()
    finally:
        subprocess.Popen = real_popen
    return d


@pytest.mark.skipif(SANITIZED, reason="ASan's own descriptors make the limit arithmetic moot")
def test_reload_with_nothing_changed_keeps_every_model_under_a_tight_fd_limit(base):
    """Running out of descriptors during a rescan was recorded as invalid
    files and skipped directories (8,000 models, one SIGHUP: 1,991 left). A
    rescan now reuses unchanged models (no new descriptor), and an error
    keeps the previous model."""
    models = os.path.join(base, "models")
    n = 600
    many_models(models, n)
    d = start_limited(models, base, n + 120, "--threads", "1", "--max-connections", "16")
    try:
        for _ in range(3):
            d.rescan(20 * SLACK)
        assert metrics(d)["counters"]["reloads"] >= 3
        listed = d.json("/v1/models")["models"]
        assert len(listed) == n and all(m["state"] == "ready" for m in listed), \
            [m for m in listed if m["state"] != "ready"][:3]
        for i in range(0, n, 37):
            assert d.get(f"/v1/models/m{i:04d}/tensors/w").body == b"v1-%05d" % i
        assert metrics(d)["registry"]["open_files"] == n
    finally:
        d.stop_checked()


@pytest.mark.skipif(SANITIZED, reason="ASan's own descriptors make the limit arithmetic moot")
def test_descriptors_running_out_during_a_rescan_keep_the_previous_models(base):
    """Every model changes while clients hold most of the descriptors: the
    rescan cannot open the new files. The models keep serving their previous
    version (never missing, never invalid), the error is counted, and the
    rescan is retried until the new versions are served."""
    models = os.path.join(base, "models")
    n = 200
    many_models(models, n)
    d = start_limited(models, base, n + 100, "--threads", "1", "--max-connections", "200")
    socks = []
    try:
        while True:  # take every descriptor the daemon has left
            try:
                s = socket.create_connection(("127.0.0.1", d.port), timeout=2)
            except OSError:
                break
            socks.append(s)
            try:
                get_on(s, "/healthz")
            except (AssertionError, OSError):
                socks.pop().close()  # refused: no descriptor left for it
                break
            if len(socks) > 400:
                break
        time.sleep(0.5)
        for i in range(n):  # a new version of every model: new files, new descriptors
            p = os.path.join(models, f"m{i:04d}", "model.safetensors")
            write_model(p + ".new", [("w", "U8", (8,), b"v2-%05d" % i)])
            os.replace(p + ".new", p)
        assert wait_for(lambda: metrics_ok(socks, d), 20 * SLACK), "no rescan error was counted"
        socks[0].settimeout(10)  # the connections hold the descriptors: ask on one of them
        listed = json.loads(get_on(socks[0], "/v1/models"))["models"]
        assert len(listed) == n, f"{n - len(listed)} models vanished"
        assert all(m["state"] == "ready" for m in listed), [m for m in listed if m["state"] != "ready"][:3]
        old = get_on(socks[0], "/v1/models/m0007/tensors/w")
        assert old in (b"v1-00007", b"v2-00007")
    finally:
        for s in socks:
            s.close()
    try:  # descriptors free again: the retry serves the new versions
        assert wait_for(lambda: d.get("/v1/models/m0007/tensors/w").body == b"v2-00007" and
                        d.get(f"/v1/models/m{n - 1:04d}/tensors/w").body == b"v2-%05d" % (n - 1),
                        30 * SLACK), "the new versions never came"
        assert all(m["state"] == "ready" for m in d.json("/v1/models")["models"])
    finally:
        d.stop_checked()


def get_on(s, path):
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    status, hdrs, rest = faultlib.read_head(s)
    body, _ = faultlib.read_body(s, hdrs, rest)
    assert status == 200, (path, status, body[:200])
    return body


def metrics_ok(socks, d):
    m = json.loads(get_on(socks[0], "/v1/metrics"))
    return m["counters"]["scan_errors"] > 0


# ---------------------------------------------------------------------------
# Changes that land while a rescan runs


def test_changes_during_a_rescan_are_not_lost(base):
    """After each rescan the old inotify descriptor was closed unread: a
    model copied in during a rescan never appeared, and a file written in
    place during one answered 503 file_changed forever. Each round starts a
    rescan, then copies a model in and rewrites a file in place while it
    runs, and does nothing more: both must be seen."""
    models = os.path.join(base, "models")
    many_models(models, 1500)  # rescans that take a while
    live = os.path.join(models, "live", "model.safetensors")
    write_model(live, [("w", "U8", (8,), b"live-000")])
    with running_daemon(models) as d:
        lost = []
        for k in range(8):
            os.utime(os.path.join(models, f"m{k:04d}", "model.safetensors"))  # a rescan is due
            time.sleep(0.505 + 0.01 * k)  # after the 500 ms debounce: while it runs
            write_model(os.path.join(models, f"new{k}", "model.safetensors"),
                        [("w", "U8", (8,), b"new-%04d" % k)])
            with open(live, "r+b") as f:  # in place, same size
                f.seek(os.path.getsize(live) - 3)
                f.write(b"%03d" % k)
            # nothing else happens until both are seen
            ok = wait_for(lambda: d.get(f"/v1/models/new{k}/tensors/w").status == 200 and
                          d.get("/v1/models/live/tensors/w").body == b"live-%03d" % k, 4 * SLACK)
            if not ok:
                lost.append(k)
        assert not lost, f"changes made during rounds {lost}'s rescans were never seen"


# ---------------------------------------------------------------------------
# In-place writes during downloads: correct bytes or a cut connection


@pytest.mark.parametrize("sendfile", ["true", "false"])
@pytest.mark.parametrize("kind", ["file", "tensor", "range", "fetch"])
@pytest.mark.parametrize("how", ["write", "write-keep-mtime", "truncate"])
def test_in_place_write_during_a_download_never_gives_mixed_bytes(base, sendfile, kind, how):
    """An in-place write during a download gave a complete 200 (or 206) that
    mixed two versions, with sendfile on, and with it off through dirty page
    cache that changes no mtime. A transfer of a file that is written is now
    cut: the client gets every byte of one version, or a short body."""
    models = os.path.join(base, "models")
    path, data = faultlib.big_model(models, rows=512, cols=65536)  # 32 MiB
    url = {"file": "/v1/models/big/files/model.safetensors",
           "tensor": "/v1/models/big/tensors/w", "range": "/v1/models/big/tensors/w",
           "fetch": "/v1/models/big/fetch?q=%7B%22tensors%22%3A%5B%22w%22%5D%7D"}[kind]
    # A fetch range inside one tensor's bytes goes out with sendfile too.
    hdrs = ({"Range": "bytes=1000-30000000"} if kind == "range" else
            {"Range": "bytes=100000-30000000"} if kind == "fetch" else None)
    with running_daemon(models, "--sendfile", sendfile) as d:
        full = d.get(url, hdrs).body
        before = metrics(d)["counters"].get("transfers_cut", 0)
        dl = PausedDownload(d.port, url, hdrs, first=1 << 20)
        st = os.stat(path)
        with open(path, "r+b") as f:
            if how == "truncate":
                f.truncate(st.st_size // 2)
            else:
                f.seek(st.st_size - 8 * 1024 * 1024)  # a region not sent yet
                f.write(os.urandom(1 << 20))
        if how == "write-keep-mtime":
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        body, complete, _ = dl.finish(timeout=20 * SLACK)
        assert not (complete and body != full), f"a complete {dl.status} mixed two versions"
        assert not complete, "the transfer of a written file went on to the end"
        if sendfile == "true" and how != "truncate":
            # sendfile has no check between its chunks: the watcher cut it (a
            # copied transfer may see the change in its own per-block check
            # first; a truncated file ends a transfer by itself)
            assert metrics(d)["counters"]["transfers_cut"] > before
