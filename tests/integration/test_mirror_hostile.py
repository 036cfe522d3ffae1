"""A mirror's /v1, S3 and Hub routes against a hostile upstream and hostile
clients (issue 33, attacked): a scripted upstream (test_mirror_upstream's
Scripted) that lies once, and clients that name what they should not. The
oracles are the bytes the script serves and what it was asked.

Each test starts its own mirror; the whole file takes a few seconds."""
import hashlib
import http.client
import json
import os
import re
import socket
import struct
import threading

import tdutil
from test_mirror_upstream import Scripted, ask, mirror_of, wait_for  # noqa: F401 (a fixture)

COMMIT = "cd" * 20


def sha(b):
    return hashlib.sha256(b).hexdigest()


def safetensors(tensors):
    """A safetensors file of [(name, raw bytes)], U8 each, in that order."""
    header, off = {}, 0
    for name, raw in tensors:
        header[name] = {"dtype": "U8", "shape": [len(raw)], "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(raw for _, raw in tensors)


def repo_routes(files, serve=None):
    """An upstream of repo org/r at COMMIT holding files {name: bytes}: its
    document, and HEAD and ranged GET of each file. serve(name, range_start)
    gives the bytes a GET is answered from (files[name] by default)."""
    def doc(h, m):
        sib = [{"rfilename": n, "size": len(b), "lfs": {"sha256": sha(b), "size": len(b)}}
               for n, b in files.items()]
        return 200, {}, json.dumps({"id": "org/r", "sha": COMMIT, "siblings": sib}).encode()

    def file(h, m):
        name = m.group(2)
        if name not in files:
            return 404, {"X-Error-Code": "EntryNotFound"}, b'{"error":"no"}'
        data = files[name]
        if h.command == "HEAD":
            return 200, {"X-Repo-Commit": COMMIT, "X-Linked-Etag": f'"{sha(data)}"',
                         "X-Linked-Size": str(len(data)), "ETag": f'"{sha(data)}"'}, b""
        r = re.fullmatch(r"bytes=(\d+)-(\d+)", h.headers.get("Range", ""))
        a, b = int(r.group(1)), min(int(r.group(2)), len(data) - 1)
        body = serve(name, a) if serve else data
        return 206, {"Content-Range": f"bytes {a}-{b}/{len(data)}", "X-Repo-Commit": COMMIT,
                     "ETag": f'"{sha(data)}"'}, body[a:b + 1]
    return {r"/api/models/org/r/revision/main\?blobs=true": doc,
            r"/org/r/resolve/(main|[0-9a-f]{40})/(.+)": file}


def test_model_built_from_bytes_the_hash_refused_is_built_again(mirror_of):
    """The upstream answers a cold file's first block once with another
    header (same size: tensors a and b trade places), which the /v1 model
    is built from; the hash refuses the file, which is fetched again, right
    this time. The model is built again from the bytes the cache now holds:
    tensor a is a's bytes. It kept the lie's offsets, and served b's bytes
    as a (of a file that was complete and checked) until main moved."""
    big = os.urandom(200000)  # the file spans blocks: the header is read before the hash ends
    a, b = bytes(range(16)), bytes(range(100, 116))
    good = safetensors([("a", a), ("b", b), ("c", big)])
    lie = safetensors([("b", b), ("a", a), ("c", big)])
    assert len(lie) == len(good)
    lies = [1]

    def serve(name, start):
        if start == 0 and lies[0]:
            lies[0] -= 1
            return lie
        return good
    up = Scripted(repo_routes({"model.safetensors": good}, serve))
    try:
        m = mirror_of(up)
        r = m.get("/v1/models/org/r/tensors/a")
        assert r.status == 200 and r.body == a, r  # the lie, consistent with itself
        # A download of the whole file: the hash refuses the lie (the answer
        # is cut), and the next one is the file, checked.
        for _ in range(3):
            try:
                r = m.get(f"/org/r/resolve/{COMMIT}/model.safetensors")
                if r.status == 200 and r.body == good:
                    break
            except (OSError, http.client.HTTPException):  # cut: the hash did not match
                pass
        assert m.get(f"/v1/blobs/sha256:{sha(good)}").body == good
        for name, want in (("a", a), ("b", b)):
            r = m.get(f"/v1/models/org/r/tensors/{name}")
            assert r.status == 200 and r.body == want, (name, r, r.body)
    finally:
        up.close()


def test_names_that_climb_out_of_the_upstream_route_are_refused(mirror_of):
    """A bucket "..--x" was repo "../x", which the mirror asked the upstream
    about with its own token as /api/x/revision/main (libcurl resolves dot
    segments); a revision ".." made /org/r/resolve/../x a HEAD of /org/r/x
    with the caller's. Both are refused without a word to the upstream."""
    up = Scripted({r".*": lambda h, m: (404, {"X-Error-Code": "RepoNotFound"}, b"{}")})
    try:
        m = mirror_of(up)
        for path in ("/s3/..--x", "/s3/%2e%2e--x/key", "/s3/x--..", "/s3/x--.", "/s3/--x",
                     "/s3/x--", "/s3/.--x"):
            r = m.get(path)
            assert r.status == 404 and b"<Code>NoSuchBucket</Code>" in r.body, (path, r)
        assert up.seen == [], up.seen  # recorded before it answers, so before the mirror does
        for path in ("/org/r/resolve/../x", "/org/r/resolve/%2e%2e/x", "/org/r/raw/./x",
                     "/api/models/org/r/revision/..", "/api/models/org/r/revision/%2E%2E"):
            r = m.get(path)
            assert r.status == 400, (path, r)
        assert up.seen == [], up.seen
        r = m.get("/s3/org--r")  # a bucket that names a repo is asked about
        assert r.status == 404 and up.count(r"^/api/models/org/r/revision/main") == 1, up.seen
    finally:
        up.close()


def test_an_older_revisions_document_does_not_turn_a_repo_back(mirror_of):
    """A client without a token asks for an old revision's document: the
    repos the mirror lists (/v1/models, the console, ListBuckets) keep the
    commit main names. It was turned back to the old one."""
    new, old = "1" * 40, "2" * 40

    def doc(h, m):
        sha_ = old if m.group(1) == old else new
        return 200, {}, json.dumps({"id": "org/r", "sha": sha_, "siblings": []}).encode()
    up = Scripted({r"/api/models/org/r(?:/revision/(main|[0-9a-f]{40}))?": doc})
    try:
        m = mirror_of(up)

        def listed():
            return [r["commit"] for r in m.json("/v1/models")["models"] if r["name"] == "org/r"]
        assert m.get("/api/models/org/r").status == 200
        assert listed() == [new]
        r = m.get(f"/api/models/org/r/revision/{old}")
        assert r.status == 200 and r.json()["sha"] == old
        assert listed() == [new]
        assert m.get("/api/models/org/r/revision/main").status == 200
        assert listed() == [new]
    finally:
        up.close()


JOB_BUILDS = 2  # mirror/mirror_job.h MIRROR_JOB_BUILDS (of MIRROR_JOB_THREADS, 4)


def repos_routes(repos, stalled, gate):
    """An upstream of repos {"org/x": {name: bytes}} at COMMIT: their
    documents, and HEAD and ranged GET of their files; a GET of a repo in
    `stalled` waits for gate (an Event) before it answers, as an upstream
    that accepts and says nothing."""
    def doc(h, m):
        files = repos.get(m.group(1))
        if files is None:
            return 404, {"X-Error-Code": "RepoNotFound"}, b'{"error":"no"}'
        sib = [{"rfilename": n, "size": len(b), "lfs": {"sha256": sha(b), "size": len(b)}}
               for n, b in files.items()]
        return 200, {}, json.dumps({"id": m.group(1), "sha": COMMIT, "siblings": sib}).encode()

    def file(h, m):
        data = repos.get(m.group(1), {}).get(m.group(3))
        if data is None:
            return 404, {"X-Error-Code": "EntryNotFound"}, b'{"error":"no"}'
        if h.command == "HEAD":
            return 200, {"X-Repo-Commit": COMMIT, "X-Linked-Etag": f'"{sha(data)}"',
                         "X-Linked-Size": str(len(data)), "ETag": f'"{sha(data)}"'}, b""
        if m.group(1) in stalled:
            gate.wait(30)
        r = re.fullmatch(r"bytes=(\d+)-(\d+)", h.headers.get("Range", ""))
        a, b = int(r.group(1)), min(int(r.group(2)), len(data) - 1)
        return 206, {"Content-Range": f"bytes {a}-{b}/{len(data)}", "X-Repo-Commit": COMMIT,
                     "ETag": f'"{sha(data)}"'}, data[a:b + 1]
    return {r"/api/models/(org/[^/]+)/revision/main\?blobs=true": doc,
            r"/(org/[^/]+)/resolve/(main|[0-9a-f]{40})/(.+)": file}


def test_stalled_model_builds_leave_the_hub_a_thread_and_free_theirs(mirror_of):
    """One client asks for four /v1 models whose weight files the upstream
    never sends: at most MIRROR_JOB_BUILDS of their builds run (each waits
    for a header), so another client's Hub question is answered at once
    (it waited for the 60 s stall timeout: four builds took the four job
    threads). The client leaves: the running builds stop and the queued
    ones go (abandoned: 4), so another model is built at once (the
    stopped builds held their threads until the stall timeout)."""
    # Each its own bytes: one file in the cache would be one fetch.
    repos = {f"org/s{i}": {"model.safetensors": safetensors([("t", bytes([i]) * 64)])}
             for i in range(4)}
    repos["org/good"] = {"model.safetensors": safetensors([("t", bytes([9]) * 64)]),
                         "config.json": b"{}"}
    gate = threading.Event()
    up = Scripted(repos_routes(repos, {f"org/s{i}" for i in range(4)}, gate))
    try:
        m = mirror_of(up)
        socks = []
        for i in range(4):
            s = socket.create_connection(("127.0.0.1", m.port), timeout=10,
                                         source_address=("127.0.0.2", 0))
            s.sendall(f"GET /v1/models/org/s{i} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            socks.append(s)

        def stalled_gets():
            with up.lock:
                return sum(1 for meth, p in up.seen if meth == "GET" and "/resolve/" in p
                           and "/org/s" in p)
        wait_for(lambda: stalled_gets() >= JOB_BUILDS, 10, "no build reached the upstream")
        status, _, took = ask(m.port, "/org/good/resolve/main/config.json", "127.0.0.3", 5)
        assert status == 302 and took < 2, (status, took)
        assert stalled_gets() == JOB_BUILDS
        assert m.json("/v1/metrics")["mirror"]["questions_waiting"] == 4 - JOB_BUILDS

        for s in socks:
            s.close()
        wait_for(lambda: tdutil.prom_counter(m, "tensord_mirror_questions_abandoned_total") == 4,
                 10, "the builds of the client that left were not stopped")
        status, _, took = ask(m.port, "/v1/models/org/good", "127.0.0.3", 5)
        assert status == 200 and took < 2, (status, took)
        assert stalled_gets() == JOB_BUILDS  # the queued ones never asked
        gate.set()
        r = m.get("/v1/models/org/s0")  # asked anew, not handed the stopped build's end
        assert r.status == 200 and r.json()["tensors"]["t"]["shape"] == [64], r
    finally:
        gate.set()
        up.close()


def test_an_index_over_the_parsers_bound_is_refused_unfetched(mirror_of):
    """The upstream lists a model's index at more than the safetensors
    index parser reads (ST_INDEX_MAX_LEN): the /v1 model is 502 naming the
    bound, and no byte of the index is asked for (it was fetched whole, up
    to the cache's cap, before the parser refused it)."""
    weights = safetensors([("t", bytes(range(64)))])
    big = 100000001  # core/format/st_index.h ST_INDEX_MAX_LEN + 1

    def doc(h, m):
        sib = [{"rfilename": "model.safetensors", "size": len(weights),
                "lfs": {"sha256": sha(weights), "size": len(weights)}},
               {"rfilename": "model.safetensors.index.json", "size": big,
                "lfs": {"sha256": "ee" * 32, "size": big}}]
        return 200, {}, json.dumps({"id": "org/r", "sha": COMMIT, "siblings": sib}).encode()
    routes = repo_routes({"model.safetensors": weights})
    routes[r"/api/models/org/r/revision/main\?blobs=true"] = doc
    up = Scripted(routes)
    try:
        m = mirror_of(up)
        r = m.get("/v1/models/org/r")
        assert r.status == 502, r
        msg = r.json()["error"]["message"]
        assert "model.safetensors.index.json" in msg and "100000000 bytes" in msg, msg
        assert up.count(r"index\.json") == 0, up.seen
    finally:
        up.close()
