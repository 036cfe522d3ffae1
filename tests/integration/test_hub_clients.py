"""The tools users point at a Hub, run unchanged against tensord with
HF_ENDPOINT: the `hf` command line (`hf download` into a --local-dir; with
tokens, also transformers). transformers' from_pretrained is in
test_hub_transformers.py; the repos, the daemon and the fixtures are in
hubclients.py. Every file is compared byte for byte with the
one on disk, each client's local metadata with the commit and ETags
hubrepos.py and hashlib compute independently, and errors must be the
clients' own messages.
"""
import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading

import pytest

import hubrepos
import tdutil
from hubclients import ODD, SENTENCE, TINY, child_env, want_ids
from hubclients import hub, run  # noqa: F401  (fixtures)

pytestmark = pytest.mark.filterwarnings("ignore")

BIN = os.path.dirname(sys.executable)
# huggingface_hub 2.x installs its CLI as `hf`; older releases also (or only)
# had `huggingface-cli`. Each one the pinned release installs is tested.
CLIS = [c for c in ("hf", "huggingface-cli") if os.path.exists(os.path.join(BIN, c))]


def _git_blob(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _etag(path, data):
    """The ETag the Hub gives: the SHA-256 for an LFS file, else the git blob id."""
    if path.endswith(".safetensors") or len(data) > 10 * 1024 * 1024:
        return hashlib.sha256(data).hexdigest()
    return _git_blob(data)


def _tree(d):
    """{relative path: bytes} of every file below d but the client's .cache."""
    out = {}
    for r, dirs, names in os.walk(d):
        dirs[:] = [x for x in dirs if not (r == d and x == ".cache")]
        for n in names:
            p = os.path.join(r, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, d)] = f.read()
    return out


def _assert_local_dir(hub, repo, d, want_paths):
    files = hub.files[repo]
    got = _tree(d)
    assert sorted(got) == sorted(want_paths), f"{repo}: files in {d}"
    commit = hubrepos.commit_of(files)
    for path in want_paths:
        assert got[path] == files[path], f"{repo}/{path} differs from the file on disk"
        # What the client wrote down about it: commit, ETag, timestamp.
        meta = os.path.join(d, ".cache", "huggingface", "download", path + ".metadata")
        with open(meta) as f:
            lines = f.read().splitlines()
        assert lines[0] == commit and lines[1] == _etag(path, files[path]), f"{repo}/{path}: {lines}"


def _clean(text):
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


# ---------------------------------------------------------------------------
# The command line


@pytest.fixture(params=CLIS or ["hf"])
def cli(request):
    path = os.path.join(BIN, request.param)
    assert os.path.exists(path), f"the pinned huggingface_hub installed no CLI into {BIN}"
    return path


@pytest.mark.parametrize("repo", hubrepos.REPOS + (ODD, TINY))
def test_cli_downloads_a_whole_repo_into_a_local_dir(hub, run, cli, tmp_path, repo):
    d = tmp_path / "out"
    p = run([cli, "download", repo, "--local-dir", str(d)])
    assert p.returncode == 0, _clean(p.stdout + p.stderr)
    assert str(d) in _clean(p.stdout)
    _assert_local_dir(hub, repo, str(d), list(hub.files[repo]))


def test_cli_download_again_keeps_good_files_and_repairs_changed_ones(hub, run, cli, tmp_path):
    d = str(tmp_path / "out")
    assert run([cli, "download", "org/sd", "--local-dir", d]).returncode == 0
    keep = os.path.join(d, "unet", "config.json")
    keep_ns = os.stat(keep).st_mtime_ns
    st = os.path.join(d, "unet", "diffusion_pytorch_model.safetensors")
    with open(st, "r+b") as f:  # same size, one bit off
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    with open(os.path.join(d, "vae", "config.json"), "w") as f:
        f.write('{"changed": true}')
    # Edited later: the client trusts its metadata for a second after a
    # download (huggingface_hub's _local_folder allows 1 s of mtime slack).
    for path in (st, os.path.join(d, "vae", "config.json")):
        t = os.stat(path).st_mtime_ns + 5 * 10**9
        os.utime(path, ns=(t, t))
    p = run([cli, "download", "org/sd", "--local-dir", d])
    assert p.returncode == 0, _clean(p.stdout + p.stderr)
    _assert_local_dir(hub, "org/sd", d, list(hub.files["org/sd"]))
    assert os.stat(keep).st_mtime_ns == keep_ns, "an unchanged file was downloaded again"


def test_cli_downloads_named_files_and_patterns(hub, run, cli, tmp_path):
    cases = [
        (["single", "config.json"], "single", ["config.json"]),
        (["org/sd", "unet/config.json", "model_index.json"], "org/sd",
         ["unet/config.json", "model_index.json"]),
        # The client matches with fnmatch, where * crosses "/".
        (["org/sd", "--include", "*.json"], "org/sd",
         ["model_index.json", "scheduler/scheduler_config.json", "unet/config.json",
          "vae/config.json"]),
        (["org/sd", "--include", "unet/*", "--include", "vae/*", "--exclude", "*.json"], "org/sd",
         ["unet/diffusion_pytorch_model.safetensors", "vae/diffusion_pytorch_model.safetensors"]),
        (["org/sharded", "--include", "model-*.safetensors"], "org/sharded",
         ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]),
        (["org/deep", "--include", "a/b/*"], "org/deep", ["a/b/c/d.txt"]),
        ([ODD, "ü b&c#%20+.txt", "sub dir/a=b;c,d.json"], ODD,
         ["ü b&c#%20+.txt", "sub dir/a=b;c,d.json"]),
    ]
    for i, (args, repo, want) in enumerate(cases):
        d = str(tmp_path / f"out{i}")
        p = run([cli, "download"] + args + ["--local-dir", d])
        assert p.returncode == 0, f"{args}: {_clean(p.stdout + p.stderr)}"
        _assert_local_dir(hub, repo, d, want)


def test_cli_downloads_by_commit(hub, run, cli, tmp_path):
    commit = hubrepos.commit_of(hub.files["org/sharded"])
    d = str(tmp_path / "out")
    p = run([cli, "download", "org/sharded", "--revision", commit, "--local-dir", d])
    assert p.returncode == 0, _clean(p.stdout + p.stderr)
    _assert_local_dir(hub, "org/sharded", d, list(hub.files["org/sharded"]))
    # Into the cache: the path printed is the commit's snapshot.
    commit = hubrepos.commit_of(hub.files["single"])
    p = run([cli, "download", "single", "config.json", "--revision", commit])
    assert p.returncode == 0, _clean(p.stdout + p.stderr)
    printed = re.search(r"(/\S+/snapshots/[0-9a-f]{40}/config\.json)", _clean(p.stdout))
    assert printed, _clean(p.stdout)
    assert f"/snapshots/{commit}/config.json" in printed.group(1)
    with open(printed.group(1), "rb") as f:
        assert f.read() == hub.files["single"]["config.json"]


class _CuttingProxy:
    """A TCP relay to the daemon that closes the connection once, after `cut`
    bytes of the first response to a GET of `target` without a Range
    header, and records the request lines with their Range headers and the
    status lines of the answers."""

    def __init__(self, port, target, cut):
        self.upstream, self.target, self.cut = port, target, cut
        self.done = False
        self.requests, self.statuses = [], []
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.sock.close()

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.upstream))
            state = {"armed": False, "sent": 0}
            threading.Thread(target=self._up, args=(c, u, state), daemon=True).start()
            threading.Thread(target=self._down, args=(u, c, state), daemon=True).start()

    def _up(self, c, u, state):
        try:
            while data := c.recv(65536):
                head = data.split(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
                if head[0].split(" ")[0] in ("GET", "HEAD"):
                    rng = [h.split(":", 1)[1].strip() for h in head[1:] if h.lower().startswith("range:")]
                    with self.lock:
                        self.requests.append((head[0], rng[0] if rng else None))
                        if (head[0].startswith("GET ") and self.target in head[0] and not rng
                                and not self.done):
                            state["armed"] = True
                u.sendall(data)
        except OSError:
            pass
        finally:
            for s in (u, c):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _down(self, u, c, state):
        try:
            while data := u.recv(65536):
                if data.startswith(b"HTTP/1.1 "):
                    with self.lock:
                        self.statuses.append(data.split(b"\r\n")[0].decode())
                if state["armed"]:
                    room = self.cut - state["sent"]
                    if len(data) >= room:
                        c.sendall(data[:room])
                        with self.lock:
                            self.done = True
                        break
                    state["sent"] += len(data)
                c.sendall(data)
        except OSError:
            pass
        finally:
            for s in (u, c):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass


def test_cli_resumes_a_broken_download_with_range(hub, run, cli, tmp_path):
    """A connection that breaks mid-file: the client asks for the rest with
    Range and gets a 206 it can append (huggingface_hub 2.x resumes within
    a run only: a new run starts over in a fresh temporary file)."""
    data = hub.files["org/sharded"]["big.bin"]
    commit = hubrepos.commit_of(hub.files["org/sharded"])
    # The client writes what it got in 10 MiB chunks (DOWNLOAD_CHUNK_SIZE):
    # cut after the first, or it starts over without Range.
    proxy = _CuttingProxy(hub.port, f"/resolve/{commit}/big.bin", 10 * 1024 * 1024 + 300_000)
    try:
        d = str(tmp_path / "out")
        p = run([cli, "download", "org/sharded", "big.bin", "--local-dir", d],
                env_extra={"HF_ENDPOINT": f"http://127.0.0.1:{proxy.port}"})
    finally:
        proxy.close()
    out = _clean(p.stdout + p.stderr)
    assert p.returncode == 0, out
    assert proxy.done, f"the proxy never cut the download: {proxy.requests}"
    with open(os.path.join(d, "big.bin"), "rb") as f:
        assert f.read() == data
    ranged = [r for line, r in proxy.requests if "big.bin" in line and r]
    assert ranged and re.fullmatch(r"bytes=[1-9][0-9]*-", ranged[-1]), proxy.requests
    assert any(st.startswith("HTTP/1.1 206") for st in proxy.statuses), proxy.statuses


def test_cli_downloads_a_folder_and_dry_runs(hub, run, cli, tmp_path):
    d = str(tmp_path / "out")
    p = run([cli, "download", "org/sd", "unet/", "--local-dir", d])
    assert p.returncode == 0, _clean(p.stdout + p.stderr)
    _assert_local_dir(hub, "org/sd", d, ["unet/config.json", "unet/diffusion_pytorch_model.safetensors"])
    p = run([cli, "download", "org/sharded", "--dry-run"])
    out = _clean(p.stdout + p.stderr)
    assert p.returncode == 0, out
    assert f"Will download {len(hub.files['org/sharded'])} files" in out, out
    for path in hub.files["org/sharded"]:
        assert path in out, out


def test_cli_cache_verify_checks_files_against_the_servers_hashes(hub, run, cli, tmp_path):
    """`hf cache verify` hashes what is cached (SHA-256 for LFS files, git blob
    SHA-1 for the others) and compares with the tree tensord lists."""
    repo, files = "org/sharded", hub.files["org/sharded"]
    assert run([cli, "download", repo]).returncode == 0
    p = run([cli, "cache", "verify", repo])
    out = _clean(p.stdout + p.stderr)
    assert p.returncode == 0 and f"Verified {len(files)} file(s)" in out, out
    snap = tmp_path / "cache" / "models--org--sharded" / "snapshots" / hubrepos.commit_of(files)
    for path in ("config.json", "model-00002-of-00002.safetensors"):
        blob = os.path.realpath(snap / path)
        os.chmod(blob, 0o644)
        with open(blob, "r+b") as f:
            f.write(b"X")
    p = run([cli, "cache", "verify", repo])
    out = _clean(p.stdout + p.stderr)
    assert p.returncode != 0, out
    for path in ("config.json", "model-00002-of-00002.safetensors"):
        assert f"{path}: expected {_etag(path, files[path])}" in out, out
    assert "model-00001-of-00002.safetensors:" not in out, out


def test_cli_models_info_and_ls(hub, run, cli):
    """`hf models info` / `hf models ls` read the /api/models documents."""
    def js(args):
        p = run([cli, "models"] + args + ["--format", "json"])
        assert p.returncode == 0, _clean(p.stdout + p.stderr)
        return json.loads(p.stdout)
    info = js(["info", "org/sharded"])
    files = hub.files["org/sharded"]
    assert info["id"] == "org/sharded" and info["sha"] == hubrepos.commit_of(files)
    assert {s["rfilename"]: s["size"] for s in info["siblings"]} == {k: len(v) for k, v in files.items()}
    assert sorted(m["id"] for m in js(["ls", "--author", "org"])) == sorted(
        r for r in hub.files if r.startswith("org/"))
    assert [m["id"] for m in js(["ls", "--search", "TINY"])] == [TINY]
    tree = js(["ls", "org/deep", "-R"])
    assert sorted(e["path"] for e in tree if "size" in e) == sorted(hub.files["org/deep"])
    p = run([cli, "models", "info", "org/nope"])
    assert p.returncode != 0 and "Error: Model 'org/nope' not found." in _clean(p.stderr + p.stdout)


@pytest.mark.parametrize("args, message", [
    (["org/nope"], "Error: Model 'org/nope' not found."),
    (["nope", "config.json"], "Error: Model 'nope' not found."),
    (["single", "nope.json"], "Error: File not found in model 'single'."),
    (["org/sd", "unet/nope.safetensors"], "Error: File not found in model 'org/sd'."),
    (["single", "--revision", "v1.0"], "Error: Revision not found in model 'single'."),
    (["single", "--revision", "0" * 40], "Error: Revision not found in model 'single'."),
])
def test_cli_errors_are_the_clients_own_messages(hub, run, cli, tmp_path, args, message):
    d = tmp_path / "out"
    p = run([cli, "download"] + args + ["--local-dir", str(d)])
    out = _clean(p.stdout + p.stderr)
    assert p.returncode != 0, out
    assert message in out, out
    for bad in ("Traceback", "JSONDecodeError", "Expecting value", "[object Object]"):
        assert bad not in out, out
    if d.exists():
        assert _tree(str(d)) == {}, "a failed download left files behind"


def test_cli_and_transformers_with_tokens(hub, tmp_path):
    """With auth_token_file set: HF_TOKEN or --token is sent as a bearer
    token and works; none, or a wrong one, is a 401 the CLI reports in
    words, never a traceback; `hf auth login --token` checks and stores
    one."""
    token = "hub-read-token-0123456789abcdef"
    tokens = tmp_path / "tokens"
    tokens.write_text(f"read {token}\n")
    tokens.chmod(0o600)
    d = tdutil.Daemon(hub.root, str(tmp_path), ["--auth-token-file", str(tokens)],
                      probe_headers={"Authorization": f"Bearer {token}"})
    d.start()
    try:
        env = child_env(d.port, tmp_path / "cache")
        cli = os.path.join(BIN, CLIS[0] if CLIS else "hf")

        def run(argv, **extra):
            return subprocess.run(argv, env=dict(env, **extra), capture_output=True, text=True,
                                  timeout=120, cwd=str(tmp_path))
        for extra, message in (({}, "a bearer token is required"),
                               ({"HF_TOKEN": "wrong"}, "Invalid credentials in Authorization header")):
            p = run([cli, "download", "single", "--local-dir", str(tmp_path / "no")], **extra)
            out = _clean(p.stdout + p.stderr)
            assert p.returncode != 0 and "401" in out and message in out, out
            assert "Traceback" not in out, out
        p = run([cli, "download", "org/sd", "--local-dir", str(tmp_path / "env")], HF_TOKEN=token)
        assert p.returncode == 0, _clean(p.stdout + p.stderr)
        _assert_local_dir(hub, "org/sd", str(tmp_path / "env"), list(hub.files["org/sd"]))
        p = run([cli, "download", "single", "--local-dir", str(tmp_path / "arg"), "--token", token])
        assert p.returncode == 0, _clean(p.stdout + p.stderr)
        _assert_local_dir(hub, "single", str(tmp_path / "arg"), list(hub.files["single"]))
        # `hf auth login --token` checks the token with /api/whoami-v2 and
        # stores it under the name that gives; what is stored then goes
        # with every request (no HF_TOKEN), and HfApi().whoami() names it.
        p = run([cli, "auth", "login", "--token", "wrong"])
        out = _clean(p.stdout + p.stderr)
        assert p.returncode != 0 and "Invalid user token" in out, out
        p = run([cli, "auth", "login", "--token", token])
        out = _clean(p.stdout + p.stderr)
        assert p.returncode == 0 and "Token is valid (permission: read)" in out, out
        assert "Login successful" in out and "tensord-read" in out, out
        p = run([cli, "auth", "whoami"])
        assert p.returncode == 0 and "tensord-read" in _clean(p.stdout + p.stderr), p.stdout
        p = run([sys.executable, "-c", "import json\nfrom huggingface_hub import HfApi\n"
                 "print(json.dumps(HfApi().whoami()))"])
        assert p.returncode == 0, p.stderr
        me = json.loads(p.stdout.splitlines()[-1])
        assert me["name"] == "tensord-read" and me["auth"]["accessToken"]["role"] == "read"
        p = run([cli, "download", "single", "config.json", "--local-dir", str(tmp_path / "login")])
        assert p.returncode == 0, _clean(p.stdout + p.stderr)
        p = run([cli, "auth", "logout"])
        assert p.returncode == 0, _clean(p.stdout + p.stderr)
        code = ("import json\nfrom transformers import AutoConfig, AutoTokenizer\n"
                f"c = AutoConfig.from_pretrained({TINY!r}, token={token!r})\n"
                f"t = AutoTokenizer.from_pretrained({TINY!r}, token={token!r})\n"
                f"print(json.dumps([c.n_layer, t({SENTENCE!r})['input_ids']]))")
        p = run([sys.executable, "-c", code], HF_HUB_CACHE=str(tmp_path / "tcache"))
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout.splitlines()[-1]) == [2, want_ids(hub)]
    finally:
        d.stop_checked()
