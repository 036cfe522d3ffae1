"""Compressed documents (issue 34, item 2): the JSON, XML and text the daemon
writes go out as gzip to a client that accepts it, above a kilobyte, with
Vary: Accept-Encoding and an ETag of their own, the model documents from
the copy compressed once when they were rendered; byte bodies (files,
tensors, a file's header bytes) never. Each answer is inflated with zlib
and compared with the identity answer, and read by the clients that ask
for gzip on their own (urllib3, huggingface_hub's httpx, Prometheus' Go
client is out of reach: `promtool` is in tests/ops)."""
import gzip
import json
import os
import shutil
import tempfile

import pytest

import gen_models
import tdutil

GZ = {"Accept-Encoding": "gzip, deflate, br, zstd"}


@pytest.fixture(scope="module")
def daemon():
    base = tempfile.mkdtemp(prefix="tensord-gzip-")
    root = os.path.join(base, "models")
    # 400 tensors: a description of some 60 KB
    tensors = [(f"model.layers.{i // 4}.mlp.w{i % 4}.weight", "F32", [2, 2],
                bytes(range(i % 200, i % 200 + 16))) for i in range(400)]
    gen_models.write_safetensors(os.path.join(root, "many", "model.safetensors"), tensors)
    for k in range(6):  # a model list over a kilobyte
        gen_models.write_safetensors(os.path.join(root, f"small-{k}.safetensors"),
                                     [("w", "F32", [1], b"\0" * 4)])
    os.makedirs(os.path.join(root, "many", "notes"))
    for k in range(20):  # a repo document and a tree over a kilobyte
        with open(os.path.join(root, "many", f"note-{k:02d}.txt"), "w") as f:
            f.write(f"note {k}\n")
    with open(os.path.join(root, "many", "config.json"), "w") as f:
        json.dump({"layers": [{"n": i} for i in range(300)]}, f)  # a JSON *file*: bytes
    os.makedirs(os.path.join(base, "work"))
    d = tdutil.Daemon(root, os.path.join(base, "work"), []).start()
    d.wait_hashed(60)
    yield d
    d.stop_checked()
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("path", ["/v1/models/many", "/v1/models/many/header", "/v1/models",
                                  "/metrics", "/v1/metrics", "/api/models/many",
                                  "/api/models/many/tree/main", "/s3/many?list-type=2",
                                  "/ui/app.js", "/ui/"])
def test_documents_compressed(daemon, path):
    plain = daemon.get(path)
    packed = daemon.get(path, GZ)
    assert plain.status == packed.status == 200, (plain, packed)
    assert plain.header("Content-Encoding") is None
    assert packed.header("Content-Encoding") == "gzip"
    assert "Accept-Encoding" in plain.header("Vary") and "Accept-Encoding" in packed.header("Vary")
    assert packed.header("Accept-Ranges") is None
    body = gzip.decompress(packed.body)
    if path == "/metrics":  # counters move between the two requests
        assert body.split(b"\n")[0] == plain.body.split(b"\n")[0]
    elif path == "/v1/metrics":
        assert json.loads(body).keys() == json.loads(plain.body).keys()
    else:
        assert body == plain.body
    # hashes (commits, blob ids) do not compress; names and structure do
    assert len(packed.body) < len(plain.body) * 0.6, (len(packed.body), len(plain.body))
    assert int(packed.header("Content-Length")) == len(packed.body)
    if path.startswith("/s3/"):
        return  # HEAD of a bucket is HeadBucket, another operation
    # HEAD says the same length
    head = daemon.head(path, GZ)
    assert head.header("Content-Encoding") == "gzip"
    if not path.endswith("metrics"):
        assert int(head.header("Content-Length")) == len(packed.body)


def test_each_form_has_its_etag(daemon):
    plain = daemon.get("/v1/models/many")
    packed = daemon.get("/v1/models/many", GZ)
    etag, etag_gz = plain.header("ETag"), packed.header("ETag")
    assert etag_gz == etag[:-1] + '-gzip"'
    # the cached compressed form is the same bytes every time
    assert daemon.get("/v1/models/many", GZ).body == packed.body
    for sent, headers, status in ((etag_gz, GZ, 304), (etag, {}, 304),
                                  (etag, GZ, 200), (etag_gz, {}, 200)):
        r = daemon.get("/v1/models/many", dict(headers, **{"If-None-Match": sent}))
        assert r.status == status, (sent, headers, r)
        assert "Accept-Encoding" in r.header("Vary")
        if status == 304:
            assert r.header("ETag") == sent


def test_byte_bodies_never(daemon):
    for path in ("/v1/models/many/files/config.json", "/many/resolve/main/config.json",
                 "/v1/models/many/files/model.safetensors",
                 "/v1/models/many/files/model.safetensors/header",
                 "/v1/models/many/tensors/model.layers.0.mlp.w0.weight", "/s3/many/config.json"):
        r = daemon.get(path, GZ)
        if r.status == 302:
            r = daemon.get(r.header("Location"), GZ)
        assert r.status == 200 and r.header("Content-Encoding") is None, (path, r)
        assert "Accept-Encoding" not in (r.header("Vary") or ""), path


def test_range_and_refusals_read_the_stored_bytes(daemon):
    plain = daemon.get("/v1/models/many")
    r = daemon.get("/v1/models/many", dict(GZ, Range="bytes=0-9"))
    assert r.status == 206 and r.body == plain.body[:10] and r.header("Content-Encoding") is None
    for ae in ("identity", "gzip;q=0", "*;q=0", "br, zstd", "gzip;q=0, *"):
        r = daemon.get("/v1/models/many", {"Accept-Encoding": ae})
        assert r.header("Content-Encoding") is None and r.body == plain.body, ae
    r = daemon.get("/v1/models/many", {"Accept-Encoding": "x-gzip"})
    assert r.header("Content-Encoding") == "gzip"
    # small documents go out as they are
    r = daemon.get("/healthz", GZ)
    assert r.header("Content-Encoding") is None and r.header("Vary") is None


def test_clients_decode_it(daemon, tmp_path):
    """urllib3 (what the Python client and boto3 use) and huggingface_hub
    (httpx) ask for gzip by themselves and read the documents."""
    urllib3 = pytest.importorskip("urllib3")
    r = urllib3.PoolManager().request("GET", f"http://127.0.0.1:{daemon.port}/v1/models/many",
                                      headers=urllib3.make_headers(accept_encoding=True))
    assert r.headers["Content-Encoding"] == "gzip"
    assert json.loads(r.data)["tensor_count"] == 400
    hf = pytest.importorskip("huggingface_hub")
    api = hf.HfApi(endpoint=f"http://127.0.0.1:{daemon.port}", token=False)
    info = api.model_info("many", files_metadata=True)
    assert {"config.json", "model.safetensors", "note-07.txt"} <= {s.rfilename for s in info.siblings}
