"""Persistent connections: many requests of different kinds on one socket."""
import http.client

from tdutil import MANIFEST, slice_query, tensor_url


def test_keepalive_twenty_requests(daemon):
    info = MANIFEST.models["sharded"]
    shard = "model-00002-of-00003.safetensors"
    emb = MANIFEST["sharded"]["model.embed_tokens.weight"].data
    reqs = [
        ("GET", "/v1/models", {}, 200, None),
        ("GET", "/v1/models/sharded", {}, 200, None),
        ("GET", "/v1/models/sharded/header", {}, 200, None),
        ("GET", tensor_url("sharded", "model.embed_tokens.weight"), {}, 200, emb),
        ("HEAD", tensor_url("sharded", "model.embed_tokens.weight"), {}, 200, b""),
        ("GET", tensor_url("sharded", "model.embed_tokens.weight"), {"Range": "bytes=4-11"}, 206,
         emb[4:12]),
        ("GET", tensor_url("sharded", "model.embed_tokens.weight", slice_query("2:4")), {}, 200,
         emb[2 * 32:4 * 32]),
        ("GET", tensor_url("dtype-f32", "vec", "format=npy"), {}, 200, None),
        ("GET", tensor_url("dtype-f32", "vec", "format=safetensors"), {}, 200, None),
        ("GET", f"/v1/models/sharded/files/{shard}", {}, 200, info.files[shard]),
        ("HEAD", f"/v1/models/sharded/files/{shard}", {}, 200, b""),
        ("GET", f"/v1/models/sharded/files/{shard}/header", {}, 200, None),
        ("GET", f"/v1/models/sharded/files/{shard}", {"Range": "bytes=0-3,8-9"}, 206, None),
        ("GET", "/v1/models/no-such-model", {}, 404, None),
        ("GET", tensor_url("sharded", "no.such.tensor"), {}, 404, None),
        ("GET", tensor_url("dtype-f32", "vec", slice_query("99")), {}, 400, None),
        ("GET", tensor_url("sharded", "model.embed_tokens.weight"),
         {"Range": "bytes=99999-"}, 416, None),
        ("GET", "/healthz", {}, 200, None),
        ("GET", "/v1/metrics", {}, 200, None),
        ("GET", tensor_url("dtype-u8", "block.4d"), {}, 200, MANIFEST["dtype-u8"]["block.4d"].data),
    ]
    assert len(reqs) == 20
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=30)
    conn.connect()
    sock = conn.sock
    port = sock.getsockname()[1]
    try:
        for i, (method, url, headers, status, body) in enumerate(reqs):
            conn.request(method, url, headers=headers)
            r = conn.getresponse()
            data = r.read()
            what = f"request {i}: {method} {url} {headers}"
            assert r.status == status, f"{what}: {r.status} {data[:300]!r}"
            if body is not None:
                assert data == body, what
            assert (r.getheader("Connection") or "").lower() != "close", f"{what}: Connection: close"
            assert not r.will_close, f"{what}: the response ends the connection"
            assert conn.sock is sock, f"{what}: a new socket was opened"
            assert sock.getsockname()[1] == port, f"{what}: local port changed"
    finally:
        conn.close()
