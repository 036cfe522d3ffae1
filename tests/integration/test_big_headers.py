"""Big headers and indexes stay cheap (issue 11, defect 4): a ~99 MB header
of about a million tensors, served by a daemon of its own. The first GET of
the model's description and of its merged header takes memory in proportion
to the document (not a JSON tree 10-30 times its size), gives it back after,
and takes well under the ~7 s the tree took.

Memory is the daemon's own: VmRSS before, and the peak (VmHWM, reset through
/proc/PID/clear_refs before each request, plus a 10 ms sampler in case the
reset is not allowed). Skipped under sanitizers (their allocators keep freed
memory in quarantine, so RSS says nothing there)."""
import os
import re
import shutil
import signal
import tempfile
import threading
import time

import pytest

import tdutil
from tdutil import gen_models

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(bool(os.environ.get("TENSORD_SANITIZED")),
                                 reason="sanitizer allocators keep freed memory: RSS says nothing")]

MIB = 1 << 20
N_TENSORS = 944_000          # a 98.9 MB header, the size the review used


def proc_status(pid):
    """VmRSS and VmHWM of pid, in bytes."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key = line.split(":")[0]
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(line.split()[1]) * 1024
    return out


class PeakRss:
    """The daemon's peak RSS over a with-block: VmHWM after a reset, or a
    10 ms sampler's maximum when the reset is refused (whichever is higher)."""

    def __init__(self, pid):
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, proc_status(self.pid)["VmRSS"])
            except OSError:
                pass
            self._stop.wait(0.01)

    def __enter__(self):
        try:
            with open(f"/proc/{self.pid}/clear_refs", "w") as f:
                f.write("5")        # resets VmHWM to the current RSS
            self.hwm_reset = True
        except OSError:
            self.hwm_reset = False
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        st = proc_status(self.pid)
        self.peak = max(self.peak, st["VmRSS"], st["VmHWM"] if self.hwm_reset else 0)


def rss_within(pid, limit, timeout=5.0):
    """The process's VmRSS once it is at most limit, or as it is when timeout
    passes: what an answer or a rescan frees is given back a moment after
    the client has its bytes (the answer ends on the daemon's thread)."""
    deadline = time.monotonic() + timeout
    while (rss := proc_status(pid)["VmRSS"]) > limit and time.monotonic() < deadline:
        time.sleep(0.02)
    return rss


@pytest.fixture(scope="module")
def big_header_daemon():
    base = tempfile.mkdtemp(prefix="tensord-bighdr-")
    models = os.path.join(base, "models")
    n = gen_models.make_many_tensors(os.path.join(models, "big", "model.safetensors"), N_TENSORS,
                                     metadata={"format": "pt"})
    assert 98_000_000 < n < 100_000_000
    d = tdutil.Daemon(models, base)
    try:
        d.start()
    except RuntimeError as e:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(str(e), pytrace=False)
    yield d
    try:
        d.stop_checked()
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_first_get_of_each_document_is_bounded(big_header_daemon):
    d = big_header_daemon
    figures = []
    for path, kind in (("/v1/models/big", "description"), ("/v1/models/big/header", "header")):
        before = proc_status(d.pid)["VmRSS"]
        with PeakRss(d.pid) as p:
            t0 = time.monotonic()
            r = d.get(path)
            took = time.monotonic() - t0
        assert r.status == 200, (path, r.status, r.body[:300])
        size = len(r.body)
        after = rss_within(d.pid, before + 1.15 * size + 32 * MIB)
        figures.append(f"{kind}: {size / MIB:.0f} MiB in {took:.2f} s, RSS {before / MIB:.0f} -> "
                       f"peak {p.peak / MIB:.0f} -> {after / MIB:.0f} MiB")
        # The document is all the memory it takes: at most half its size again
        # for the buffer's growth (plus slack for the HTTP side); a tree took
        # 10x the document and kept it.
        assert p.peak - before <= 1.5 * size + 64 * MIB, figures[-1]
        # Afterwards only the cached document stays.
        assert after - before <= 1.15 * size + 32 * MIB, figures[-1]
        assert took < 5.0, figures[-1]
        # The document is whole: every tensor once, first and last in place.
        body = r.body
        assert body.count(b'"dtype":"U8"') == N_TENSORS, kind
        first = b'"model.layers.0000000.self_attn.q_proj.weight":{"dtype":"U8","shape":[1],'
        last = b'"model.layers.%07d.self_attn.q_proj.weight":{"dtype":"U8","shape":[1],' % (
            N_TENSORS - 1)
        assert first in body and last in body, kind
        if kind == "header":
            assert body.startswith(b'{"__metadata__":{"format":"pt"},' + first)
        else:
            assert re.match(rb'\{"name":"big","state":"ready","sharded":false,"tensor_count":%d,'
                            % N_TENSORS, body), body[:200]
    print("\n  " + "\n  ".join(figures))
    # Cached: the second GET renders nothing and adds nothing.
    before = proc_status(d.pid)["VmRSS"]
    t0 = time.monotonic()
    again = d.get("/v1/models/big/header")
    assert again.status == 200 and len(again.body) > 90 * MIB
    assert time.monotonic() - t0 < 3.0
    assert proc_status(d.pid)["VmRSS"] - before <= 16 * MIB


INDEX_ENTRIES = 1_070_000    # a ~91 MB model.safetensors.index.json


def wait_for_log(d, text, count, timeout=60):
    """Waits until the daemon's log holds `text` more than `count` times;
    returns the last line holding it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [l for l in d.log_tail(1 << 20).splitlines() if text in l]
        if len(lines) > count:
            return lines[-1]
        time.sleep(0.02)
    raise AssertionError(f"no new {text!r} in the log within {timeout}s:\n{d.log_tail()}")


def test_rescan_of_a_big_index_is_bounded():
    """Every rescan reads every index again. The index here maps 1.07M
    tensors (91 MB); its shards hold only a few of them, so the model is
    invalid (tensor_not_in_shard) once the whole index has been read, and
    what a rescan costs is the index: the file read plus the parse, about
    twice its size, not a tree of it (+300 MiB and 5 s before)."""
    base = tempfile.mkdtemp(prefix="tensord-bigidx-")
    models = os.path.join(base, "models")
    size = gen_models.make_big_index_model(os.path.join(models, "sharded"), INDEX_ENTRIES, held=4)
    assert 88_000_000 < size < 100_000_000
    d = tdutil.Daemon(models, base)
    try:
        d.start()
        m = d.json("/v1/models/sharded")
        assert m["state"] == "invalid" and m["error"]["code"] == "tensor_not_in_shard", m["error"]
        assert "model.layers.0000004.mlp.gate_proj.weight" in m["error"]["message"]
        figures = []
        for _ in range(2):
            seen = len([l for l in d.log_tail(1 << 20).splitlines() if "reloaded" in l])
            before = proc_status(d.pid)["VmRSS"]
            with PeakRss(d.pid) as p:
                t0 = time.monotonic()
                os.kill(d.pid, signal.SIGHUP)
                line = wait_for_log(d, "reloaded", seen)
                took = time.monotonic() - t0
            after = rss_within(d.pid, before + 32 * MIB)
            figures.append(f"rescan in {took:.2f} s ({line.split(' in ')[-1].strip()}), RSS "
                           f"{before / MIB:.0f} -> peak {p.peak / MIB:.0f} -> {after / MIB:.0f} MiB")
            assert p.peak - before <= 2.5 * size + 48 * MIB, figures[-1]
            assert after - before <= 32 * MIB, figures[-1]
            assert took < 3.0, figures[-1]
        print("\n  " + "\n  ".join(figures))
        assert d.json("/v1/models/sharded")["state"] == "invalid"
    finally:
        try:
            d.stop_checked()
        finally:
            shutil.rmtree(base, ignore_errors=True)


# One malloc arena: glibc reserves 64 MiB of address space for each thread's
# arena when the thread first allocates, so a daemon's VmSize otherwise
# depends on which of its threads happened to allocate by then (the idle
# measure and the limited run differed by hundreds of MB from one run to
# the next), and the room the limit leaves with it.
ONE_ARENA = ["env", "MALLOC_ARENA_MAX=1"]


def idle_vm_size(models, base):
    """VmSize of a daemon serving `models` once it is ready (no limit)."""
    d = tdutil.Daemon(models, base, prefix=ONE_ARENA)
    d.start()
    try:
        with open(f"/proc/{d.pid}/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmSize:"))
    finally:
        d.stop_checked()


@pytest.mark.parametrize("room_mib", [300, 500])
def test_address_space_limit_never_aborts(room_mib):
    """A 98 MB header of 505,000 tensors of 64 dimensions needs ~400 MB to
    read. Under an address-space limit of the idle daemon's size plus 300 MB
    it cannot be read: the model is invalid with out_of_memory (this
    aborted). With 500 MB (~700 MB in all here) it is read, but its
    documents (~125 MB each) do not fit: 503 out_of_memory (a 200 with a
    53 KB cut-down description before, or 500 after a minute). Either way
    the daemon stays up, other models are served, and a rescan under the
    limit does not take it down either."""
    base = tempfile.mkdtemp(prefix="tensord-rlimit-")
    models = os.path.join(base, "models")
    small = gen_models.write_safetensors(os.path.join(models, "small", "model.safetensors"),
                                         [("w", "U8", (4,), b"\x01\x02\x03\x04")])
    assert small
    baseline = idle_vm_size(models, base)
    n = gen_models.make_many_tensors(os.path.join(models, "big", "model.safetensors"), 505_000,
                                     shape=(1,) * 64, fmt="t%07d")
    assert 97_000_000 < n < 100_000_000
    limit = baseline + room_mib * MIB
    d = tdutil.Daemon(models, base, prefix=ONE_ARENA + ["prlimit", f"--as={limit}", "--"])
    try:
        d.start()
        for round_ in range(2):
            listing = {m["name"]: m for m in d.json("/v1/models")["models"]}
            big = listing["big"]
            assert listing["small"]["state"] == "ready"
            r = d.get("/v1/models/small/tensors/w")
            assert r.status == 200 and r.body == b"\x01\x02\x03\x04"
            if big["state"] == "invalid":
                assert big["error"]["code"] == "out_of_memory", big
                assert "model.safetensors: not enough memory" in big["error"]["message"], big
            else:
                assert big["state"] == "ready" and big["tensors"] == 505_000, big
                for path in ("/v1/models/big", "/v1/models/big/header"):
                    r = d.get(path)
                    assert r.status in (200, 503), (path, r.status, r.body[:300])
                    if r.status == 503:
                        assert r.json()["error"]["code"] == "out_of_memory"
                        assert r.header("Retry-After")
                    else:  # whole, never cut short
                        assert r.body.count(b'"dtype":"U8"') == 505_000, (path, len(r.body))
            assert d.alive(), d.log_tail()
            if round_ == 0:  # once more after a rescan under the same limit
                seen = len([l for l in d.log_tail(1 << 20).splitlines() if "reloaded" in l])
                os.kill(d.pid, signal.SIGHUP)
                wait_for_log(d, "reloaded", seen)
        if room_mib == 300:
            assert big["state"] == "invalid", "the header fitted in 300 MB: the test needs a bigger one"
    finally:
        try:
            d.stop_checked()
        finally:
            shutil.rmtree(base, ignore_errors=True)
