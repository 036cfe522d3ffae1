"""A mirror in front of a scripted upstream (issue 31): an HTTP server in
this process answers what each test makes it answer, slowly, wrongly or
with hostile bytes, and counts what the mirror asked. The oracles are the
bytes the script sent, huggingface_hub as the client, and the script's own
record of the requests it got.

Each test starts its own mirror (a few hundred milliseconds); none waits
for more than a few seconds."""
import hashlib
import http.client
import http.server
import json
import os
import re
import socket
import socketserver
import subprocess
import sys
import threading
import time

import pytest

import tdutil
from tdutil import wait_for

COMMIT = "ab" * 20
HERE = os.path.dirname(os.path.abspath(__file__))


class Scripted:
    """An upstream whose answers are functions: routes maps a regex on the
    path (query included) to fn(handler, match) -> (status, headers, body).
    Every request is recorded as (method, path) in `seen`. go_down() makes
    it answer nothing, on connections kept alive too."""

    def __init__(self, routes):
        outer = self
        self.routes = [(re.compile(p), fn) for p, fn in routes.items()]
        self.seen = []
        self.lock = threading.Lock()
        self.down = False

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def answer(self):
                if outer.down:  # the connection closes with no answer
                    self.close_connection = True
                    return
                with outer.lock:
                    outer.seen.append((self.command, self.path))
                for rx, fn in outer.routes:
                    m = rx.fullmatch(self.path)
                    if m:
                        status, headers, body = fn(self, m)
                        break
                else:
                    status, headers, body = 404, {"X-Error-Code": "RepoNotFound"}, \
                        b'{"error":"not here"}'
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_POST = answer

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            request_queue_size = 1024

        self.server = Server(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self, pattern):
        rx = re.compile(pattern)
        with self.lock:
            return sum(1 for _, p in self.seen if rx.search(p))

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def go_down(self):
        self.down = True
        self.close()


@pytest.fixture
def mirror_of(tmp_path):
    """mirror_of(upstream, *args) starts a mirror of it; all are stopped
    (checked: exit 0, so no sanitizer report) at the end."""
    started = []

    def start(up, *extra):
        work = tmp_path / f"m{len(started)}"
        os.makedirs(work / "models", exist_ok=True)
        args = ["--upstream", up.base, "--mirror-block-bytes", "65536",
                "--mirror-cache-dir", str(work / "cache"),
                "--access-log", str(work / "access.log")] + list(extra)
        d = tdutil.Daemon(str(work / "models"), str(work), args).start()
        started.append(d)
        return d
    yield start
    for d in started:
        if not getattr(d, "stopped", False):  # a test that stops one checks it itself
            d.stop_checked()


def hf_env(port, tmp):
    env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HUB_CACHE=str(tmp),
               HF_HOME=str(tmp / "home"), HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_XET="1")
    env.pop("HF_TOKEN", None)
    return env


# ---- documents --------------------------------------------------------------


def test_pagination_link_longer_than_512_bytes(mirror_of, tmp_path):
    """The Hub pages /api/models with a Link header whose cursor makes it
    long: huggingface_hub's list_models through the mirror follows it to
    the last page (a Link of 512 bytes or more was dropped, and the listing
    stopped after page one)."""
    pages = [[{"id": f"org/m{p}-{i}", "modelId": f"org/m{p}-{i}"} for i in range(2)]
             for p in range(3)]

    def models(h, m):
        cur = re.search(r"cursor=p(\d)", h.path)
        p = int(cur.group(1)) if cur else 0
        headers = {"Content-Type": "application/json"}
        if p + 1 < len(pages):
            cursor = f"p{p + 1}" + "x" * 700  # the Hub's cursors are opaque and long
            headers["Link"] = f'<{up.base}/api/models?cursor={cursor}&limit=2>; rel="next"'
        return 200, headers, json.dumps(pages[p]).encode()
    up = Scripted({r"/api/models(\?.*)?": models})
    try:
        m = mirror_of(up)
        r = m.get("/api/models?limit=2")
        assert r.status == 200 and len(r.header("Link")) > 700, r
        assert r.header("Link").startswith(f"<http://127.0.0.1:{m.port}/api/models?cursor=p1")
        code = ("from huggingface_hub import list_models\n"
                "print('\\n'.join(x.id for x in list_models(limit=100)))\n")
        p = subprocess.run([sys.executable, "-c", code], env=hf_env(m.port, tmp_path),
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert p.stdout.split() == [x["id"] for page in pages for x in page]
    finally:
        up.close()


def test_documents_are_json_with_tensord_headers(mirror_of):
    """What the mirror passes on is served as tensord's own JSON, with
    nosniff and a CSP, whatever Content-Type the upstream gave; an answer
    that is not JSON (an HTML page, which would run on the mirror's origin)
    is refused with 502 saying why; an upstream error that is not JSON
    keeps its status in the Hub's dialect."""
    page = b"<html><script>fetch('/v1/models').then(r => r.text()).then(alert)</script></html>"
    up = Scripted({
        r"/api/models/org/typed": lambda h, m: (200, {"Content-Type": "text/html"},
                                                b'{"id": "org/typed", "sha": "%s"}' % COMMIT.encode()),
        r"/api/models/org/page": lambda h, m: (200, {"Content-Type": "text/html"}, page),
        r"/api/models/org/empty": lambda h, m: (200, {"Content-Type": "application/json"}, b""),
        r"/api/models/org/twice": lambda h, m: (200, {}, b'{"a": 1}{"b": 2}'),
        r"/api/models/org/gone": lambda h, m: (404, {"Content-Type": "text/html",
                                                     "X-Error-Code": "RepoNotFound"},
                                               b"<h1>404</h1>"),
        r"/api/models/org/broken": lambda h, m: (500, {"Content-Type": "text/html"}, b"<h1>oops"),
    })
    try:
        m = mirror_of(up)
        for path in ("/api/models/org/typed", "/api/models/org/page", "/api/models/org/gone"):
            for method in ("GET", "HEAD"):
                r = m.request(method, path)
                assert r.header("Content-Type") == "application/json", (path, r)
                assert r.header("X-Content-Type-Options") == "nosniff", (path, r)
                assert r.header("Content-Security-Policy") == \
                    "default-src 'none'; frame-ancestors 'none'", (path, r)
        r = m.get("/api/models/org/typed")
        assert r.status == 200 and r.json() == {"id": "org/typed", "sha": COMMIT}
        for name, why in (("page", "is not JSON ('[' or '{' expected near '<')"),
                          ("empty", "is not JSON (empty)"),
                          ("twice", "is not JSON (end of file expected"),
                          ("broken", "is not JSON")):
            r = m.get(f"/api/models/org/{name}")
            assert r.status == 502, (name, r)
            assert why in r.json()["error"], (name, r.json())
            assert b"<script>" not in r.body
        r = m.get("/api/models/org/gone")
        assert r.status == 404 and r.header("X-Error-Code") == "RepoNotFound", r
        assert r.json() == {"error": "upstream answered 404"}
    finally:
        up.close()


# ---- files ------------------------------------------------------------------

BLOCK = 65536


def sha(b):
    return hashlib.sha256(b).hexdigest()


def file_routes(files, gates=None, delay=0.0, head_gate=None):
    """Routes answering HEAD and ranged GET of each {name: bytes} as an LFS
    file of repo "org/r" at COMMIT (404 for other names), a range waiting
    on gates[name] (an Event) when there is one, every HEAD on head_gate
    when there is one, every answer after `delay` seconds."""
    gates = gates or {}

    def head(h, m):
        if head_gate:
            head_gate.wait(30)
        time.sleep(delay)
        data = files.get(m.group(2))
        if data is None:
            return 404, {"X-Error-Code": "EntryNotFound"}, b'{"error":"no"}'
        return 200, {"X-Repo-Commit": COMMIT, "X-Linked-Etag": f'"{sha(data)}"',
                     "X-Linked-Size": str(len(data)), "ETag": f'"{sha(data)}"'}, b""

    def get(h, m):
        time.sleep(delay)
        name = m.group(2)
        data = files[name]
        if name in gates:
            gates[name].wait(30)
        r = re.fullmatch(r"bytes=(\d+)-(\d+)", h.headers.get("Range", ""))
        a, b = int(r.group(1)), min(int(r.group(2)), len(data) - 1)
        return 206, {"Content-Range": f"bytes {a}-{b}/{len(data)}", "X-Repo-Commit": COMMIT,
                     "ETag": f'"{sha(data)}"'}, data[a:b + 1]

    def route(h, m):
        return (head if h.command == "HEAD" else get)(h, m)
    return {r"/org/r/resolve/(main|[0-9a-f]{40})/(.+)": route}


def url(name):
    return f"/org/r/resolve/{COMMIT}/{name}"


def test_one_bad_answer_is_not_an_outage(mirror_of):
    """An answer that is the upstream's but unusable for that one request
    (redirects in a circle, a document over the mirror's bound) fails that
    request with 502; the upstream stays up and is asked again at once, so a
    client cannot pause the mirror for everyone by asking for such a name."""
    big = b'{"pad": "' + b"x" * (64 << 20) + b'"}'
    up = Scripted({
        r"/api/models/org/loop": lambda h, m: (302, {"Location": "/api/models/org/loop"}, b""),
        r"/api/models/org/huge": lambda h, m: (200, {"Content-Type": "application/json"}, big),
        r"/api/models/org/fine": lambda h, m: (200, {}, b'{"id": "org/fine"}'),
    })
    try:
        m = mirror_of(up)
        for name in ("loop", "huge"):
            r = m.get(f"/api/models/org/{name}")
            assert r.status == 502, (name, r)
            assert tdutil.prom_counter(m, "tensord_mirror_upstream_up") == 1, name
            assert tdutil.prom_counter(m, "tensord_mirror_upstream_consecutive_failures") == 0
            r = m.get("/api/models/org/fine")  # asked at once, not paused
            assert r.status == 200 and r.json() == {"id": "org/fine"}, r
    finally:
        up.close()


def test_redirects_to_private_addresses(mirror_of):
    """A range redirected to another origin (as the Hub's to its CDN) is
    followed by default from an upstream on a private address (here
    loopback), byte-exact; with upstream_redirect_private = no the mirror
    never connects there (a redirect could lead to a metadata service or an
    internal one): the download fails with 502 naming the address, the
    other origin sees nothing, and the upstream stays up."""
    data = os.urandom(3 * 65536 + 100)
    cdn = Scripted(file_routes({"w.bin": data}))
    up = Scripted({r"/org/r/resolve/(main|[0-9a-f]{40})/(.+)": lambda h, m: (
        (200, {"X-Repo-Commit": COMMIT, "X-Linked-Etag": f'"{sha(data)}"',
               "X-Linked-Size": str(len(data)), "ETag": f'"{sha(data)}"'}, b"")
        if h.command == "HEAD" else (302, {"Location": cdn.base + h.path}, b""))})
    try:
        m = mirror_of(up)
        r = m.get(url("w.bin"))
        assert r.status == 200 and r.body == data, r.status
        assert cdn.count("w.bin") >= 1
        seen = cdn.count("w.bin")
        m = mirror_of(up, "--upstream-redirect-private", "no")
        try:
            r = m.get(url("w.bin"))
            assert r.status == 502, r
        except http.client.IncompleteRead:
            pass  # the answer's head went before its first block failed: cut short
        assert cdn.count("w.bin") == seen
        log = m.log_tail(1 << 16)
        assert f"a redirect led to 127.0.0.1:{cdn.port}, a private address" in log, log
        assert tdutil.prom_counter(m, "tensord_mirror_upstream_up") == 1
    finally:
        up.close()
        cdn.close()


def test_cold_range_anywhere_completes(mirror_of):
    """A Range that starts past a cold file's first block and runs to its
    end completes: the last byte waits for the whole file's hash, so the
    mirror fetches the rest behind the range (it never did: the hash only
    grows over blocks fetched from byte 0)."""
    data = os.urandom(5 * BLOCK + 77)
    files = {f"f{i}.bin": data[:len(data) - i] for i in range(4)}
    up = Scripted(file_routes(files))
    try:
        m = mirror_of(up)
        cases = (("f0.bin", "bytes=200000-"), ("f1.bin", "bytes=-100"),
                 ("f2.bin", f"bytes=300000-{len(files['f2.bin']) - 1}"),
                 ("f3.bin", "bytes=70000-70099,-5"))
        for name, rng in cases:
            r = tdutil.request(m.port, "GET", url(name), {"Range": rng}, timeout=20)
            body = files[name]
            assert r.status == 206, (name, r)
            if "," in rng:
                parts = tdutil.parse_multipart_byteranges(r.header("Content-Type"), r.body)
                assert [p[4] for p in parts] == [body[70000:70100], body[-5:]]
            elif rng.startswith("bytes=-"):
                assert r.body == body[-100:]
            else:
                assert r.body == body[int(rng[6:].split("-")[0]):], name
        # Each file was fetched whole, once, and is complete (by digest).
        for name, body in files.items():
            r = m.get(f"/v1/blobs/sha256:{sha(body)}")
            assert r.status == 200 and r.body == body, name
    finally:
        up.close()


def leave_after_headers(port, path, headers):
    """Sends a GET, reads the answer's status line, and goes away."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    req = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    req += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    s.sendall(req.encode())
    got = s.recv(64)
    s.close()
    return got


def test_clients_that_leave_hold_nothing(mirror_of):
    """Clients that ask for cold ranges and leave while their answers wait
    are freed at once (their connections closed, their wants dropped): they
    hold nothing in the cache, so the next cold download is not cut with
    "cache full". They were never freed, and pinned their files: about
    max_connections of them left the mirror answering 503 to everyone."""
    files = {f"p{i}.bin": os.urandom(3 * BLOCK + 5) for i in range(4)}
    files["q.bin"] = os.urandom(10 * BLOCK)
    gates = {n: threading.Event() for n in files if n.startswith("p")}
    up = Scripted(file_routes(files, gates))
    try:
        m = mirror_of(up, "--mirror-cache-max-bytes", str(16 * BLOCK),
                      "--mirror-fetch-threads", "4")
        for n in gates:  # each waits for bytes the upstream holds back
            assert leave_after_headers(m.port, url(n), {"Range": "bytes=131072-"}) \
                .startswith(b"HTTP/1.1 206")
        for g in gates.values():  # the blocks in flight land, nobody reads them
            g.set()

        def freed():
            d = m.json("/v1/metrics")
            return d["connections"]["open"] <= 1 and d["mirror"].get("in_use_bytes") == 0 and d
        wait_for(freed, 10, "the clients that left were not freed")
        r = tdutil.request(m.port, "GET", url("q.bin"), timeout=20)
        assert r.status == 200 and r.body == files["q.bin"], r
        assert m.json("/v1/metrics")["mirror"]["cache_bytes"] <= 16 * BLOCK
    finally:
        for g in gates.values():
            g.set()
        up.close()


def test_suspended_answer_obeys_connection_timeout(mirror_of):
    """An answer that waits for bytes that do not come is ended after
    connection_timeout, as an idle connection is; SIGTERM then stops the
    daemon at once, though an answer still waits (libmicrohttpd aborts when
    stopped with a suspended connection: every one is given up first)."""
    files = {"slow.bin": os.urandom(2 * BLOCK), "stuck.bin": os.urandom(2 * BLOCK)}
    gates = {"slow.bin": threading.Event(), "stuck.bin": threading.Event()}
    up = Scripted(file_routes(files, gates))
    try:
        m = mirror_of(up, "--connection-timeout", "1")
        s = socket.create_connection(("127.0.0.1", m.port), timeout=10)
        s.sendall(f"GET {url('slow.bin')} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        t0 = time.monotonic()
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        assert got.startswith(b"HTTP/1.1 200") and 0.8 < time.monotonic() - t0 < 5, got[:100]
        s.close()
        # One more waits when SIGTERM comes: the stop takes well under the
        # drain's 30 s, and exits 0.
        s = socket.create_connection(("127.0.0.1", m.port), timeout=10)
        s.sendall(f"GET {url('stuck.bin')} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        assert s.recv(64).startswith(b"HTTP/1.1 200")
        t0 = time.monotonic()
        m.stopped = True
        m.stop_checked()
        assert time.monotonic() - t0 < 10
        s.close()
    finally:
        for g in gates.values():
            g.set()
        up.close()


# ---- the upstream queue -----------------------------------------------------

JOB_THREADS = 4          # mirror/mirror_job.h MIRROR_JOB_THREADS
PER_CLIENT = 64          # MIRROR_JOBS_PER_CLIENT


def ask(port, path, source="127.0.0.1", timeout=20):
    """(status, Retry-After, seconds taken) of a GET from address source."""
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                   source_address=(source, 0))
    try:
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        return r.status, r.getheader("Retry-After"), time.monotonic() - t0
    finally:
        c.close()


def in_threads(fn, args):
    """fn(*a) for each a of args, all at once; their results in order."""
    out = [None] * len(args)

    def run(i):
        try:
            out[i] = fn(*args[i])
        except Exception as e:  # noqa: BLE001
            out[i] = e
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    for t in ts:
        t.start()
    return ts, out


def heads(up, name=""):
    with up.lock:
        return [p for meth, p in up.seen if meth == "HEAD" and name in p]


def test_identical_questions_are_asked_once(mirror_of):
    """Thirty clients asking about the same file while the upstream thinks:
    one HEAD goes upstream, and all thirty get its answer."""
    gate = threading.Event()
    up = Scripted(file_routes({"same.bin": os.urandom(100)}, head_gate=gate))
    try:
        m = mirror_of(up)
        ts, out = in_threads(ask, [(m.port, "/org/r/resolve/main/same.bin")] * 30)
        wait_for(lambda: heads(up), 10, "no HEAD reached the upstream")
        # Every other client has arrived and joined the question in flight.
        wait_for(lambda: tdutil.prom_counter(m, "tensord_mirror_questions_shared_total") == 29,
                 10, "29 clients did not join the question")
        assert len(heads(up)) == 1, heads(up)
        gate.set()
        for t in ts:
            t.join(20)
        assert all(o[0] == 302 for o in out), out
        assert len(heads(up)) == 1
    finally:
        gate.set()
        up.close()


def test_full_queue_answers_503_at_once(mirror_of):
    """With the upstream stuck, one client's questions beyond its share of
    the queue are answered 503 with Retry-After at once, not after a wait;
    the others are answered once the upstream is."""
    gate = threading.Event()
    up = Scripted(file_routes({}, head_gate=gate))
    try:
        m = mirror_of(up)
        n = PER_CLIENT + JOB_THREADS + 20
        ts, out = in_threads(ask, [(m.port, f"/org/r/resolve/main/q{i}.bin") for i in range(n)])
        wait_for(lambda: sum(1 for o in out if o) >= 20, 10, "no 503 came at once")
        busy = [o for o in out if o]
        assert all(o[0] == 503 and o[1] == "1" and o[2] < 5 for o in busy), busy
        gate.set()
        for t in ts:
            t.join(30)
        assert sum(1 for o in out if o[0] == 503) == 20, [o[0] for o in out]
        assert sum(1 for o in out if o[0] == 404) == n - 20  # the upstream's answer
    finally:
        gate.set()
        up.close()


def test_abandoned_questions_never_reach_the_upstream(mirror_of):
    """Questions whose clients left before the upstream was asked are
    dropped from the queue: once the upstream answers again, a new client
    is answered next, and the upstream was asked only what was running."""
    gate = threading.Event()
    up = Scripted(file_routes({"new.bin": os.urandom(10)}, head_gate=gate))
    try:
        m = mirror_of(up)
        socks = []
        for i in range(40):
            s = socket.create_connection(("127.0.0.1", m.port), timeout=10)
            s.sendall(f"GET /org/r/resolve/main/gone{i}.bin HTTP/1.1\r\n"
                      "Host: 127.0.0.1\r\n\r\n".encode())
            socks.append(s)
        # The job threads' questions stuck upstream, the rest queued behind.
        wait_for(lambda: len(heads(up)) == JOB_THREADS, 10, "the job threads did not ask")
        queued(m, 40 - JOB_THREADS)
        running = len(heads(up))
        for s in socks:
            s.close()
        wait_for(lambda: m.json("/v1/metrics")["connections"]["open"] <= 1, 10,
                 "the clients that left were not freed")
        gate.set()
        status, _, took = ask(m.port, "/org/r/resolve/main/new.bin")
        assert status == 302 and took < 2, (status, took)
        assert len(heads(up)) == running + 1, heads(up)
    finally:
        gate.set()
        up.close()


def stable_count(fn, quiet=0.5, timeout=10):
    """fn()'s value once it is non-zero and has not changed for `quiet` s."""
    deadline, last, since = time.monotonic() + timeout, None, time.monotonic()
    while time.monotonic() < deadline:
        v = fn()
        if v != last:
            last, since = v, time.monotonic()
        elif v and time.monotonic() - since >= quiet:
            return v
        time.sleep(0.02)
    raise AssertionError(f"no stable count within {timeout} s (last {last})")


def queued(m, n, timeout=10):
    """Waits until n questions wait in the mirror's queue (a second when the
    daemon does not say: an older one)."""
    if "questions_waiting" not in m.json("/v1/metrics")["mirror"]:
        time.sleep(1)
        return
    wait_for(lambda: m.json("/v1/metrics")["mirror"]["questions_waiting"] == n, timeout,
             f"{n} questions are not waiting")


class Turnstile:
    """A gate the upstream's answers wait on, opened one answer at a time
    (release) or for good (set)."""

    def __init__(self):
        self.sem = threading.Semaphore(0)
        self.open = False

    def wait(self, timeout):
        if not self.open:
            self.sem.acquire(timeout=timeout)

    def release(self):
        self.sem.release()

    def set(self):
        self.open = True
        self.sem.release(1000)


def test_clients_take_turns(mirror_of):
    """One client's twenty questions do not keep another's waiting behind
    them: the job threads take the clients in turn (each address is a
    client; 127.0.0.0/8 is all loopback). The upstream answers one
    question at a time, so each answer frees one job thread, which takes
    the next question: client B's comes second (FIFO: twentieth)."""
    gate = Turnstile()
    up = Scripted(file_routes({}, head_gate=gate))
    try:
        m = mirror_of(up)
        socks = []
        for i in range(20):  # client A's, in order
            s = socket.create_connection(("127.0.0.1", m.port), timeout=30,
                                         source_address=("127.0.0.2", 0))
            s.sendall(f"GET /org/r/resolve/main/a{i}.bin HTTP/1.1\r\n"
                      "Host: 127.0.0.1\r\n\r\n".encode())
            socks.append(s)
        running = stable_count(lambda: len(heads(up)))  # the job threads', stuck upstream
        queued(m, 20 - running)  # A's other questions wait
        tb, out = in_threads(ask, [(m.port, "/org/r/resolve/main/b0.bin", "127.0.0.3")])
        queued(m, 21 - running)  # and B's
        for k in range(2):
            gate.release()
            wait_for(lambda: len(heads(up)) == running + k + 1, 10, "no next question")
        gate.set()
        for s in socks:
            assert s.recv(64).startswith(b"HTTP/1.1 404")
            s.close()
        for t in tb:
            t.join(30)
        order = heads(up)
        b = [i for i, p in enumerate(order) if "/b0.bin" in p]
        assert out[0][0] == 404 and len(order) == 21, (out, order)
        assert b[0] == running + 1, (running, order)  # FIFO: 20
    finally:
        gate.set()
        up.close()


# ---- an outage -----------------------------------------------------------------

HF_NO_BACKOFF = ("import huggingface_hub.utils._http as h\n"
                 "h.time.sleep = lambda s: None  # its retries' backoff: not what is tested\n")


def test_head_and_get_agree_during_an_outage(mirror_of, tmp_path):
    """Upstream down: a file the cache holds whole is HEAD 200 and GET 200
    (by its branch: 302, stale); one it holds a block of is 504 to HEAD as
    to GET (HEAD said 200 from the kept metadata, and huggingface_hub then
    failed its GET with HfHubHTTPError 504). huggingface_hub, with no copy
    of its own, raises LocalEntryNotFoundError for it, as with the Hub down,
    and serves the whole one."""
    whole, part = os.urandom(100000), os.urandom(200000)
    up = Scripted(file_routes({"whole.bin": whole, "part.bin": part}))
    m = mirror_of(up, "--mirror-auth-ttl", "1")
    r = m.get(url("whole.bin"))
    assert r.status == 200 and r.body == whole
    r = m.request("GET", url("part.bin"), {"Range": "bytes=0-99"})
    assert r.status == 206 and r.body == part[:100]
    for name in ("whole.bin", "part.bin"):  # what main is: kept for an outage
        assert m.head(f"/org/r/resolve/main/{name}").status == 302
    up.go_down()
    # Once mirror_auth_ttl passed, the kept metadata answers, stale.
    wait_for(lambda: m.head("/org/r/resolve/main/whole.bin").header("X-Tensord-Stale"), 10,
             "no stale answer")
    for path in ("/org/r/resolve/main/part.bin", url("part.bin")):
        for method in ("HEAD", "GET"):
            r = m.request(method, path)
            assert r.status == 504, (method, path, r)
        assert "does not hold all of part.bin" in m.get(path).json()["error"]
    r = m.head("/org/r/resolve/main/whole.bin")
    assert r.status == 302 and r.header("X-Tensord-Stale"), r
    assert m.head(url("whole.bin")).status == 200
    assert m.get(url("whole.bin")).body == whole

    script = HF_NO_BACKOFF + (
        "from huggingface_hub import hf_hub_download\n"
        "print(open(hf_hub_download('org/r', 'whole.bin'), 'rb').read().hex())\n"
        "try:\n"
        "    hf_hub_download('org/r', 'part.bin')\n"
        "except Exception as e:\n"
        "    print(type(e).__name__)\n")
    out = subprocess.run([sys.executable, "-c", script], env=hf_env(m.port, tmp_path / "hf"),
                         capture_output=True, text=True, timeout=60)
    lines = out.stdout.split()
    assert lines == [whole.hex(), "LocalEntryNotFoundError"], (lines[-1:], out.stderr[-2000:])
