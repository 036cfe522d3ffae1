"""The scale-out recipe (docs/OPERATIONS.md "Scaling out"): two tensord
replicas over the same files behind nginx with proxy_cache and the slice
module, configured by config/nginx-tensord.conf as shipped. Downloads
through it (whole files with huggingface_hub, Range, resumes with If-Range)
are byte-exact whichever replica answers, repeated ones are cache hits,
and after a file changes a client never gets the old bytes for the branch
or the new commit."""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

import faultlib
import hubrepos
import tdutil

pytestmark = pytest.mark.slow  # three servers; skipped in the sanitizer pass
SLACK = faultlib.SLACK
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
CONF = os.path.join(tdutil.REPO, "config", "nginx-tensord.conf")
SLICE = 8 << 20


def nginx_conf(base, port, upstreams):
    """config/nginx-tensord.conf with this test's addresses and paths, in a
    minimal nginx.conf."""
    with open(CONF) as f:
        site = f.read()
    site = site.replace("/var/cache/nginx/tensord", os.path.join(base, "cache"))
    site = site.replace("server 127.0.0.1:8077;", f"server 127.0.0.1:{upstreams[0]};")
    site = site.replace("server 127.0.0.1:8078;", f"server 127.0.0.1:{upstreams[1]};")
    site = site.replace("listen 127.0.0.1:8080;", f"listen 127.0.0.1:{port};")
    assert site.count(str(upstreams[0])) == 1 and str(port) in site
    tmp = os.path.join(base, "tmp")
    os.makedirs(tmp, exist_ok=True)
    user = "user root;\n" if os.geteuid() == 0 else ""
    return (f"{user}worker_processes 1;\nerror_log {base}/error.log info;\n"
            f"pid {base}/nginx.pid;\nevents {{ worker_connections 256; }}\n"
            f"http {{\n  access_log {base}/access.log;\n"
            f"  client_body_temp_path {tmp}/body;\n  proxy_temp_path {tmp}/proxy;\n"
            f"  fastcgi_temp_path {tmp}/fcgi;\n  uwsgi_temp_path {tmp}/uwsgi;\n"
            f"  scgi_temp_path {tmp}/scgi;\n{site}\n}}\n")


@pytest.fixture(scope="module")
def farm():
    if not os.path.exists(NGINX):
        pytest.fail("nginx is not installed (make deps installs it)")
    v = subprocess.run([NGINX, "-V"], capture_output=True, text=True).stderr
    assert "--with-http_slice_module" in v, "this nginx has no slice module"
    base = tempfile.mkdtemp(prefix="tensord-scaleout-")
    root = os.path.join(base, "models")
    files = hubrepos.make_repos(root, big_bytes=20 << 20)  # three slices
    ds = []
    nginx = None
    try:
        for i in range(2):
            w = os.path.join(base, f"replica{i}")
            os.makedirs(w)
            ds.append(tdutil.Daemon(root, w).start().wait_hashed(60 * SLACK))
        port = tdutil.free_port()
        conf = os.path.join(base, "nginx.conf")
        with open(conf, "w") as f:
            f.write(nginx_conf(base, port, [d.port for d in ds]))
        nginx = subprocess.Popen([NGINX, "-c", conf, "-p", base, "-g", "daemon off;"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10 * SLACK
        while True:
            try:
                if tdutil.request(port, "GET", "/healthz", timeout=2).status == 200:
                    break
            except OSError:
                pass
            assert nginx.poll() is None, nginx.stderr.read().decode()
            assert time.monotonic() < deadline, "nginx did not start"
            time.sleep(0.05)
        yield {"port": port, "daemons": ds, "files": files, "root": root, "base": base}
        for d in ds:
            d.stop_checked()
    finally:
        if nginx and nginx.poll() is None:
            nginx.send_signal(signal.SIGQUIT)
            try:
                nginx.wait(10)
            except subprocess.TimeoutExpired:
                nginx.kill()
                nginx.wait()
        for d in ds:
            d.stop()
        shutil.rmtree(base, ignore_errors=True)


def get(farm, path, headers=None, method="GET"):
    return tdutil.request(farm["port"], method, path, headers, timeout=60)


def replica_hits(farm, path):
    """How many requests for path each replica's access log shows."""
    out = []
    for d in farm["daemons"]:
        with open(d.log_path, errors="replace") as f:
            out.append(sum(1 for line in f if path in line))
    return out


def download(farm, repo, filename, cache):
    env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{farm['port']}", HF_HUB_CACHE=cache,
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_TELEMETRY="1")
    env.pop("HF_TOKEN", None)
    code = ("import sys; from huggingface_hub import hf_hub_download\n"
            f"print(hf_hub_download({repo!r}, {filename!r}))")
    p = subprocess.run([tdutil.sys.executable, "-c", code], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    with open(p.stdout.strip().splitlines()[-1], "rb") as f:
        return f.read()


def test_downloads_through_the_cache(farm, tmp_path):
    files = farm["files"]["org/sharded"]
    c = hubrepos.commit_of(files)
    big = files["big.bin"]
    # Both replicas agree on what names the content.
    heads = [tdutil.request(d.port, "HEAD", f"/org/sharded/resolve/{c}/big.bin")
             for d in farm["daemons"]]
    assert {h.header("ETag") for h in heads} == {'"%s"' % hashlib.sha256(big).hexdigest()}
    # Whole files with the real client, twice (the second from the cache).
    for i in range(2):
        assert download(farm, "org/sharded", "big.bin", str(tmp_path / f"c{i}")) == big
        assert download(farm, "org/sharded", "config.json", str(tmp_path / f"c{i}")) == \
            files["config.json"]
    url = f"/org/sharded/resolve/{c}/big.bin"
    r = get(farm, url)
    assert r.status == 200 and r.body == big and r.header("X-Cache-Status") == "HIT", r
    assert r.header("X-Repo-Commit") == c
    # Ranges across slice boundaries, and a resume with If-Range.
    for a, b in ((0, 99), (SLICE - 10, SLICE + 10), (len(big) - 5000, len(big) - 1)):
        r = get(farm, url, {"Range": f"bytes={a}-{b}"})
        assert r.status == 206 and r.body == big[a:b + 1], (a, b, r)
    etag = r.header("ETag")
    r = get(farm, url, {"Range": f"bytes={SLICE * 2 + 7}-", "If-Range": etag})
    assert r.status == 206 and r.body == big[SLICE * 2 + 7:]
    r = get(farm, url, {"Range": "bytes=5-9", "If-Range": '"stale"'})
    assert r.status == 200 and r.body == big
    # The slices were fetched from both replicas.
    assert all(n > 0 for n in replica_hits(farm, url)), replica_hits(farm, url)


def test_branch_and_v1_are_never_stale(farm):
    files = farm["files"]["org/deep"]
    old_c = hubrepos.commit_of(files)
    old = files["top.json"]
    r = get(farm, "/org/deep/resolve/main/top.json")
    assert r.status == 302 and r.header("X-Cache-Status") != "HIT"
    assert get(farm, r.header("Location")).body == old
    assert get(farm, r.header("Location")).header("X-Cache-Status") == "HIT"
    path = os.path.join(farm["root"], "org/deep/top.json")
    with open(path, "wb") as f:
        f.write(b'["x"]')
    files = dict(files, **{"top.json": b'["x"]'})
    new_c = hubrepos.commit_of(files)
    deadline = time.monotonic() + 15 * SLACK
    seen = set()
    while time.monotonic() < deadline:
        r = get(farm, "/org/deep/resolve/main/top.json")
        seen.add(r.header("X-Repo-Commit"))
        assert r.header("X-Repo-Commit") in (old_c, new_c)
        # Never a stored redirect: each answer comes from a replica.
        assert r.header("X-Cache-Status") in (None, "", "MISS", "BYPASS", "EXPIRED"), r
        if all(tdutil.request(d.port, "GET", "/api/models/org/deep").json()["sha"] == new_c
               for d in farm["daemons"]):
            break
        time.sleep(0.1)
    for _ in range(4):  # both replicas, round robin
        r = get(farm, "/org/deep/resolve/main/top.json")
        assert r.header("X-Repo-Commit") == new_c
        body = get(farm, r.header("Location")).body
        assert body == b'["x"]'
        v1 = get(farm, "/v1/models/single/files/config.json")
        # /v1 answers revalidate: never stored by the cache.
        assert v1.status == 200 and v1.header("X-Cache-Status") != "HIT", v1
    # The old commit is the old content or gone, never the new bytes.
    r = get(farm, f"/org/deep/resolve/{old_c}/top.json")
    assert (r.status == 200 and r.body == old) or r.status == 404
