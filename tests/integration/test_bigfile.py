"""A 2 GiB sparse model served by its own daemon: ranges and column slices are
streamed without the daemon's resident memory growing with the body."""
import http.client
import os
import shutil
import tempfile
import threading

import pytest

import tdutil
from tdutil import gen_models, slice_query, tensor_url

ROWS, COLS = 32768, 65536          # U8: 2 GiB of data, all a hole
RSS_LIMIT_KIB = 200 * 1024

pytestmark = pytest.mark.slow


@pytest.fixture
def big_daemon():
    base = tempfile.mkdtemp(prefix="tensord-big-")
    models = os.path.join(base, "models")
    size = gen_models.make_big(os.path.join(models, "big.safetensors"), ROWS, COLS, "U8")
    d = tdutil.Daemon(models, base)
    try:
        d.start()
    except RuntimeError as e:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(str(e), pytrace=False)
    d.file_size = size
    yield d
    try:
        d.stop_checked()
    finally:
        shutil.rmtree(base, ignore_errors=True)


class RssSampler(threading.Thread):
    def __init__(self, daemon):
        super().__init__(daemon=True)
        self.d = daemon
        self.peak = 0
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, self.d.rss_kib())
            except (OSError, RuntimeError):
                pass
            self.stop.wait(0.02)


def stream(daemon, url, headers=None, chunk=1 << 20):
    """GET url, counting the body without keeping it. Returns (response, count,
    nonzero bytes seen, first 64 bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=120)
    try:
        conn.request("GET", url, headers=headers or {})
        r = conn.getresponse()
        n = nonzero = 0
        head = b""
        while True:
            b = r.read(chunk)
            if not b:
                break
            if len(head) < 64:
                head += b[:64 - len(head)]
            n += len(b)
            nonzero += len(b) - b.count(0)
        return r, n, nonzero, head
    finally:
        conn.close()


def check_rss(daemon, sampler):
    sampler.stop.set()
    sampler.join()
    peak = max(sampler.peak, daemon.rss_kib())
    if os.environ.get("TENSORD_SANITIZED"):
        return
    assert peak < RSS_LIMIT_KIB, f"daemon VmRSS peaked at {peak // 1024} MiB"


def test_big_model_listed(big_daemon):
    j = big_daemon.json("/v1/models/big")
    assert j["tensors"]["w"]["shape"] == [ROWS, COLS]
    assert j["tensors"]["w"]["nbytes"] == ROWS * COLS


def test_big_range_from_the_middle(big_daemon):
    sampler = RssSampler(big_daemon)
    sampler.start()
    total = ROWS * COLS
    first = total // 2 - (32 << 20)
    last = first + (64 << 20) - 1
    r, n, nonzero, _ = stream(big_daemon, tensor_url("big", "w"), {"Range": f"bytes={first}-{last}"})
    assert r.status == 206
    assert r.getheader("Content-Range") == f"bytes {first}-{last}/{total}"
    assert n == 64 << 20
    assert nonzero == 0
    # The same through the file endpoint.
    r, n, nonzero, _ = stream(big_daemon, "/v1/models/big/files/big.safetensors",
                              {"Range": f"bytes={first}-{last}"})
    assert r.status == 206 and n == 64 << 20 and nonzero == 0
    check_rss(big_daemon, sampler)


def test_big_column_slice(big_daemon):
    sampler = RssSampler(big_daemon)
    sampler.start()
    r, n, nonzero, head = stream(big_daemon, tensor_url("big", "w", slice_query(":,0:64")))
    assert r.status == 200
    assert r.getheader("X-Tensor-Shape") == f"{ROWS},64"
    assert n == ROWS * 64
    assert nonzero == 0 and head == bytes(64)
    check_rss(big_daemon, sampler)


def test_big_strided_row_slice(big_daemon):
    sampler = RssSampler(big_daemon)
    sampler.start()
    r, n, nonzero, _ = stream(big_daemon, tensor_url("big", "w", slice_query("1000:3000:2,100:")))
    assert r.status == 200
    assert n == 1000 * (COLS - 100)
    assert nonzero == 0
    check_rss(big_daemon, sampler)


def test_big_whole_tensor(big_daemon):
    sampler = RssSampler(big_daemon)
    sampler.start()
    r, n, nonzero, _ = stream(big_daemon, tensor_url("big", "w"), chunk=4 << 20)
    assert r.status == 200
    assert n == ROWS * COLS
    assert nonzero == 0
    check_rss(big_daemon, sampler)
