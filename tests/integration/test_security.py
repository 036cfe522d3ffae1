"""Access control: loopback by default, bearer tokens (read and admin),
tokens never logged, TLS with a certificate made here."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest

import faultlib
import tdutil
from faultlib import raw_get, run_daemon_expect_failure, running_daemon

READ = "r3ad-t0ken-Zq8x1VwQpL2m"
ADMIN = "adm1n-t0ken-Kf7uYc9TnB4s"


@pytest.fixture
def base():
    b = tempfile.mkdtemp(prefix="tensord-sec-")
    os.makedirs(os.path.join(b, "models"))
    yield b
    shutil.rmtree(b, ignore_errors=True)


def token_file(base, text):
    p = os.path.join(base, "tokens")
    with open(p, "w") as f:
        f.write(text)
    os.chmod(p, 0o600)
    return p


def bearer(tok):
    return {"Authorization": f"Bearer {tok}"}


# ---------------------------------------------------------------------------
# Binding


def test_default_listen_is_loopback():
    p = subprocess.run([tdutil.tensord_bin(), "--print-config"], capture_output=True, text=True,
                       timeout=20)
    assert p.returncode == 0, p.stderr
    listen = [ln for ln in p.stdout.splitlines() if ln.strip().startswith("listen")]
    assert listen, p.stdout
    value = listen[0].split("=", 1)[1].strip().strip('"')
    host = value.rsplit(":", 1)[0]
    assert host in ("127.0.0.1", "[::1]", "localhost"), f"default listen is {value!r}"


def _listening_addresses(pid):
    """Local addresses of the listening TCP sockets the process holds."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    out = []
    for table in ("tcp", "tcp6"):
        try:
            lines = open(f"/proc/{pid}/net/{table}").read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:
                out.append((table, f[1]))
    return out


def test_daemon_without_listen_binds_loopback_only(base):
    """Started with no --listen at all, the socket is bound to 127.0.0.1."""
    faultlib.small_models(os.path.join(base, "models"))
    try:
        with __import__("socket").create_server(("127.0.0.1", 8077)):
            pass
    except OSError:
        pytest.skip("port 8077 (the default) is in use here")
    cmd = [tdutil.tensord_bin(), "serve", "--models", os.path.join(base, "models"),
           "--ipc-socket", os.path.join(base, "s.sock")]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=base)
    try:
        assert faultlib.wait_for(lambda: _listening_addresses(p.pid), 20), "never listened"
        addrs = _listening_addresses(p.pid)
        assert addrs == [("tcp", "0100007F:1F8D")], f"listening on {addrs}"
    finally:
        p.terminate()
        p.wait(15)


# ---------------------------------------------------------------------------
# Bearer tokens


@pytest.fixture
def authd(base):
    models = os.path.join(base, "models")
    data = faultlib.small_models(models)
    tf = token_file(base, f"# tokens\nread {READ}\n\nadmin {ADMIN}\n")
    alog = os.path.join(base, "access.log")
    with running_daemon(models, "--auth-token-file", tf, "--access-log", alog,
                        "--log-level", "debug", probe_headers=bearer(READ)) as d:
        d.data = data
        d.access_log = alog
        yield d


READ_URLS = ["/v1/models", "/v1/models/m", "/v1/models/m/header", "/v1/models/m/tensors/w",
             "/v1/models/m/tensors/v?slice=1:5", "/v1/models/m/files/model.safetensors",
             "/v1/metrics", "/metrics", "/v1/models/m/gpu", "/v1/models/nope"]


@pytest.mark.parametrize("url", READ_URLS)
def test_read_endpoints_need_a_token(authd, url):
    for hdrs in ({}, bearer("wrong-token-but-long-enough"), bearer(READ[:-1]), bearer(READ + "x"),
                 bearer(READ[1:]), {"Authorization": f"Basic {READ}"},
                 {"Authorization": READ}, bearer("")):
        for method in ("GET", "HEAD"):
            r = authd.request(method, url, hdrs)
            assert r.status == 401, f"{method} {url} {hdrs}: {r!r}"
            assert r.header("WWW-Authenticate", "").startswith("Bearer"), r.headers
            if method == "GET":
                tdutil.assert_error(r, 401, "unauthorized", f"{url} {hdrs}")
    for tok in (READ, ADMIN):
        r = authd.get(url, bearer(tok))
        assert r.status != 401, f"{url} with the {'read' if tok == READ else 'admin'} token: {r!r}"


def test_token_answers_are_right(authd):
    r = authd.get("/v1/models/m/tensors/w", bearer(READ))
    assert r.status == 200 and r.body == authd.data["w"]
    r = authd.get("/v1/models/m/tensors/w", {"Authorization": f"bearer {READ}"})
    assert r.status == 200, "the auth scheme is case-insensitive (RFC 9110 11.1)"


def test_dns_rebinding_names_refused_without_tokens(base):
    """A page whose name was made to resolve to the daemon sends its own
    name as Host: without tokens it is refused (403 host_not_allowed) on
    every path before anything is read; addresses, localhost and the
    listed names are answered; huggingface_hub reaches the daemon by
    localhost as by address."""
    models = os.path.join(base, "models")
    data = faultlib.small_models(models)
    with running_daemon(models, "--allowed-hosts", "models.internal,*.corp.example") as d:
        for host in ("rebound.example", f"rebound.example:{d.port}", "localhost.rebound.example",
                     "2130706433", "models.internal.rebound.example", "corp.example"):
            for url in ("/v1/models", "/v1/models/m/tensors/w", "/healthz", "/api/models",
                        "/ui/"):
                r = d.request("GET", url, {"Host": host})
                assert r.status == 403, f"{host} {url}: {r!r}"
                assert data["w"] not in r.body
            tdutil.assert_error(d.get("/v1/models", {"Host": host}), 403, "host_not_allowed")
        for host in (f"127.0.0.1:{d.port}", f"localhost:{d.port}", "LOCALHOST", "[::1]",
                     "models.internal", f"a.corp.example:{d.port}", "app.localhost"):
            r = d.get("/v1/models/m/tensors/w", {"Host": host})
            assert r.status == 200 and r.body == data["w"], f"{host}: {r!r}"
        hub = subprocess.run(
            [sys.executable, "-c", "import huggingface_hub as h; "
             "print(h.HfApi(endpoint='http://localhost:%d').model_info('m').id)" % d.port],
            capture_output=True, text=True, timeout=60)
        assert hub.returncode == 0 and hub.stdout.strip() == "m", hub.stderr


def test_tokens_answer_every_host(authd):
    r = authd.get("/v1/models/m/tensors/w", {"Host": "rebound.example", **bearer(READ)})
    assert r.status == 200 and r.body == authd.data["w"]
    r = authd.get("/v1/models/m/tensors/w", {"Host": "rebound.example"})
    assert r.status == 401


def test_healthz_needs_no_token(authd):
    assert authd.get("/healthz").status == 200


def test_healthz_reveals_nothing_without_a_token(base):
    """/healthz answers anyone; with auth on it must not hand an
    unauthenticated client what the tokens protect: model names (here one
    preloaded to the host backend), the IPC socket path."""
    models = os.path.join(base, "models")
    tdutil.gen_models.write_safetensors(os.path.join(models, "private-model-q7", "model.safetensors"),
                                        [("x", "U8", (4,), b"abcd")])
    tf = token_file(base, f"read {READ}\nadmin {ADMIN}\n")
    with running_daemon(models, "--auth-token-file", tf, probe_headers=bearer(READ)) as d:
        r = d.request("POST", "/v1/models/private-model-q7/gpu", bearer(ADMIN),
                      b'{"device": "host"}')
        assert r.status in (200, 202), r
        faultlib.wait_for(lambda: d.get("/v1/models/private-model-q7/gpu", bearer(READ))
                          .json().get("state") == "ready", 10)
        r = d.get("/healthz")
        assert r.status == 200 and r.json()["status"] == "ok"
        assert b"private-model-q7" not in r.body, \
            f"unauthenticated /healthz names a model: {r.body[:400]!r}"
        assert d.workdir.encode() not in r.body, \
            f"unauthenticated /healthz shows a server path: {r.body[:400]!r}"


@pytest.mark.parametrize("method", ["POST", "DELETE"])
def test_admin_endpoints_need_the_admin_token(authd, method):
    body = json.dumps({"device": "host"}).encode() if method == "POST" else None
    for hdrs in ({}, bearer(READ), bearer("x" * 20)):
        r = authd.request(method, "/v1/models/m/gpu", hdrs, body)
        tdutil.assert_error(r, 401, "unauthorized", f"{method} gpu with {hdrs}")
        assert r.header("WWW-Authenticate", "").startswith("Bearer")
    r = authd.request(method, "/v1/models/m/gpu", bearer(ADMIN), body)
    assert r.status != 401, r


BODY_URLS = [("/v1/models/m/fetch", "Content-Length: 1048576"),
             ("/api/models/m/paths-info/main", "Content-Length: 1048576"),
             ("/v1/models/m/fetch", "Transfer-Encoding: chunked")]


@pytest.mark.parametrize("url,framing", BODY_URLS)
def test_token_is_checked_before_the_body(authd, url, framing):
    """A request that announces a body and has no token gets its 401 from its
    headers alone: the daemon never waits for, reads or buffers the body
    (issue 23, item 3). With the token, the same request waits for its body."""
    for hdrs in ({}, bearer("wrong-token-but-long-enough")):
        s = faultlib.connect(authd.port, timeout=5)
        try:
            head = [f"POST {url} HTTP/1.1", "Host: 127.0.0.1", framing,
                    "Content-Type: application/json"] + [f"{k}: {v}" for k, v in hdrs.items()]
            s.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
            status, rh, rest = faultlib.read_head(s)  # no byte of the body sent
            assert status == 401, f"{url} {hdrs}: {status} {rh}"
            assert rh.get("connection", "").lower() == "close", rh
            assert faultlib.wait_closed(s, 5) is not None, "the connection stayed open"
        finally:
            s.close()
    s = faultlib.connect(authd.port, timeout=1)
    try:
        body = b"{}"
        length = framing if framing.startswith("Transfer") else f"Content-Length: {len(body)}"
        head = [f"POST {url} HTTP/1.1", "Host: 127.0.0.1", length,
                "Content-Type: application/json", f"Authorization: Bearer {READ}"]
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        with pytest.raises(socket.timeout):
            s.recv(1)  # a request with the token waits for its body
        s.settimeout(10)
        s.sendall(b"2\r\n{}\r\n0\r\n\r\n" if framing.startswith("Transfer") else body)
        status, rh, rest = faultlib.read_head(s)
        assert status != 401 and status < 500, (status, rh)
    finally:
        s.close()


def test_tokenless_uploads_hold_no_memory(authd):
    """200 connections each sending a 1 MiB body without a token leave the
    daemon's resident memory where it was: the bodies are never buffered."""
    rss0 = authd.rss_kib()
    socks = []
    try:
        head = ("POST /v1/models/m/fetch HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                "Content-Length: 1048576\r\n\r\n").encode()
        chunk = b" " * (1 << 20)
        for _ in range(200):
            s = faultlib.connect(authd.port, timeout=5)
            socks.append(s)
            s.sendall(head)
            try:
                s.send(chunk, socket.MSG_DONTWAIT)
            except (BlockingIOError, ConnectionError):
                pass  # the daemon answered and closed already
        for s in socks:
            status, rh, rest = faultlib.read_head(s)
            assert status in (401, None), status
        grown = authd.rss_kib() - rss0
        if not faultlib.SANITIZED:  # ASan's quarantine keeps what is freed
            assert grown < 20 * 1024, f"resident memory grew by {grown} KiB"
    finally:
        for s in socks:
            s.close()


def test_tokens_never_logged(authd):
    for tok in (READ, ADMIN, "wrong-token-but-long-enough"):
        for url in ("/v1/models", "/v1/models/m/tensors/w", "/v1/models/nope", "/metrics"):
            authd.get(url, bearer(tok))
        authd.request("DELETE", "/v1/models/m/gpu", bearer(tok))
        authd.request("POST", "/v1/models/m/gpu", bearer(tok), b'{"device": "host"}')
    authd.get("/v1/models", {"Authorization": f"Basic {READ}"})
    # A client that puts a token in the query string: the log scrubs *token= values.
    authd.get(f"/v1/models?access_token={READ}", bearer(READ))
    authd.get(f"/v1/models/m/tensors/w?token={ADMIN}&slice=0")
    assert authd.get("/v1/models").status == 401
    faultlib.wait_for(lambda: os.path.exists(authd.access_log) and
                      os.path.getsize(authd.access_log) > 0, 5)
    with open(authd.access_log, "rb") as f:
        access = f.read()
    stderr = authd.log_text().encode()
    assert b"/v1/models/m/tensors/w" in access, "the access log is not being written"
    for tok in (READ, ADMIN, "wrong-token-but-long-enough"):
        for what, text in (("access log", access), ("stderr", stderr)):
            assert tok.encode() not in text, f"token {tok[:4]}... appears in the {what}"
            assert tok[:12].encode() not in text, f"a token prefix appears in the {what}"


@pytest.mark.parametrize("content,why", [
    ("read short\n", "token under 16 characters"),
    ("write abcdefghijklmnopqrstuvwxyz\n", "unknown role"),
    ("read abcdefghijklmnopqrstuvwxyz extra\n", "trailing field"),
    ("# only a comment\n", "no tokens"),
])
def test_bad_token_file_stops_startup(base, content, why):
    faultlib.small_models(os.path.join(base, "models"))
    tf = token_file(base, content)
    rc, out = run_daemon_expect_failure(os.path.join(base, "models"), "--auth-token-file", tf)
    assert rc != 0, f"{why}: the daemon started"
    assert "tokens" in out, f"{why}: the message does not name the file: {out}"
    assert "abcdefghijklmnop" not in out, f"{why}: the message shows the token: {out}"


def test_missing_token_file_stops_startup(base):
    rc, out = run_daemon_expect_failure(os.path.join(base, "models"), "--auth-token-file",
                                        os.path.join(base, "does-not-exist"))
    assert rc != 0 and "does-not-exist" in out, out


def test_read_only_token_file(base):
    """Only a read token: admin endpoints are then closed to everyone."""
    models = os.path.join(base, "models")
    faultlib.small_models(models)
    tf = token_file(base, f"read {READ}\n")
    with running_daemon(models, "--auth-token-file", tf, probe_headers=bearer(READ)) as d:
        assert d.get("/v1/models", bearer(READ)).status == 200
        r = d.request("DELETE", "/v1/models/m/gpu", bearer(READ))
        tdutil.assert_error(r, 401, "unauthorized")


# ---------------------------------------------------------------------------
# TLS


def make_cert(base):
    cert, key = os.path.join(base, "cert.pem"), os.path.join(base, "key.pem")
    p = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
         "-keyout", key, "-out", cert], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        pytest.fail(f"openssl could not make a certificate: {p.stderr}")
    return cert, key


def curl(*args):
    p = subprocess.run(["curl", "-sS", "--max-time", "20"] + list(args), capture_output=True,
                       timeout=40)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


@pytest.fixture
def tlsd(base):
    for tool in ("openssl", "curl"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    models = os.path.join(base, "models")
    data = faultlib.small_models(models)
    big = os.urandom(3 << 20)
    tdutil.gen_models.write_safetensors(os.path.join(models, "big", "model.safetensors"),
                                        [("w", "U8", (3, 1 << 20), big)])
    data["big"] = big
    cert, key = make_cert(base)
    tf = token_file(base, f"read {READ}\nadmin {ADMIN}\n")
    d = faultlib.Daemon(models, base, ["--tls-cert", cert, "--tls-key", key,
                                       "--auth-token-file", tf])
    # The readiness probe of tdutil speaks plain HTTP; wait on the TLS port here.
    port = tdutil.free_port()
    d.extra_args += ["--listen", f"127.0.0.1:{port}"]
    cmd = [tdutil.tensord_bin(), "serve", "--models", models, "--threads", "2",
           "--ipc-socket", os.path.join(base, "s.sock")] + d.extra_args
    log = open(d.log_path, "ab")
    d.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=base)
    log.close()
    d.port = port
    url = f"https://127.0.0.1:{port}"
    ok = faultlib.wait_for(lambda: d.proc.poll() is not None or
                           curl("--cacert", cert, url + "/healthz")[0] == 0, 20, 0.1)
    if d.proc.poll() is not None or not ok:
        d.stop()
        pytest.fail(f"TLS daemon did not come up:\n{d.log_tail()}")
    d.url, d.cert, d.data = url, cert, data
    yield d
    d.stop_checked()


def test_tls_with_curl(tlsd):
    rc, out, err = curl("--cacert", tlsd.cert, "-H", f"Authorization: Bearer {READ}",
                        tlsd.url + "/v1/models/m/tensors/w")
    assert rc == 0, err
    assert out == tlsd.data["w"]
    rc, out, err = curl("--cacert", tlsd.cert, "-H", f"Authorization: Bearer {READ}",
                        tlsd.url + "/v1/models/big/tensors/w")
    assert rc == 0, err
    assert out == tlsd.data["big"], "a large body over TLS differs"
    rc, out, err = curl("--cacert", tlsd.cert, "-H", f"Authorization: Bearer {READ}",
                        "-H", "Range: bytes=1000000-1000099", tlsd.url + "/v1/models/big/tensors/w")
    assert rc == 0 and out == tlsd.data["big"][1000000:1000100], err
    rc, out, err = curl("--cacert", tlsd.cert, "-o", "/dev/null", "-w", "%{http_code}",
                        tlsd.url + "/v1/models")
    assert out == b"401", "TLS does not replace the token"


def test_tls_rejects_unverified_and_plain(tlsd):
    rc, out, err = curl(tlsd.url + "/healthz")
    assert rc != 0, "curl accepted a self-signed certificate without --cacert"
    r = raw_get(tlsd.port, "/healthz", timeout=5)
    # The port speaks TLS only: a plain request gets no HTTP answer at all.
    assert r.status is None, f"plain HTTP on the TLS port answered {r!r}"
    assert tlsd.alive()
    rc, out, err = curl("--cacert", tlsd.cert, tlsd.url + "/healthz")
    assert rc == 0 and json.loads(out)["status"] == "ok", err


def test_tls_needs_cert_and_key(base):
    models = os.path.join(base, "models")
    faultlib.small_models(models)
    cert, key = make_cert(base)
    rc, out = run_daemon_expect_failure(models, "--tls-cert", cert)
    assert rc != 0, "started with a certificate and no key"
    rc, out = run_daemon_expect_failure(models, "--tls-cert", cert, "--tls-key",
                                        os.path.join(base, "missing-key.pem"))
    assert rc != 0 and "missing-key.pem" in out, out


def tls_handshake(port, version):
    """Negotiated protocol of a handshake that offers only `version`, or None
    when the server refused it. SECLEVEL=0 lets this OpenSSL offer TLS 1.0 and
    1.1 at all, so a refusal is the server's."""
    import socket
    import ssl
    import warnings
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    # Offering TLS 1.0 and 1.1 is the point here: Python's DeprecationWarning
    # for them says nothing about tensord.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ctx.maximum_version = version
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            with ctx.wrap_socket(s, server_hostname="localhost") as t:
                return t.version()
        except (ssl.SSLError, ConnectionError):
            return None


def test_tls_minimum_is_1_2(tlsd):
    """TLS 1.0 and 1.1 are refused (RFC 8996); 1.2 and 1.3 are accepted."""
    import ssl
    assert tls_handshake(tlsd.port, ssl.TLSVersion.TLSv1) is None, "TLS 1.0 was accepted"
    assert tls_handshake(tlsd.port, ssl.TLSVersion.TLSv1_1) is None, "TLS 1.1 was accepted"
    assert tls_handshake(tlsd.port, ssl.TLSVersion.TLSv1_2) == "TLSv1.2"
    assert tls_handshake(tlsd.port, ssl.TLSVersion.TLSv1_3) == "TLSv1.3"
    assert tlsd.alive()
