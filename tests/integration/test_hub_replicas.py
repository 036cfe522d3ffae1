"""Replicas: two daemons serving copies of the same files (made as `cp -r`
makes them: new inodes, new modification times) answer every
commit-addressed URL of the Hugging Face endpoint byte for byte the same,
headers included (but Date, which is the time of the answer). API.md
promises it: a commit id names content, so what it addresses may depend on
nothing else (issue 23, item 9)."""
import json
import os
import shutil
import socket
import tempfile
import urllib.parse

import pytest

import faultlib
import hubrepos
import tdutil

SLACK = faultlib.SLACK


def copy_as_cp_r(src, dst):
    """cp -r: contents copied, metadata not; then every file's and
    directory's mtime moved to a time of its own, so no two files of the two
    copies share one (cp -r within the same second could)."""
    shutil.copytree(src, dst, symlinks=True, copy_function=shutil.copyfile)
    for i, (d, dirs, files) in enumerate(os.walk(dst)):
        for j, name in enumerate(files):
            p = os.path.join(d, name)
            if not os.path.islink(p):
                t = 1_000_000_000 + 1000 * i + j
                os.utime(p, (t, t))


@pytest.fixture(scope="module")
def replicas():
    base = tempfile.mkdtemp(prefix="tensord-replicas-")
    roots = [os.path.join(base, "a", "models"), os.path.join(base, "b", "models")]
    files = hubrepos.make_repos(roots[0], big_bytes=(10 << 20) + 1)
    card = b"---\nlicense: apache-2.0\ntags: [a, b]\nn: 1.5\n---\n# carded\n"
    os.makedirs(os.path.join(roots[0], "org", "carded"))
    with open(os.path.join(roots[0], "org", "carded", "README.md"), "wb") as f:
        f.write(card)
    files["org/carded"] = {"README.md": card}
    copy_as_cp_r(roots[0], roots[1])
    daemons = []
    try:
        for r in roots:
            d = tdutil.Daemon(r, os.path.dirname(r))
            daemons.append(d.start())
        for d in daemons:
            d.wait_hashed(60 * SLACK)
        yield daemons, files
        for d in daemons:
            d.stop_checked()
    finally:
        for d in daemons:
            d.stop()
        shutil.rmtree(base, ignore_errors=True)


def raw_answer(port, method, path, headers=(), body=None):
    """The answer's exact bytes (status line, headers in order, body), with
    the Date line taken out."""
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in headers]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}")
    msg = ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(msg)
        out = b""
        while True:
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            out += chunk
    head, sep, rest = out.partition(b"\r\n\r\n")
    kept = [l for l in head.split(b"\r\n") if not l.lower().startswith(b"date:")]
    return b"\r\n".join(kept) + sep + rest


def quote_path(p):
    return urllib.parse.quote(p, safe="/")


def commit_addressed(repo, commit, files, dirs):
    """(method, path, headers, body) for every commit-addressed URL of repo."""
    api = f"/api/models/{repo}"
    out = [("GET", f"{api}/revision/{commit}", (), None),
           ("GET", f"{api}/revision/{commit}?expand=cardData", (), None),
           ("HEAD", f"{api}/revision/{commit}", (), None),
           ("GET", f"{api}/commits/{commit}", (), None),
           ("GET", f"{api}/tree/{commit}", (), None),
           ("GET", f"{api}/tree/{commit}?recursive=true", (), None),
           ("POST", f"{api}/paths-info/{commit}", (("Content-Type", "application/json"),),
            json.dumps({"paths": sorted(files) + sorted(dirs)}).encode())]
    out += [("GET", f"{api}/tree/{commit}/{quote_path(d)}", (), None) for d in sorted(dirs)]
    for p in sorted(files):
        for kind in ("resolve", "raw"):
            url = f"/{repo}/{kind}/{commit}/{quote_path(p)}"
            out += [("GET", url, (), None), ("HEAD", url, (), None),
                    ("GET", url, (("Range", "bytes=0-9"),), None)]
    return out


def test_commit_addressed_answers_are_byte_identical(replicas):
    (a, b), files = replicas
    n = 0
    for repo in sorted(files):
        commit = hubrepos.commit_of(files[repo])
        dirs = {os.path.dirname(p) for p in files[repo]} - {""}
        dirs |= {"/".join(d.split("/")[:i]) for d in dirs for i in range(1, d.count("/") + 1)}
        for method, path, headers, body in commit_addressed(repo, commit, files[repo], dirs):
            ra = raw_answer(a.port, method, path, headers, body)
            rb = raw_answer(b.port, method, path, headers, body)
            assert ra.startswith(b"HTTP/1.1 2"), (method, path, ra[:300])
            assert ra == rb, f"{method} {path} differs:\n{ra[:1500]!r}\n{rb[:1500]!r}"
            n += 1
    assert n > 100
    # the card is in the commit's document (so it is compared above)
    commit = hubrepos.commit_of(files["org/carded"])
    doc = json.loads(raw_answer(a.port, "GET", f"/api/models/org/carded/revision/{commit}")
                     .partition(b"\r\n\r\n")[2])
    assert doc["cardData"] == {"license": "apache-2.0", "tags": ["a", "b"], "n": 1.5}
