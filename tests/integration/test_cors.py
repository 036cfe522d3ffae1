"""CORS (issue 23, item 7): scripts on another origin read tensord's answers
when cors_origins lets them. Plain HTTP checks the preflight and the headers
against the Fetch standard's rules; headless Chromium (Debian's `chromium`)
runs fetch() from a page served on a second port, ranges, redirects, a POST
with JSON and bearer tokens included, and from an origin not in the list,
where every call must fail as a browser fails it."""
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading

import pytest

import hubrepos
import tdutil

TOKEN = "cors-read-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXPOSED = ("ETag", "Content-Range", "Content-Length", "Content-Disposition", "Accept-Ranges",
           "X-Repo-Commit", "X-Linked-Etag", "X-Linked-Size", "X-Error-Code", "X-Error-Message",
           "Location")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def tree():
    base = tempfile.mkdtemp(prefix="tensord-cors-")
    root = os.path.join(base, "models")
    files = hubrepos.make_repos(root, big_bytes=1 << 10)
    with open(os.path.join(base, "tokens"), "w") as f:
        f.write(f"read {TOKEN}\n")
    yield base, root, files
    shutil.rmtree(base, ignore_errors=True)


def start(tree, name, origins, auth=False):
    base, root, files = tree
    work = os.path.join(base, name)
    os.makedirs(work, exist_ok=True)
    args = ["--cors-origins", origins] if origins is not None else []
    if auth:
        args += ["--auth-token-file", os.path.join(base, "tokens")]
    d = tdutil.Daemon(root, work, args, probe_headers=AUTH if auth else None)
    d.start().wait_hashed(60)
    return d


def expose_list(r):
    return [h.strip() for h in (r.header("Access-Control-Expose-Headers") or "").split(",")]


def preflight(d, path, origin, method="GET", headers="range, authorization"):
    return d.request("OPTIONS", path, {"Origin": origin, "Access-Control-Request-Method": method,
                                       "Access-Control-Request-Headers": headers})


def test_off_by_default(tree):
    d = start(tree, "off", None)
    try:
        r = d.get("/v1/models", {"Origin": "http://a.test"})
        assert r.status == 200
        assert not [k for k in r.headers if k.lower().startswith("access-control")]
        assert "Origin" not in (r.header("Vary") or "")  # Accept-Encoding only
        r = preflight(d, "/v1/models", "http://a.test")
        assert r.status == 405 and r.header("Access-Control-Allow-Origin") is None
    finally:
        d.stop_checked()


def test_listed_origins(tree):
    files = tree[2]
    d = start(tree, "list", "http://a.test:8080,https://b.test", auth=True)
    try:
        sha = hubrepos.commit_of(files["org/sharded"])
        # Preflights: 204 before the token, the route's methods, our headers.
        for path, methods in (("/v1/models/single/tensors/wte.weight", "GET, HEAD"),
                              ("/v1/models/single/fetch", "GET, HEAD, POST"),
                              ("/v1/models/single/gpu", "GET, HEAD, POST, DELETE"),
                              (f"/api/models/org/sharded/paths-info/{sha}", "POST"),
                              ("/org/sharded/resolve/main/config.json", "GET, HEAD")):
            r = preflight(d, path, "https://b.test")
            assert r.status == 204 and r.body == b"", (path, r)
            assert r.header("Access-Control-Allow-Origin") == "https://b.test"
            assert r.header("Access-Control-Allow-Credentials") == "true"
            assert r.header("Access-Control-Allow-Methods") == methods, path
            assert r.header("Access-Control-Allow-Headers") == "range, authorization"
            assert r.header("Vary") == "Origin"
        # Not a preflight to answer: another origin, no request method, CORS
        # spelling of the origin that differs (a port, a scheme, a slash).
        for origin in ("http://evil.test", "http://a.test", "https://a.test:8080",
                       "https://b.test/", "null"):
            r = preflight(d, "/v1/models", origin)
            assert r.status != 204 and r.header("Access-Control-Allow-Origin") is None, origin
        r = d.request("OPTIONS", "/v1/models", {"Origin": "https://b.test"})
        assert r.status == 405 and r.header("Allow") == "GET, HEAD"
        # Answers: the origin echoed with credentials, headers exposed, Vary.
        r = d.get(f"/org/sharded/resolve/{sha}/config.json",
                  dict(AUTH, Origin="http://a.test:8080", Range="bytes=0-3"))
        assert r.status == 206 and r.body == files["org/sharded"]["config.json"][:4]
        assert r.header("Access-Control-Allow-Origin") == "http://a.test:8080"
        assert r.header("Access-Control-Allow-Credentials") == "true"
        assert set(EXPOSED) <= set(expose_list(r))
        assert r.header("Vary") == "Origin"
        # errors too (a script reads X-Error-Code), and the redirect
        for path, headers, status in (("/api/models/nope", AUTH, 404),
                                      ("/api/models/single", {}, 401),
                                      ("/org/sharded/resolve/main/config.json", AUTH, 302)):
            r = d.get(path, dict(headers, Origin="https://b.test"))
            assert r.status == status, r
            assert r.header("Access-Control-Allow-Origin") == "https://b.test", path
            assert "X-Error-Code" in expose_list(r) and "Location" in expose_list(r)
        # a 304 keeps them
        etag = d.get("/v1/models/single", AUTH).header("ETag")
        r = d.get("/v1/models/single", dict(AUTH, Origin="https://b.test",
                                             **{"If-None-Match": etag}))
        assert r.status == 304 and r.header("Access-Control-Allow-Origin") == "https://b.test"
        # another origin gets no grant, and every answer varies by Origin
        for headers in ({"Origin": "http://evil.test"}, {}):
            r = d.get("/v1/models", dict(AUTH, **headers))
            assert r.status == 200 and r.header("Access-Control-Allow-Origin") is None
            assert r.header("Access-Control-Allow-Credentials") is None
            assert r.header("Vary") == "Accept-Encoding, Origin"  # one header
    finally:
        d.stop_checked()


def test_any_origin_without_credentials(tree):
    d = start(tree, "any", "*")
    try:
        for headers in ({"Origin": "http://whoever.test"}, {}):
            r = d.get("/v1/models/single", headers)
            assert r.status == 200
            assert r.header("Access-Control-Allow-Origin") == "*"
            assert r.header("Access-Control-Allow-Credentials") is None
            assert "Origin" not in r.header("Vary")  # the same answer for every origin
            assert set(EXPOSED) <= set(expose_list(r))
        r = preflight(d, "/v1/models/single", "http://whoever.test")
        assert r.status == 204 and r.header("Access-Control-Allow-Origin") == "*"
        assert r.header("Access-Control-Allow-Credentials") is None
    finally:
        d.stop_checked()


@pytest.mark.parametrize("origins,why", [
    ("*,http://a.test", "must be its only entry"),
    ("http://a.test/", "no trailing '/'"),
    ("http://A.test", "lower case"),
    ("ftp://a.test", "http://HOST"),
    ("http://user@a.test", "no path"),
])
def test_bad_origins_stop_start_up(tree, origins, why):
    base, root, _ = tree
    p = subprocess.run([tdutil.tensord_bin(), "serve", "--models", root, "--listen",
                        "127.0.0.1:0", "--state-dir", os.path.join(base, "st-bad"),
                        "--ipc-socket", os.path.join(base, "bad.sock"),
                        "--cors-origins", origins], capture_output=True, text=True, timeout=20)
    assert p.returncode != 0 and "cors_origins" in p.stderr and why in p.stderr, p.stderr


# ---------------------------------------------------------------------------
# Chromium

PAGE = r"""<!doctype html><html><body><pre id="out">pending</pre><script>
const T = "http://127.0.0.1:%(port)d", AUTH = {Authorization: "Bearer %(token)s"};
const hex = b => Array.from(new Uint8Array(b)).map(x => x.toString(16).padStart(2, "0")).join("");
async function call(name, url, init) {
  try {
    const r = await fetch(T + url, init);
    const buf = await r.arrayBuffer();
    /* A document as its "sha", other bodies whole. */
    const body = (r.headers.get("content-type") || "").startsWith("application/json") &&
                 buf.byteLength > 200
               ? "json:" + JSON.stringify(JSON.parse(new TextDecoder().decode(buf)).sha)
               : hex(buf);
    const h = {};
    for (const k of ["content-range", "etag", "x-repo-commit", "x-error-code", "x-tensor-dtype",
                     "x-linked-size", "content-length", "accept-ranges"])
      if (r.headers.get(k) !== null) h[k] = r.headers.get(k);
    return [name, r.status, body, h, r.redirected];
  } catch (e) {
    return [name, "error", String(e)];
  }
}
(async () => {
  const out = [];
  out.push(await call("tensor range", "/v1/models/single/tensors/wte.weight",
                      {headers: {...AUTH, Range: "bytes=4-11"}}));
  out.push(await call("two ranges", "/v1/models/single/files/model.safetensors",
                      {headers: {...AUTH, Range: "bytes=0-7,600-607"}}));
  out.push(await call("info", "/api/models/org/sharded", {headers: AUTH}));
  out.push(await call("resolve main", "/org/sharded/resolve/main/config.json",
                      {headers: {...AUTH, Range: "bytes=0-7"}}));
  out.push(await call("resolve head", "/org/sharded/resolve/%(sha)s/model-00001-of-00002.safetensors",
                      {method: "HEAD", headers: AUTH}));
  out.push(await call("paths-info", "/api/models/org/sharded/paths-info/%(sha)s",
                      {method: "POST", headers: {...AUTH, "Content-Type": "application/json"},
                       body: JSON.stringify({paths: ["config.json"]})}));
  out.push(await call("missing", "/api/models/org/nope", {headers: AUTH}));
  out.push(await call("no token", "/api/models/org/sharded", {}));
  document.getElementById("out").textContent = "RESULT" + JSON.stringify(out) + "END";
})();
</script></body></html>
"""


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


def run_page(url):
    p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                        "--no-first-run", "--disable-extensions", "--user-data-dir=" +
                        tempfile.mkdtemp(prefix="tensord-chromium-"),
                        "--virtual-time-budget=20000", "--dump-dom", url],
                       capture_output=True, text=True, timeout=90)
    m = re.search(r'<pre id="out">RESULT(.*?)END</pre>', p.stdout, re.S)
    assert m, f"no result in the page (chromium exit {p.returncode}):\n{p.stdout[-2000:]}\n" \
              f"{p.stderr[-2000:]}"
    import html
    return {row[0]: row[1:] for row in json.loads(html.unescape(m.group(1)))}


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make deps)")
def test_chromium_fetch_from_another_origin(tree):
    base, root, files = tree
    pages = os.path.join(base, "pages")
    os.makedirs(pages, exist_ok=True)
    srv = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a, **k: _Quiet(*a, directory=pages, **k))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    page_port = srv.server_address[1]
    d = start(tree, "chromium", f"http://127.0.0.1:{page_port}", auth=True)
    try:
        sha = hubrepos.commit_of(files["org/sharded"])
        with open(os.path.join(pages, "page.html"), "w") as f:
            f.write(PAGE % {"port": d.port, "token": TOKEN, "sha": sha})
        got = run_page(f"http://127.0.0.1:{page_port}/page.html")
        st = files["single"]["model.safetensors"]
        hlen = int.from_bytes(st[:8], "little")
        cfg = files["org/sharded"]["config.json"]
        shard = files["org/sharded"]["model-00001-of-00002.safetensors"]
        # the tensor's bytes 4..11, read independently from the file
        wte = json.loads(st[8:8 + hlen])["wte.weight"]["data_offsets"][0] + 8 + hlen
        status, body, h, _ = got["tensor range"]
        assert status == 206 and bytes.fromhex(body) == st[wte + 4:wte + 12], got["tensor range"]
        assert h["content-range"].startswith("bytes 4-11/") and h["x-tensor-dtype"] == "F32"
        status, body, h, _ = got["two ranges"]  # multipart/byteranges
        assert status == 206 and f"bytes 600-607/{len(st)}".encode() in bytes.fromhex(body)
        assert st[0:8] in bytes.fromhex(body) and st[600:608] in bytes.fromhex(body)
        status, body, h, _ = got["info"]
        assert status == 200 and body == "json:" + json.dumps(sha)
        assert h["x-repo-commit"] == sha
        status, body, h, redirected = got["resolve main"]
        assert status == 206 and bytes.fromhex(body) == cfg[:8] and redirected is True
        assert h["x-repo-commit"] == sha and h["content-range"] == f"bytes 0-7/{len(cfg)}"
        status, body, h, _ = got["resolve head"]
        assert status == 200 and body == ""
        assert h["etag"] == '"%s"' % hashlib.sha256(shard).hexdigest()
        assert h["x-linked-size"] == str(len(shard)) and h["accept-ranges"] == "bytes"
        status, body, h, _ = got["paths-info"]
        assert status == 200 and json.loads(bytes.fromhex(body))[0]["path"] == "config.json"
        status, body, h, _ = got["missing"]
        assert status == 404 and h["x-error-code"] == "RepoNotFound"
        assert got["no token"][0] == 401
        # The same page from an origin not in the list: every call fails.
        got = run_page(f"http://localhost:{page_port}/page.html")
        assert got and all(v[0] == "error" and "TypeError" in v[1] for v in got.values()), got
    finally:
        d.stop_checked()
        srv.shutdown()
        srv.server_close()


# ---------------------------------------------------------------------------
# Chromium, each API family (issue 34): the S3 API with the headers an AWS
# SDK sends (signed with SigV4 here, by botocore, as a browser SDK signs),
# conditional requests (If-None-Match, If-Range), compressed documents,
# the OpenAPI description, whoami, the blobs.

FAMILIES = r"""<!doctype html><html><body><pre id="out">pending</pre><script>
const T = "http://127.0.0.1:%(port)d", AUTH = {Authorization: "Bearer %(token)s"};
const S3 = %(s3)s;
async function call(name, url, init, read) {
  try {
    const r = await fetch(T + url, init);
    const h = {};
    for (const k of ["etag", "content-range", "x-amz-bucket-region", "content-length",
                     "last-modified", "x-repo-commit"])
      if (r.headers.get(k) !== null) h[k] = r.headers.get(k);
    const body = read ? await read(r) : (await r.arrayBuffer()).byteLength;
    return [name, r.status, body, h];
  } catch (e) {
    return [name, "error", String(e)];
  }
}
const text = r => r.text();
const json = r => r.json();
(async () => {
  const out = [];
  const desc = await fetch(T + "/v1/models/single", {headers: AUTH});
  const etag = desc.headers.get("etag");
  await desc.arrayBuffer();
  out.push(["etag", etag]);
  out.push(await call("if-none-match", "/v1/models/single",
                      {headers: {...AUTH, "If-None-Match": etag}}));
  out.push(await call("if-range", "/v1/models/single/files/model.safetensors",
                      {headers: {...AUTH, Range: "bytes=0-7", "If-Range": "\"stale\""}}));
  out.push(await call("description", "/v1/models/single", {headers: AUTH},
                      async r => Object.keys((await r.json()).tensors).length));
  out.push(await call("metrics", "/metrics", {headers: AUTH}, async r => (await r.text()).length));
  out.push(await call("openapi", "/v1/openapi.json", {}, async r => (await r.json()).openapi));
  out.push(await call("whoami", "/api/whoami-v2", {headers: AUTH},
                      async r => (await r.json()).auth.accessToken.role));
  out.push(await call("filter", "/api/models?filter=diffusers", {headers: AUTH},
                      async r => (await r.json()).map(m => m.id).sort()));
  out.push(await call("blob", "/v1/blobs/sha256:%(blob)s", {headers: AUTH}, text));
  for (const [name, s] of Object.entries(S3)) {
    out.push(await call(name, s.url, {method: s.method, headers: s.headers},
                        s.method === "HEAD" ? null : text));
  }
  document.getElementById("out").textContent = "RESULT" + JSON.stringify(out) + "END";
})();
</script></body></html>
"""


def s3_signed(port, method, path, headers, key, secret):
    """The headers botocore signs a request with (SigV4, as the AWS SDK for
    JavaScript signs in a browser), plus an SDK's unsigned ones."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    req = AWSRequest(method=method, url=f"http://127.0.0.1:{port}{path}", headers=dict(headers))
    S3SigV4Auth(Credentials(key, secret), "s3", "us-east-1").add_auth(req)
    signed = {k: v for k, v in req.headers.items() if k.lower() != "host"}
    signed["amz-sdk-invocation-id"] = "0b4b1a9e-5d3c-4d8e-9a51-6f6a4e9a1c11"
    signed["amz-sdk-request"] = "attempt=1; max=3"
    return {"url": path, "method": method, "headers": signed}


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make deps)")
def test_chromium_each_api_family(tree):
    pytest.importorskip("botocore")
    base, root, files = tree
    pages = os.path.join(base, "pages-families")
    os.makedirs(pages, exist_ok=True)
    srv = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a, **k: _Quiet(*a, directory=pages, **k))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    page_port = srv.server_address[1]
    key, secret = "corskey", "cors/secret+key"
    with open(os.path.join(base, "s3.secret"), "w") as f:
        f.write(secret + "\n")
    work = os.path.join(base, "families")
    os.makedirs(work, exist_ok=True)
    d = tdutil.Daemon(root, work, ["--cors-origins", f"http://127.0.0.1:{page_port}",
                                   "--auth-token-file", os.path.join(base, "tokens"),
                                   "--s3-access-key", key,
                                   "--s3-secret-key-file", os.path.join(base, "s3.secret")],
                      probe_headers=AUTH)
    d.start().wait_hashed(60)
    try:
        cfg = files["single"]["config.json"]
        st = files["single"]["model.safetensors"]
        etag_cfg = d.head("/v1/models/single/files/config.json", AUTH).header("ETag")
        s3 = {"s3 range": s3_signed(d.port, "GET", "/s3/single/config.json",
                                    {"Range": "bytes=0-4"}, key, secret),
              "s3 list": s3_signed(d.port, "GET", "/s3/single?list-type=2", {}, key, secret),
              "s3 head bucket": s3_signed(d.port, "HEAD", "/s3/single", {}, key, secret),
              "s3 if-none-match": s3_signed(d.port, "GET", "/s3/single/config.json",
                                            {"If-None-Match": etag_cfg}, key, secret),
              "s3 unsigned": {"url": "/s3/single/config.json", "method": "GET", "headers": {}}}
        with open(os.path.join(pages, "families.html"), "w") as f:
            f.write(FAMILIES % {"port": d.port, "token": TOKEN, "s3": json.dumps(s3),
                                "blob": hashlib.sha256(cfg).hexdigest()})
        got = run_page(f"http://127.0.0.1:{page_port}/families.html")
        etag = got["etag"][0]
        assert etag and etag.startswith('"m'), got  # the description's, read by the script
        assert got["if-none-match"][:2] == [304, 0], got["if-none-match"]
        assert got["if-none-match"][2]["etag"] == etag
        status, n, h = got["if-range"]  # a stale If-Range: the whole file
        assert status == 200 and n == len(st) and "content-range" not in h, got["if-range"]
        assert got["description"][:2] == [200, 3]  # gzip, decoded by the browser
        assert got["metrics"][0] == 200 and got["metrics"][1] > 1000
        assert got["openapi"][:2] == [200, "3.1.0"]
        assert got["whoami"][:2] == [200, "read"]
        assert got["filter"][:2] == [200, ["org/sd"]]
        assert got["blob"][:2] == [200, cfg.decode()]
        assert got["s3 range"][:2] == [206, cfg[:5].decode()], got["s3 range"]
        assert got["s3 range"][2]["content-range"] == f"bytes 0-4/{len(cfg)}"
        status, xml, _ = got["s3 list"]
        assert status == 200 and "<Key>config.json</Key>" in xml, got["s3 list"]
        assert got["s3 head bucket"][0] == 200
        assert got["s3 head bucket"][2]["x-amz-bucket-region"] == "us-east-1"
        assert got["s3 if-none-match"][:2] == [304, ""], got["s3 if-none-match"]
        assert got["s3 unsigned"][0] == 403 and "AccessDenied" in got["s3 unsigned"][1]
    finally:
        d.stop_checked()
        srv.shutdown()
        srv.server_close()
