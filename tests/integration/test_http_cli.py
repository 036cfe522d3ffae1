"""The HTTP API's command line (issue 34, item 8): `python -m tensord` (the
installed `tensord-http` is tests/ops/test_python_package.py's), run as a
user runs it against a daemon serving the demo models and a bigger file:
every command's output compared with the files read independently
(NumPy and the safetensors package), a download resumed from a partial
file and one whose bytes do not match refused, progress bars, --help on
every command, and the exit status of each failure with its reason."""
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import gen_models
import tdutil

CLIENT = os.path.join(tdutil.REPO, "client", "python")
COMMANDS = ("ls", "info", "header", "get", "fetch", "download")


@pytest.fixture(scope="module")
def daemon():
    base = tempfile.mkdtemp(prefix="tensord-cli-")
    root = os.path.join(base, "models")
    gen_models.make_demo_models(root)
    rng = np.random.default_rng(3)
    big = rng.standard_normal((512, 1024)).astype(np.float32)  # 2 MiB: several pieces
    gen_models.write_safetensors(os.path.join(root, "big", "model.safetensors"),
                                 [("w", "F32", list(big.shape), big.tobytes())])
    os.makedirs(os.path.join(base, "work"))
    d = tdutil.Daemon(root, os.path.join(base, "work"), []).start()
    d.wait_hashed(60)
    d.root, d.base, d.big = root, base, big
    yield d
    d.stop_checked()
    shutil.rmtree(base, ignore_errors=True)


def cli(d, *args, cwd=None, url=None):
    env = dict(os.environ, PYTHONPATH=CLIENT)
    env.pop("TENSORD_URL", None)
    env.pop("TENSORD_TOKEN", None)
    return subprocess.run([sys.executable, "-m", "tensord", "--url",
                           url or f"http://127.0.0.1:{d.port}", *args], capture_output=True,
                          env=env, timeout=120, cwd=cwd)


def text(p):
    return p.stdout.decode(), p.stderr.decode()


def file_tensors(path):
    import safetensors.numpy
    return safetensors.numpy.load_file(path)


def test_help_everywhere(daemon):
    p = cli(daemon, "--help")
    assert p.returncode == 0 and all(c in p.stdout.decode() for c in COMMANDS)
    assert "Exit status" in p.stdout.decode()
    for c in COMMANDS:
        p = cli(daemon, c, "--help")
        assert p.returncode == 0 and p.stdout.decode().startswith(f"usage: tensord-http {c}"), c


def test_ls_info_header(daemon):
    out, _ = text(cli(daemon, "ls"))
    rows = [r.split() for r in out.strip().split("\n")]
    assert rows[0][:3] == ["NAME", "STATE", "TENSORS"]
    assert {r[0] for r in rows[1:]} == {"big", "demo-bf16", "demo-f32", "demo-sharded",
                                        "org/demo-i8"}
    assert json.loads(cli(daemon, "ls", "--json").stdout) == daemon.json("/v1/models") | {
        "hashing": json.loads(cli(daemon, "ls", "--json").stdout)["hashing"]}
    out, _ = text(cli(daemon, "info", "demo-sharded"))
    shard = os.path.join(daemon.root, "demo-sharded", "model-00001-of-00002.safetensors")
    with open(shard, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() in out
    assert "a.weight  F32    [8, 16]" in out and "b.scale   F32    []" in out
    header = json.loads(cli(daemon, "header", "demo-f32").stdout)
    assert header == daemon.json("/v1/models/demo-f32/header")
    one = json.loads(cli(daemon, "header", "demo-sharded", "--file",
                         "model-00001-of-00002.safetensors").stdout)
    assert set(one) == {"__metadata__", "a.weight", "a.bias"}


def test_get(daemon, tmp_path):
    w = file_tensors(os.path.join(daemon.root, "demo-f32", "model.safetensors"))["embed.weight"]
    out, _ = text(cli(daemon, "get", "demo-f32", "embed.weight", "--slice", "1"))
    assert out.startswith("embed.weight: F32 [16]\n")
    printed = out.split("\n", 1)[1]
    assert f"{w[1][0]:.6e}"[:6] in printed.replace(" ", "")
    for name, fmt in (("s.npy", None), ("s.raw", None), ("s.st.safetensors", None),
                      ("t.bin", "npy")):
        args = ["get", "demo-f32", "embed.weight", "--slice", "::-2,3:5", "-o",
                str(tmp_path / name)] + (["--format", fmt] if fmt else [])
        p = cli(daemon, *args)
        assert p.returncode == 0, p.stderr
        want = w[::-2, 3:5]
        if name.endswith(".npy") or fmt == "npy":
            got = np.load(tmp_path / name)
        elif name.endswith(".safetensors"):
            got = file_tensors(str(tmp_path / name))["embed.weight"]
        else:
            got = np.frombuffer((tmp_path / name).read_bytes(), np.float32).reshape(want.shape)
        assert np.array_equal(got, want), name
        assert not (tmp_path / (name + ".part")).exists()
    p = cli(daemon, "get", "big", "w", "-o", "-")  # standard output
    assert p.returncode == 0 and p.stdout == daemon.big.tobytes()


def test_fetch_tensor_parallel(daemon, tmp_path):
    tensors = file_tensors(os.path.join(daemon.root, "demo-f32", "model.safetensors"))
    for rank in range(3):
        out = tmp_path / f"rank{rank}.safetensors"
        p = cli(daemon, "fetch", "demo-f32", "--world", "3", "--rank", str(rank),
                "--rule", "layers.*.weight=1", "--rule", "*.bias=0", "-o", str(out))
        assert p.returncode == 0, p.stderr
        got = file_tensors(str(out))
        assert np.array_equal(got["layers.0.weight"],
                              np.array_split(tensors["layers.0.weight"], 3, axis=1)[rank])
        assert np.array_equal(got["layers.0.bias"],
                              np.array_split(tensors["layers.0.bias"], 3)[rank])
        assert np.array_equal(got["embed.weight"], tensors["embed.weight"])  # no rule: whole
    out = tmp_path / "some.safetensors"
    p = cli(daemon, "fetch", "demo-f32", "--slice-separator", "--tensor", "embed.weight:0:2",
            "--tensor", "layers.0.bias", "-o", str(out))
    assert p.returncode == 0, p.stderr
    got = file_tensors(str(out))
    assert list(got) == ["embed.weight", "layers.0.bias"]
    assert np.array_equal(got["embed.weight"], tensors["embed.weight"][0:2])


def test_download_resumes_and_checks(daemon, tmp_path):
    dest = tmp_path / "dl"
    p = cli(daemon, "--progress", "download", "demo-sharded", str(dest))
    out, err = text(p)
    assert p.returncode == 0, err
    names = sorted(os.listdir(os.path.join(daemon.root, "demo-sharded")))
    assert sorted(os.listdir(dest)) == names
    for n in names:
        with open(os.path.join(daemon.root, "demo-sharded", n), "rb") as a:
            assert (dest / n).read_bytes() == a.read(), n
        assert f"DOWNLOADED {n}" in out
    assert "demo-sharded" in err  # the progress bar
    out, _ = text(cli(daemon, "download", "demo-sharded", str(dest)))
    assert all(f"KEPT       {n}" in out for n in names)
    # a partial file, resumed from where it stopped
    big = tmp_path / "big"
    p = cli(daemon, "download", "big", str(big))
    assert p.returncode == 0
    full = (big / "model.safetensors").read_bytes()
    etag = daemon.head("/v1/models/big/files/model.safetensors").header("ETag")
    (big / "model.safetensors").unlink()
    (big / "model.safetensors.part").write_bytes(full[:1 << 20])
    (big / "model.safetensors.part.etag").write_text(etag)
    out, err = text(cli(daemon, "download", "big", str(big)))
    assert "RESUMED    model.safetensors" in out, out + err
    assert (big / "model.safetensors").read_bytes() == full
    assert sorted(os.listdir(big)) == ["model.safetensors"]
    # a partial file whose bytes are not the daemon's: refused, exit 1
    (big / "model.safetensors").unlink()
    (big / "model.safetensors.part").write_bytes(b"\xff" * (1 << 20))
    (big / "model.safetensors.part.etag").write_text(etag)
    p = cli(daemon, "download", "big", str(big))
    out, err = text(p)
    assert p.returncode == 1 and "MISMATCH   model.safetensors" in out, out + err
    assert os.listdir(big) == []


@pytest.mark.parametrize("args, status, reason", [
    (["info", "nosuch"], 2, 'no model named "nosuch"'),
    (["get", "demo-f32", "nosuch"], 2, 'has no tensor "nosuch"'),
    (["get", "demo-f32", "embed.weight", "--slice", "99"], 2, "out of range"),
    (["fetch", "demo-f32", "--world", "2", "-o", "x.safetensors"], 2,
     "--world and --rank go together"),
    (["fetch", "demo-f32", "--world", "2", "--rank", "0", "--rule", "nodim", "-o", "x"], 2,
     "is not GLOB=DIM"),
    (["get", "demo-f32", "embed.weight", "-o", "/nonexistent/dir/x.npy"], 2,
     "No such file or directory"),
    (["nosuchcommand"], 2, "invalid choice"),
    (["get", "demo-f32"], 2, "the following arguments are required: tensor"),
])
def test_errors_name_their_reason(daemon, tmp_path, args, status, reason):
    p = cli(daemon, *args, cwd=str(tmp_path))
    out, err = text(p)
    assert p.returncode == status, (out, err)
    assert reason in err and "Traceback" not in err, err


def test_unreachable_daemon(daemon):
    port = tdutil.free_port()
    p = cli(daemon, "ls", url=f"http://127.0.0.1:{port}")
    out, err = text(p)
    assert p.returncode == 2 and "cannot reach tensord" in err and "Traceback" not in err
    p = cli(daemon, "ls", url="ftp://x")
    assert p.returncode == 2 and "is not an http://" in p.stderr.decode()


def test_printing_as_python_calls_it(daemon):
    """main() with an output stream, as a program embedding it calls it."""
    sys.path.insert(0, CLIENT)
    from tensord import cli as tcli
    out = io.StringIO()
    assert tcli.main(["--url", f"http://127.0.0.1:{daemon.port}", "ls"], out=out) == 0
    assert "demo-f32" in out.getvalue()


@pytest.mark.parametrize("name", ["../evil", "/etc/evil", "a/b", "..", "x\\y", "m.part", ""])
def test_download_refuses_names_a_server_could_use_to_escape(tmp_path, name):
    """A hostile server's description cannot make download write outside
    DIR: names that are not plain file names are refused before any byte."""
    import http.server
    import threading
    doc = json.dumps({"name": "m", "state": "ready", "files": [
        {"name": name, "size": 1, "sha256": None, "etag": '"x"', "header_length": None}]}).encode()

    class Evil(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(doc)))
            self.end_headers()
            self.wfile.write(doc)

        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Evil)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        dest = tmp_path / "deep" / "dir"
        p = cli(None, "download", "m", str(dest), url=f"http://127.0.0.1:{srv.server_address[1]}")
        assert p.returncode == 2 and "not a plain file name: refused" in p.stderr.decode()
        assert not (tmp_path / "deep").exists() and not (tmp_path / "evil").exists()
    finally:
        srv.shutdown()
        srv.server_close()
