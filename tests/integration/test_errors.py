"""Error answers, methods, and paths that try to leave the models root."""
import socket

import pytest

from tdutil import (EVIL_FILE_LINK, EVIL_REL_LINK, MANIFEST, OUTSIDE_DIR_LINK, OUTSIDE_FILE_LINK,
                    assert_error, q, slice_query, tensor_url)

with open("/etc/passwd", "rb") as _f:
    PASSWD = _f.read()
SECRET_MARKERS = [b"root:x:", b"root:*:", b"SECR", b'"secret": true']


def assert_no_leak(body, what):
    for m in SECRET_MARKERS:
        assert m not in body, f"{what}: body contains {m!r}"
    if PASSWD:
        assert PASSWD[:40] not in body, f"{what}: body contains /etc/passwd"


def test_unknown_model(daemon):
    for url in ["/v1/models/no-such-model", "/v1/models/no-such-model/header",
                tensor_url("no-such-model", "w"), "/v1/models/no-such-model/files/x.safetensors",
                "/v1/models/org/no-such"]:
        assert_error(daemon.get(url), 404, "model_not_found", url)


def test_unknown_tensor(daemon):
    for url in [tensor_url("dtype-f32", "nope"), tensor_url("sharded", "model.embed_tokens"),
                tensor_url("dtype-f32", "vec ", "format=npy"), tensor_url("org/name", "W")]:
        assert_error(daemon.get(url), 404, "tensor_not_found", url)


def test_unknown_file(daemon):
    for url in ["/v1/models/with-config/files/nope.json",
                "/v1/models/with-config/files/nope.json/header",
                "/v1/models/sharded/files/model-00004-of-00003.safetensors"]:
        assert_error(daemon.get(url), 404, "file_not_found", url)


def test_unknown_endpoint(daemon):
    for url in ["/v2/models", "/v1/nothing", "/v1/models/sharded/tensorz/x", "/"]:
        r = daemon.get(url)
        assert_error(r, 404, None, url)


@pytest.mark.parametrize("model", list(MANIFEST.invalid))
def test_invalid_model_data_is_409(daemon, model):
    for name in ("w", "a", "b"):
        assert_error(daemon.get(tensor_url(model, name)), 409, "model_invalid", f"{model}:{name}")


@pytest.mark.parametrize("query", ["foo=1", "slice=0&bogus=2", "Slice=0", "format=npy&x"])
def test_unknown_query_parameter(daemon, query):
    r = daemon.get(tensor_url("dtype-f32", "vec", query))
    assert_error(r, 400, "bad_parameter", query)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
@pytest.mark.parametrize("url", ["/v1/models", "/v1/models/sharded", "/v1/models/sharded/header",
                                 tensor_url("dtype-f32", "vec"),
                                 "/v1/models/with-config/files/config.json"])
def test_method_not_allowed(daemon, method, url):
    r = daemon.request(method, url, body=b"" if method in ("POST", "PUT", "PATCH") else None)
    err = assert_error(r, 405, "method_not_allowed", f"{method} {url}")
    allow = [m.strip() for m in (r.header("Allow") or "").split(",")]
    assert "GET" in allow and "HEAD" in allow, f"Allow: {r.header('Allow')!r}"
    assert err


TRAVERSALS = [
    "/v1/models/../../etc/passwd",
    "/v1/models/%2e%2e/%2e%2e/etc/passwd",
    "/v1/models/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
    "/v1/models/..%2f..%2fetc%2fpasswd",
    "/v1/models/%2fetc%2fpasswd",
    "/v1/models/%2fetc/files/passwd",
    "/v1/models/with-config/../../../etc/passwd",
    "/v1/models/with-config/files/../../../../etc/passwd",
    "/v1/models/with-config/files/..%2f..%2f..%2fetc%2fpasswd",
    "/v1/models/with-config/files/%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/v1/models/with-config/files/%2fetc%2fpasswd",
    "/v1/models/with-config/files/" + q("/etc/passwd"),
    "/v1/models/with-config/files/..",
    "/v1/models/with-config/files/%2e%2e",
    "/v1/models/with-config/files/%252e%252e%252fetc%252fpasswd",
    "/v1/models/with-config/files/config.json%00",
    "/v1/models/with-config/files/%2e%2e%2fwith-config%2fconfig.json",
    "/v1/models/%2e%2e%2foutside%2fsecret/files/config.json",
    "/v1/models/with-config/files/evil",
    "/v1/models/with-config/files/rel-evil.json",
    "/v1/models/with-config/files/%2e%2e%2f%2e%2e%2foutside%2fsecret%2fconfig.json",
    "/v1/models/outside-link",
    "/v1/models/outside-link/files/config.json",
    "/v1/models/outside-link/files/model.safetensors",
    "/v1/models/outside-link/tensors/secret",
    "/v1/models/leak",
    "/v1/models/leak/tensors/secret",
    "/v1/models/leak/files/leak.safetensors",
    "/v1/models/with-config/tensors/..%2f..%2f..%2fetc%2fpasswd",
    "/v1/models/with-config/files/%5c..%5c..%5cetc%5cpasswd",
    "/v1/models/with-config/files/..\\..\\..\\etc\\passwd",
]


@pytest.mark.parametrize("url", TRAVERSALS)
def test_traversal_refused(daemon, url):
    r = daemon.get(url)
    assert r.status in (400, 404), f"{url}: {r!r}"
    assert_no_leak(r.body, url)
    assert_error(r, r.status, None, url)


def test_symlinks_outside_not_listed(daemon):
    names = {m["name"] for m in daemon.json("/v1/models")["models"]}
    assert OUTSIDE_DIR_LINK not in names
    assert OUTSIDE_FILE_LINK[:-len(".safetensors")] not in names
    files = {f["name"] for f in daemon.json("/v1/models/with-config")["files"]}
    assert EVIL_FILE_LINK[1] not in files and EVIL_REL_LINK[1] not in files


RAW_PATHS = [
    b"/v1/models/../../../etc/passwd",
    b"/../../../../etc/passwd",
    b"/v1/../../etc/passwd",
    b"//etc/passwd",
    b"/v1/models//etc/passwd",
    b"/v1/models/with-config/files//etc/passwd",
    b"/v1/models/with-config/files/..%2F..%2F..%2Fetc%2Fpasswd",
    b"/v1/models/with-config/files/%",
    b"/v1/models/with-config/files/%zz",
    b"/v1/models/%c0%ae%c0%ae/%c0%ae%c0%ae/etc/passwd",
    b"/v1/models/with-config/files/evil",
    b"../../etc/passwd",
    b"/v1/models/with-config/files/./evil",
    b"/v1/models/./../etc/passwd",
]


def raw_request(port, data, timeout=10):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                c = s.recv(65536)
            except socket.timeout:
                break
            if not c:
                break
            chunks.append(c)
        return b"".join(chunks)


@pytest.mark.parametrize("path", RAW_PATHS)
def test_raw_socket_odd_paths(daemon, path):
    resp = raw_request(daemon.port, b"GET " + path + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert resp.startswith(b"HTTP/1."), f"{path!r}: {resp[:200]!r}"
    status = int(resp.split(b" ", 2)[1])
    assert status in (400, 404), f"{path!r}: {resp[:300]!r}"
    assert_no_leak(resp, repr(path))


def test_raw_socket_absolute_form(daemon):
    resp = raw_request(daemon.port, b"GET http://127.0.0.1/etc/passwd HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                    b"Connection: close\r\n\r\n")
    if resp:
        status = int(resp.split(b" ", 2)[1])
        assert status in (400, 404), resp[:300]
    assert_no_leak(resp, "absolute-form")


def test_raw_socket_daemon_survives_garbage(daemon):
    for junk in [b"\x00\x01\x02\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                 b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n"]:
        raw_request(daemon.port, junk, timeout=3)
    assert daemon.get("/healthz").status == 200


def test_error_bodies_are_json(daemon):
    for url, status in [("/v1/models/none", 404), (tensor_url("dtype-f32", "vec", slice_query("9")), 400),
                        (tensor_url("dtype-f32", "vec", "format=zip"), 400),
                        (tensor_url("bad-json", "w"), 409)]:
        assert_error(daemon.get(url), status, None, url)
    h = daemon.head("/v1/models/none")
    assert h.status == 404 and h.body == b""
