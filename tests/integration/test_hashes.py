"""Content hashes against the real daemon: every file's sha256 in
/v1/models/{m} equals Python's hashlib over the file; a restart from the same
state directory hashes nothing (the metrics say so); a rewritten file gets a
new hash even with its size and mtime restored; a file changed while it is
being hashed never gets a wrong hash recorded; `tensord verify` finds a
tampered record; a corrupt or unusable state directory costs a re-hash, never
the service.

The state file is read here by an independent parser written from the format
in core/hash/hashfile.h, checksum included."""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest

import faultlib
import tdutil
from tdutil import gen_models

SLACK = faultlib.SLACK


# ---------------------------------------------------------------------------
# Helpers


def make_models(root, seed=1):
    """Three models of different shapes; returns {model: {file: path}}."""
    rng = __import__("numpy").random.default_rng(seed)
    out = {}
    big = rng.integers(0, 256, 3 << 20, dtype="uint8").tobytes()
    gen_models.write_safetensors(os.path.join(root, "a", "model.safetensors"),
                                 [("w", "U8", (len(big),), big)], {"format": "pt"})
    with open(os.path.join(root, "a", "config.json"), "w") as f:
        f.write('{"hidden": 8}\n')
    out["a"] = {n: os.path.join(root, "a", n) for n in ("model.safetensors", "config.json")}
    for i in (1, 2):
        data = rng.integers(0, 256, 4096 * i, dtype="uint8").tobytes()
        gen_models.write_safetensors(
            os.path.join(root, "org", "b", f"model-0000{i}-of-00002.safetensors"),
            [(f"t{i}", "U8", (len(data),), data)], {"format": "pt"})
    with open(os.path.join(root, "org", "b", "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": {"t1": "model-00001-of-00002.safetensors",
                                                  "t2": "model-00002-of-00002.safetensors"}}, f)
    out["org/b"] = {n: os.path.join(root, "org", "b", n)
                    for n in ("model-00001-of-00002.safetensors",
                              "model-00002-of-00002.safetensors", "model.safetensors.index.json")}
    empty = os.path.join(root, "c.safetensors")
    gen_models.write_safetensors(empty, [], None)
    out["c"] = {"c.safetensors": empty}
    return out


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def hashing(d):
    return d.json("/v1/metrics")["hashing"]


def wait_hashed(d, timeout=30.0):
    """Polls the metrics until every file of the registry has a known hash."""
    deadline = time.monotonic() + timeout * SLACK
    while time.monotonic() < deadline:
        h = hashing(d)
        if h["files_pending"] == 0 and h["files_known"] == h["files"]:
            return h
        time.sleep(0.05)
    raise AssertionError(f"hashing did not finish: {hashing(d)}\n{d.log_tail()}")


def parse_state(path):
    """{(dev, ino, size, mtime_ns, ctime_ns): (sha256, git_sha1 or None)} from
    a state file, checking every rule of the format."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    assert lines[-1] == b"", "the file ends with a newline"
    lines = lines[:-1]
    assert lines[0] == b"tensord-hashes 1"
    end = lines[-1].decode().split(" ")
    assert end[0] == "end" and len(end) == 3
    body = b"".join(line + b"\n" for line in lines[:-1])
    assert hashlib.sha256(body).hexdigest() == end[2], "checksum"
    entries = {}
    for line in lines[1:-1]:
        f = line.decode().split(" ")
        assert len(f) == 7, line
        key = tuple(int(x) for x in f[:5])
        assert key not in entries
        assert len(f[5]) == 64 and f[5] == f[5].lower()
        entries[key] = (f[5], None if f[6] == "-" else f[6])
    assert int(end[1]) == len(entries)
    return entries


def write_state(path, entries):
    """The state file format, written independently of tensord."""
    body = "tensord-hashes 1\n" + "".join(
        f"{k[0]} {k[1]} {k[2]} {k[3]} {k[4]} {v[0]} {v[1] or '-'}\n"
        for k, v in sorted(entries.items()))
    with open(path, "w") as f:
        f.write(body + f"end {len(entries)} {hashlib.sha256(body.encode()).hexdigest()}\n")


def identity(path):
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def git_blob_sha1(path):
    with open(path, "rb") as f:
        data = f.read()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@pytest.fixture
def tree():
    base = tempfile.mkdtemp(prefix="tensord-hash-")
    root = os.path.join(base, "models")
    files = make_models(root)
    try:
        yield base, root, files
    finally:
        shutil.rmtree(base, ignore_errors=True)


LOCKED = "is locked by another process"


def save_tried(d, before):
    """Waits until the daemon has tried to save its hashes and found the
    state directory locked: its log says so once more than `before` times."""
    assert faultlib.wait_for(lambda: d.log_text().count(LOCKED) > before, 10 * SLACK), \
        "no save found the lock taken\n" + d.log_tail()


def daemon(base, root, *args):
    return faultlib.running_daemon(root, "--state-dir", os.path.join(base, "state"), *args,
                                   workdir=base)


# ---------------------------------------------------------------------------
# Tests


def test_hashes_equal_hashlib(tree):
    base, root, files = tree
    with daemon(base, root) as d:
        wait_hashed(d)
        listing = d.json("/v1/models")
        assert listing["hashing"]["state"] == "idle"
        assert listing["hashing"]["files_known"] == listing["hashing"]["files"] == 6
        for m in listing["models"]:
            assert m["hashes"] == {"known": m["files"], "files": m["files"], "complete": True}
        for model, paths in files.items():
            doc = d.json(f"/v1/models/{tdutil.q(model)}")
            assert doc["hashes"]["complete"] is True
            got = {f["name"]: f["sha256"] for f in doc["files"]}
            want = {n: sha256_file(p) for n, p in paths.items()}
            assert got == want, model
            # The bytes the daemon serves hash the same.
            for name, sha in want.items():
                r = d.get(f"/v1/models/{tdutil.q(model)}/files/{tdutil.q(name)}")
                assert r.status == 200 and hashlib.sha256(r.body).hexdigest() == sha
    state = parse_state(os.path.join(base, "state", "hashes"))
    for paths in files.values():
        for p in paths.values():
            sha, git = state[identity(p)]
            assert sha == sha256_file(p)
            assert git == git_blob_sha1(p)  # every file here is under 10 MiB


def test_a_restart_hashes_nothing(tree):
    base, root, files = tree
    with daemon(base, root) as d:
        first = wait_hashed(d)
        assert first["bytes_hashed"] >= sum(os.path.getsize(p)
                                            for m in files.values() for p in m.values())
        assert first["files_hashed"] == 6
    with daemon(base, root) as d:
        # Known before the first request: nothing queued, nothing read.
        h = hashing(d)
        assert h["files_pending"] == 0 and h["files_known"] == 6, h
        assert h["bytes_hashed"] == 0 and h["files_hashed"] == 0, h
        prom = d.get("/metrics").body.decode()
        assert "\ntensord_hash_bytes_total 0\n" in prom
        assert "\ntensord_hash_files_known 6\n" in prom
        doc = d.json("/v1/models/a")
        assert all(f["sha256"] for f in doc["files"])
        # A reload re-hashes nothing either.
        d.rescan(10 * SLACK)
        assert wait_hashed(d)["bytes_hashed"] == 0


def test_a_rewritten_file_gets_a_new_hash(tree):
    """Same size, same mtime (restored, as rsync -t or cp -p do): only the
    ctime tells, and it is part of the identity."""
    base, root, files = tree
    path = files["a"]["config.json"]
    with daemon(base, root) as d:
        wait_hashed(d)
        old = d.json("/v1/models/a")["files"][0]["sha256"]
        st = os.stat(path)
        with open(path, "w") as f:
            f.write('{"hidden": 9}\n')  # same length
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert os.stat(path).st_size == st.st_size and os.stat(path).st_mtime_ns == st.st_mtime_ns
        os.kill(d.pid, __import__("signal").SIGHUP)
        deadline = time.monotonic() + 30 * SLACK
        while time.monotonic() < deadline:
            doc = d.json("/v1/models/a")
            new = {f["name"]: f["sha256"] for f in doc["files"]}["config.json"]
            if new and new != old:
                break
            time.sleep(0.05)
        assert new == sha256_file(path) != old
        assert hashing(d)["files_hashed"] == 7  # the six, then the rewritten one
    state = parse_state(os.path.join(base, "state", "hashes"))
    assert state[identity(path)][0] == sha256_file(path)


@pytest.mark.parametrize("watch", [True, False], ids=["watched", "unwatched"])
def test_a_file_changed_while_hashed_never_gets_a_wrong_hash(watch):
    """Watched, the reload drops the job being read; unwatched, it reads to
    the end, sees the identity changed, and records nothing until SIGHUP."""
    base = tempfile.mkdtemp(prefix="tensord-hash-")
    try:
        root = os.path.join(base, "models")
        data = os.urandom(48 << 20)
        path = os.path.join(root, "m", "model.safetensors")
        gen_models.write_safetensors(path, [("w", "U8", (len(data),), data)], {"format": "pt"})
        old_id = identity(path)
        # 8 MiB/s: six seconds of reading, changed in the middle of it.
        with daemon(base, root, "--hash-max-bytes-per-second", "8M", "--hash-threads", "1",
                    "--watch", "true" if watch else "false") as d:
            deadline = time.monotonic() + 30 * SLACK
            while hashing(d)["bytes_hashed"] < (4 << 20) and time.monotonic() < deadline:
                time.sleep(0.05)
            h = hashing(d)
            assert h["files_pending"] == 1 and h["bytes_hashed"] < os.path.getsize(path), h
            listing = d.json("/v1/models")
            assert listing["hashing"]["state"] == "hashing"
            assert d.json("/v1/models/m")["files"][0]["sha256"] is None
            fd = os.open(path, os.O_WRONLY)
            os.pwrite(fd, b"changed!" * 512, 40 << 20)  # past what was read so far
            os.close(fd)
            if not watch:
                deadline = time.monotonic() + 30 * SLACK
                while hashing(d)["files_pending"]:
                    assert time.monotonic() < deadline, hashing(d)
                    time.sleep(0.1)
                # Read to the end, found changed: no hash, rather than a wrong one.
                assert d.json("/v1/models/m")["files"][0]["sha256"] is None
                assert d.json("/v1/models")["hashing"]["files_failed"] == 1
                os.kill(d.pid, __import__("signal").SIGHUP)
            # The new identity is hashed from the start.
            wait_hashed(d, timeout=60)
            doc = d.json("/v1/models/m")
            assert doc["files"][0]["sha256"] == sha256_file(path)
        state = parse_state(os.path.join(base, "state", "hashes"))
        assert old_id not in state
        assert state[identity(path)][0] == sha256_file(path)
        ino = os.stat(path).st_ino
        assert all(v[0] == sha256_file(path) for k, v in state.items() if k[1] == ino)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run_verify(*args):
    p = subprocess.run([tdutil.tensord_bin(), "verify", *args], capture_output=True, text=True,
                       timeout=60)
    return p.returncode, p.stdout, p.stderr


def test_verify(tree):
    base, root, files = tree
    state_dir = os.path.join(base, "state")
    with daemon(base, root) as d:
        wait_hashed(d)
    rc, out, err = run_verify("--state-dir", state_dir, root)
    assert rc == 0, out + err
    lines = out.splitlines()
    for paths in files.values():
        for p in paths.values():
            assert f"OK        {sha256_file(p)}  {p}" in lines, (p, out)
    assert lines[-1] == f"6 files: 6 ok, 0 mismatched, 0 not cached, 0 errors (state " \
                        f"directory {state_dir})"
    # it says which state directory it read
    assert f"reading 6 hashes recorded in {state_dir}/hashes" in err
    rc, out, _ = run_verify("--state-dir", state_dir, os.path.join(root, "org", "b"),
                            files["a"]["config.json"])
    assert rc == 0 and out.splitlines()[-1].startswith("4 files: 4 ok")

    # A record that disagrees with the bytes (bit rot, or a tampered state file).
    state_file = os.path.join(state_dir, "hashes")
    saved = open(state_file, "rb").read()
    entries = parse_state(state_file)
    victim = files["org/b"]["model-00002-of-00002.safetensors"]
    good = entries[identity(victim)]
    entries[identity(victim)] = ("0" * 64, good[1])
    write_state(state_file, entries)
    rc, out, _ = run_verify("--state-dir", state_dir, root)
    assert rc == 1, out
    assert f"MISMATCH  {good[0]}  {victim} (recorded {'0' * 64})" in out.splitlines()
    assert "1 mismatched" in out

    # A file changed since it was hashed has no record for what it is now.
    with open(state_file, "wb") as f:
        f.write(saved)
    os.chmod(files["a"]["config.json"], 0o600)  # ctime moves
    rc, out, err = run_verify("--state-dir", state_dir, root)
    assert rc == 3, out
    assert f"UNCACHED  {sha256_file(files['a']['config.json'])}  {files['a']['config.json']}" \
        in out.splitlines()
    assert f"had no hash recorded in {state_dir}" in err and "--state-dir" in err
    # another state directory: nothing recorded there, and it says which it read
    empty = os.path.join(base, "other-state")
    os.makedirs(empty, exist_ok=True)
    rc, out, err = run_verify("--state-dir", empty, root)
    assert rc == 3 and f"{empty}/hashes records no hashes yet" in err, err

    # tensord(8)'s exit statuses: 2 for what could not be checked
    rc, _, err = run_verify("--state-dir", state_dir)
    assert rc == 2 and "no PATH given" in err and "usage:" in err
    rc, _, err = run_verify("--bogus", root)
    assert rc == 2 and 'unknown option "--bogus"' in err
    for flag in ("--help", "-h"):
        rc, out, _ = run_verify(flag)
        assert rc == 0 and out.startswith("usage: tensord verify") and "Exit status" in out
    rc, out, _ = run_verify("--state-dir", state_dir, os.path.join(base, "missing"))
    assert rc == 2 and "ERROR" in out and "No such file or directory" in out
    with open(state_file, "w") as f:
        f.write("garbage\n")
    rc, _, err = run_verify("--state-dir", state_dir, root)
    assert rc == 2 and "hashes:1: not a tensord hash file" in err


def test_a_corrupt_state_file_costs_a_rehash(tree):
    base, root, files = tree
    os.makedirs(os.path.join(base, "state"))
    state_file = os.path.join(base, "state", "hashes")
    with open(state_file, "wb") as f:
        f.write(b"tensord-hashes 1\n" + b"9" * 5000 + b"\n")
    with daemon(base, root) as d:
        h = wait_hashed(d)
        assert h["files_hashed"] == 6
        assert "ignoring " + state_file in d.log_text()
    assert len(parse_state(state_file)) == 6


def test_an_unusable_state_dir_keeps_hashes_in_memory(tree):
    base, root, files = tree
    with faultlib.running_daemon(root, "--state-dir", "/dev/null/state", workdir=base) as d:
        wait_hashed(d)
        assert d.json("/v1/models/a")["files"][1]["sha256"] == sha256_file(files["a"]["model.safetensors"])
        assert "hashes are kept in memory only" in d.log_text()


def test_a_locked_state_dir_neither_stalls_nor_hangs_the_daemon(tree):
    """Another process holds the state directory's lock (another tensord
    sharing it, `tensord verify`): the save waits and retries on its own
    thread, so waiting Hub requests still get their answers on time and
    SIGTERM still ends the daemon within the drain time (issue 23, item 4).
    Once the lock is free the state file is written."""
    import fcntl
    base, root, files = tree
    state = os.path.join(base, "state")
    os.makedirs(state)
    lock = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with daemon(base, root) as d:
            wait_hashed(d)
            save_tried(d, 0)  # a save is due: it finds the lock taken
            assert d.get("/healthz").status == 200
            assert not os.path.exists(os.path.join(state, "hashes"))
            fcntl.flock(lock, fcntl.LOCK_UN)
            deadline = time.monotonic() + 10 * SLACK
            while not os.path.exists(os.path.join(state, "hashes")):
                assert time.monotonic() < deadline, "the save never went through\n" + d.log_tail()
                time.sleep(0.1)
        assert len(parse_state(os.path.join(state, "hashes"))) == 6
        # Locked again with new hashes to save: SIGTERM still ends it.
        shutil.rmtree(state)
        os.makedirs(state)
        os.close(lock)
        lock = os.open(state, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(lock, fcntl.LOCK_EX)
        d = faultlib.Daemon(root, base, ["--state-dir", state])
        tried = d.log_text().count(LOCKED)  # the first daemon's, in the same log
        d.start()
        try:
            wait_hashed(d)
            save_tried(d, tried)
            t0 = time.monotonic()
            rc = d.stop(timeout=20)
            took = time.monotonic() - t0
            assert rc == 0, f"SIGTERM: exit status {rc} after {took:.1f} s\n{d.log_tail()}"
            assert "stayed locked by another process" in d.log_text()
        finally:
            if d.alive():
                d.proc.kill()
                d.proc.wait()
        assert not os.path.exists(os.path.join(state, "hashes"))
    finally:
        os.close(lock)
