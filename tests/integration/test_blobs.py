"""GET/HEAD /v1/blobs/sha256:{hex}: any served file by its content's
SHA-256 (hashlib computes the oracle), with Range, immutable caching, the
digest as ETag, and 404 until the daemon knows a file with that hash."""
import hashlib
import os
import shutil
import subprocess
import tempfile
import time

import pytest

import tdutil


def blob_url(digest):
    return f"/v1/blobs/sha256:{digest}"


@pytest.fixture(scope="module")
def files(models_root):
    """{sha256 hex: bytes} of every regular file below the models root (the
    served ones: symlinks and hidden names left out)."""
    root = models_root[0]
    out = {}
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")
                       and not os.path.islink(os.path.join(dirpath, d))]
        for n in names:
            p = os.path.join(dirpath, n)
            if n.startswith(".") or os.path.islink(p) or not os.path.isfile(p):
                continue
            data = open(p, "rb").read()
            out[hashlib.sha256(data).hexdigest()] = data
    return out


def test_every_served_file_by_its_digest(daemon, files):
    served = daemon.json("/v1/models")
    assert served["hashing"]["files_known"] == served["hashing"]["files"]
    hits = 0
    for digest, data in files.items():
        r = daemon.get(blob_url(digest))
        if r.status == 404:
            continue  # a file no model or repo serves (an invalid one's siblings, ...)
        hits += 1
        assert r.status == 200, r
        assert r.body == data
        assert r.header("ETag") == f'"sha256:{digest}"'
        assert r.header("Docker-Content-Digest") == f"sha256:{digest}"
        assert r.header("Cache-Control") == "public, max-age=31536000, immutable"
        assert r.header("Content-Type") == "application/octet-stream"
        assert r.header("Accept-Ranges") == "bytes"
        assert r.header("Last-Modified") is None  # nothing but the content: replicas agree
        h = daemon.head(blob_url(digest))
        assert h.status == 200 and h.body == b""
        assert int(h.header("Content-Length")) == len(data)
    # Every safetensors file of a valid model is served.
    assert hits >= len(tdutil.valid_models())


def test_ranges_and_conditionals(daemon, files):
    digest, data = max(files.items(), key=lambda kv: len(kv[1]))
    assert daemon.get(blob_url(digest)).status == 200
    n = len(data)
    r = daemon.get(blob_url(digest), {"Range": "bytes=5-20"})
    assert r.status == 206 and r.body == data[5:21]
    assert r.header("Content-Range") == f"bytes 5-20/{n}"
    r = daemon.get(blob_url(digest), {"Range": "bytes=-7"})
    assert r.status == 206 and r.body == data[-7:]
    r = daemon.get(blob_url(digest), {"Range": f"bytes={n}-"})
    assert r.status == 416 and r.header("Content-Range") == f"bytes */{n}"
    etag = f'"sha256:{digest}"'
    r = daemon.get(blob_url(digest), {"Range": "bytes=1-2", "If-Range": etag})
    assert r.status == 206 and r.body == data[1:3]
    r = daemon.get(blob_url(digest), {"Range": "bytes=1-2", "If-Range": '"other"'})
    assert r.status == 200 and r.body == data
    r = daemon.get(blob_url(digest), {"If-None-Match": etag})
    assert r.status == 304 and r.body == b""


def test_curl_resumes_a_blob(daemon, files, tmp_path):
    """curl -C - (what a fetcher does after a cut) ends byte-exact."""
    digest, data = max(files.items(), key=lambda kv: len(kv[1]))
    out = tmp_path / "blob"
    out.write_bytes(data[: len(data) // 3])
    url = f"http://127.0.0.1:{daemon.port}{blob_url(digest)}"
    subprocess.run(["curl", "-sf", "-C", "-", "-o", str(out), url], check=True, timeout=30)
    assert hashlib.sha256(out.read_bytes()).hexdigest() == digest


def test_unknown_and_malformed_digests(daemon):
    r = daemon.get(blob_url("0" * 64))
    tdutil.assert_error(r, 404, "blob_not_found")
    for bad in ("sha256:" + "A" * 64, "sha256:" + "0" * 63, "sha256:" + "0" * 65, "sha256",
                "0" * 64, "sha256:" + "g" * 64, ":" + "0" * 64, "SHA256:" + "0" * 64):
        r = daemon.get(f"/v1/blobs/{tdutil.q(bad)}")
        tdutil.assert_error(r, 400, "bad_digest", bad)
    # Another algorithm is well formed: nothing is stored under it.
    tdutil.assert_error(daemon.get("/v1/blobs/sha512:" + "0" * 128), 404, "blob_not_found")
    tdutil.assert_error(daemon.get(blob_url("0" * 64) + "?x=1"), 400, "bad_parameter")
    r = daemon.request("DELETE", blob_url("0" * 64))
    assert r.status == 405 and r.header("Allow") == "GET, HEAD"


def test_a_new_file_is_found_once_hashed(tmp_path):
    """404 until the hasher has read a file written after the start; then the
    bytes (the index catches up without a restart), and a changed file's old
    digest is gone."""
    root = tmp_path / "models"
    (root / "m").mkdir(parents=True)
    tdutil.gen_models.write_safetensors(str(root / "m" / "model.safetensors"),
                                        [("w", "U8", (4,), b"abcd")], {"format": "pt"})
    d = tdutil.Daemon(str(root), str(tmp_path)).start()
    try:
        d.wait_hashed()
        data = os.urandom(100000)
        digest = hashlib.sha256(data).hexdigest()
        assert d.get(blob_url(digest)).status == 404
        (root / "m" / "extra.bin").write_bytes(data)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = d.get(blob_url(digest))
            if r.status == 200:
                break
            assert r.status == 404, r
            time.sleep(0.1)
        assert r.status == 200 and r.body == data
        (root / "m" / "extra.bin").write_bytes(b"other bytes")
        deadline = time.monotonic() + 20
        while d.get(blob_url(digest)).status != 404:
            assert time.monotonic() < deadline, "the old digest is still served"
            time.sleep(0.1)
    finally:
        d.stop_checked()
