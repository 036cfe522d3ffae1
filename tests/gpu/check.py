#!/usr/bin/python3
"""The real-model checks of tests/gpu/run.sh, against a running daemon that
serves the model prepared by tests/gpu/prepare_model.py (all-MiniLM-L6-v2,
F16, two shards) as REPO.

    HF_ENDPOINT=http://127.0.0.1:PORT check.py --url http://127.0.0.1:PORT
        --sock SOCK --device cuda:0|host --model-dir DIR --repo REPO [--legacy]

Each check prints one line, PASS, FAIL or SKIP with the reason (a package
the machine lacks, a check that needs a GPU); the exit status is 1 when any
failed. The checks:

  hub_files            huggingface_hub.snapshot_download through the endpoint:
                       every file byte for byte as on disk
  transformers         AutoModel.from_pretrained through the endpoint and from
                       the directory: identical last_hidden_state
  sentence_transformers  SentenceTransformer the same way: identical embeddings
  preload              POST .../gpu to the device, ready
  zero_copy_workers    two worker processes open the preloaded model; with
                       torch, load_state_dict(assign=True) into the model and
                       every parameter's data_ptr is the daemon's memory
                       (the tensor's device_ptr), outputs identical to a local
                       load; on the host, every array is the mapping itself,
                       read-only, with the files' bytes
  write_isolated       a worker writing a shared weight in place fails (CUDA:
                       an illegal address; host: SIGSEGV on the read-only
                       mapping) and only that worker: the other computes the
                       same outputs again, the daemon answers /healthz
  evict_while_leased   DELETE while a worker holds the model: draining, new
                       opens refused, the worker's outputs unchanged; none
                       once it has gone
  legacy_cupy          (--legacy, CUDA) each allocation's legacy cudaIpcMemHandle
                       opened with cupy in this process: the shard's bytes
"""
import argparse
import base64
import glob
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
SENTENCES = ["The daemon shares one copy of the weights.",
             "Two workers read the same GPU memory without copying it.",
             "tensord"]
FAILED = []


def pythonpath():
    """The binding's sources first, then what PYTHONPATH already has (run.sh
    puts the binding's carried dependencies there)."""
    return os.pathsep.join(p for p in (os.path.join(REPO_ROOT, "client", "python"),
                                       os.environ.get("PYTHONPATH")) if p)


def report(kind, name, detail):
    print(f"{kind} {name}: {detail}", flush=True)
    if kind == "FAIL":
        FAILED.append(name)


def run_check(name, fn, *args):
    try:
        out = fn(*args)
    except Skip as e:
        report("SKIP", name, str(e))
        return None
    except Exception as e:  # a check that breaks is a failed check, with why
        report("FAIL", name, f"{type(e).__name__}: {e}")
        return None
    report("PASS", name, out)
    return out


class Skip(Exception):
    pass


def http(url, method="GET", body=None):
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def gpu_state(a):
    return json.loads(http(f"{a.url}/v1/models/{a.repo}/gpu")[1])


def wait_state(a, pred, timeout=300):
    deadline = time.monotonic() + timeout
    while True:
        s = gpu_state(a)
        if pred(s):
            return s
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out in state {s['state']}")
        time.sleep(0.05)


def torch_device(a):
    """The torch device of a daemon device: cpu for host, cuda:N as is (a
    UUID: the first GPU, which is what run.sh names by UUID)."""
    if a.device == "host":
        return "cpu"
    return a.device if a.device.startswith("cuda") else "cuda:0"


def from_pretrained(cls, src, dtype, **kw):
    """cls.from_pretrained with dtype (transformers >= 4.56), or torch_dtype."""
    try:
        return cls.from_pretrained(src, dtype=dtype, **kw)
    except TypeError:
        return cls.from_pretrained(src, torch_dtype=dtype, **kw)


def need_transformers():
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError as e:
        raise Skip(f"not installed ({e})")
    if not transformers.utils.is_torch_available():
        raise Skip(f"transformers {transformers.__version__} turns torch off "
                   f"(torch {torch.__version__}: it needs a newer one)")
    return torch, transformers


# ---- through the Hub endpoint ------------------------------------------------


def check_hub_files(a):
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise Skip("huggingface_hub not installed")
    with tempfile.TemporaryDirectory() as cache:
        path = snapshot_download(a.repo, cache_dir=cache, endpoint=a.url)
        n = 0
        for f in sorted(glob.glob(os.path.join(a.model_dir, "**", "*"), recursive=True)):
            if os.path.isdir(f):
                continue
            rel = os.path.relpath(f, a.model_dir)
            with open(f, "rb") as x, open(os.path.join(path, rel), "rb") as y:
                assert x.read() == y.read(), f"{rel} differs"
            n += 1
    return f"{n} files byte-exact"


def check_transformers(a):
    torch, transformers = need_transformers()
    dev = torch_device(a)
    dtype = torch.float16 if dev != "cpu" else torch.float32
    tok = transformers.AutoTokenizer.from_pretrained(a.model_dir)
    inputs = tok(SENTENCES, padding=True, return_tensors="pt").to(dev)
    outs = []
    with tempfile.TemporaryDirectory() as cache:
        for src in (a.model_dir, a.repo):
            model = from_pretrained(transformers.AutoModel, src, dtype, cache_dir=cache)
            model = model.to(dev).eval()
            with torch.no_grad():
                outs.append(model(**inputs).last_hidden_state)
    assert torch.equal(outs[0], outs[1]), "outputs differ"
    return f"last_hidden_state {tuple(outs[0].shape)} identical ({dev}, {dtype})"


def check_sentence_transformers(a):
    need_transformers()
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise Skip(f"sentence-transformers not installed ({e})")
    import torch
    dev = torch_device(a)
    embs = []
    with tempfile.TemporaryDirectory() as cache:
        for src in (a.model_dir, a.repo):
            st = SentenceTransformer(src, device=dev, cache_folder=cache)
            embs.append(st.encode(SENTENCES, convert_to_tensor=True))
    assert torch.equal(embs[0], embs[1]), "embeddings differ"
    return f"embeddings {tuple(embs[0].shape)} identical ({dev})"


# ---- shared memory -----------------------------------------------------------

# A worker: opens the model, checks it is zero-copy, prints one JSON line of
# results, then per line on stdin: "again" (recompute, print), "write" (write
# a shared weight in place), or anything else (exit).
WORKER = r"""
import ctypes, hashlib, json, sys
import tensord
sock, repo, model_dir, device = sys.argv[1:5]
c = tensord.connect(sock)
m = c.open(repo)
if device == "host":
    arrays = {k: m[k] for k in m}
    zero = sum(a.__array_interface__["data"][0] == m.info(k)["data"] for k, a in arrays.items())
    ro = sum(not a.flags.writeable for a in arrays.values())
    def outputs():
        return {k: hashlib.sha256(a.tobytes()).hexdigest() for k, a in arrays.items()}
    def write():
        k = max(arrays, key=lambda k: arrays[k].nbytes)
        ctypes.memmove(m.info(k)["data"], b"\xff" * 8, 8)  # the mapping is read-only
    info = {"tensors": len(arrays), "zero_copy": zero, "read_only": ro}
else:
    import torch, transformers
    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    cfg = transformers.AutoConfig.from_pretrained(model_dir)
    model = transformers.AutoModel.from_config(cfg).to(device=device, dtype=torch.float16).eval()
    keys = set(model.state_dict())
    sd = {k: m[k] for k in m}
    res = model.load_state_dict({k: v for k, v in sd.items() if k in keys}, strict=False, assign=True)
    params = dict(model.named_parameters())
    zero = sum(p.data_ptr() == m.info(k)["device_ptr"] for k, p in params.items())
    inputs = tok(json.loads(sys.argv[5]), padding=True, return_tensors="pt").to(device)
    def outputs():
        with torch.no_grad():
            out = model(**inputs).last_hidden_state.float().cpu().numpy()
        return hashlib.sha256(out.tobytes()).hexdigest()
    def write():
        with torch.no_grad():
            params[max(params, key=lambda k: params[k].numel())].add_(1.0)
        torch.cuda.synchronize()
    info = {"parameters": len(params), "zero_copy": zero, "missing": res.missing_keys,
            "unused": sorted(set(sd) - keys)}
print(json.dumps({**info, "generation": m.generation, "outputs": outputs()}), flush=True)
for line in sys.stdin:
    if line.strip() == "again":
        print(json.dumps({"outputs": outputs()}), flush=True)
    elif line.strip() == "write":
        try:
            write()
            print(json.dumps({"write": "succeeded"}), flush=True)
        except Exception as e:
            print(json.dumps({"write": "failed", "error": str(e)[:300]}), flush=True)
            sys.exit(3)
    else:
        break
"""


class Worker:
    def __init__(self, a):
        env = dict(os.environ, PYTHONPATH=pythonpath())
        device = "host" if a.device == "host" else torch_device(a)
        self.p = subprocess.Popen([sys.executable, "-c", WORKER, a.sock, a.repo, a.model_dir,
                                   device, json.dumps(SENTENCES)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)
        self.first = self.read()

    def read(self):
        line = self.p.stdout.readline()
        if not line:
            self.p.wait(timeout=60)
            raise AssertionError(f"worker exited {self.p.returncode}: {self.p.stderr.read()[-800:]}")
        return json.loads(line)

    def ask(self, what):
        self.p.stdin.write(what + "\n")
        self.p.stdin.flush()
        return self.read()

    def end(self):
        if self.p.poll() is None:
            try:
                self.p.communicate("quit\n", timeout=60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def reference_outputs(a):
    """What the workers must compute: from the files, with no daemon."""
    if a.device == "host":
        import numpy as np
        out = {}
        for f in sorted(glob.glob(os.path.join(a.model_dir, "*.safetensors"))):
            with open(f, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                hdr = json.loads(fh.read(n))
                data = fh.read()
            for k, e in hdr.items():
                if k != "__metadata__":
                    b, end = e["data_offsets"]
                    out[k] = hashlib.sha256(np.frombuffer(data[b:end], np.uint8).tobytes()).hexdigest()
        return out
    torch, transformers = need_transformers()
    dev = torch_device(a)
    tok = transformers.AutoTokenizer.from_pretrained(a.model_dir)
    model = from_pretrained(transformers.AutoModel, a.model_dir, torch.float16).to(dev).eval()
    with torch.no_grad():
        out = model(**tok(SENTENCES, padding=True, return_tensors="pt").to(dev)).last_hidden_state
    return hashlib.sha256(out.float().cpu().numpy().tobytes()).hexdigest()


def check_preload(a):
    st, body = http(f"{a.url}/v1/models/{a.repo}/gpu", "POST",
                    json.dumps({"device": a.device}).encode())
    assert st in (200, 202), (st, body[:300])
    s = wait_state(a, lambda s: s["state"] in ("ready", "failed"))
    assert s["state"] == "ready", s.get("reason")
    io = s["preload"]["io"]
    return (f"{len(s['allocations'])} allocations, {s['progress']['bytes_total']} bytes, "
            f"{io['page_cache_bytes']} from the page cache, {io['disk_bytes']} from the disk")


def check_workers(a, workers):
    if a.device != "host":
        need_transformers()
    ref = reference_outputs(a)
    for i in range(2):
        workers.append(Worker(a))
    for w in workers:
        f = w.first
        if a.device == "host":
            assert f["zero_copy"] == f["tensors"] == f["read_only"] == len(ref), f
        else:
            assert f["zero_copy"] == f["parameters"] and not f["missing"], f
        assert f["outputs"] == ref, "a worker's outputs differ from a local load"
    s = gpu_state(a)
    assert s["leases"] == 2, f"the daemon counts {s['leases']} leases"
    what = (f"{workers[0].first.get('tensors') or workers[0].first['parameters']} "
            "arrays/parameters each, all the daemon's memory, outputs identical to a local load")
    return what


def check_write_isolated(a, workers):
    if len(workers) < 2:
        raise Skip("no workers (zero_copy_workers did not run)")
    victim, other = workers
    victim.p.stdin.write("write\n")
    victim.p.stdin.flush()
    line = victim.p.stdout.readline()
    victim.p.wait(timeout=60)
    if a.device == "host":
        assert victim.p.returncode == -signal.SIGSEGV, \
            f"the write did not fault: exit {victim.p.returncode}, {line!r}"
        how = "SIGSEGV in the writer"
    else:
        ans = json.loads(line) if line else {}
        assert ans.get("write") == "failed", f"the write did not fail: {ans}"
        assert "illegal" in ans.get("error", "").lower(), ans
        how = f"the writer got: {ans['error'][:80]}"
    assert other.ask("again")["outputs"] == other.first["outputs"], "the other worker changed"
    assert http(f"{a.url}/healthz")[0] == 200
    wait_state(a, lambda s: s["leases"] == 1, timeout=30)
    workers.remove(victim)
    return f"{how}; the other worker's outputs unchanged; the daemon fine"


def check_evict_while_leased(a, workers):
    if not workers:
        raise Skip("no worker left")
    w = workers[0]
    st, body = http(f"{a.url}/v1/models/{a.repo}/gpu", "DELETE")
    assert st == 202 and json.loads(body)["state"] == "draining", (st, body[:200])
    refused = subprocess.run([sys.executable, "-c",
                              "import sys, tensord; tensord.connect(sys.argv[1]).open(sys.argv[2])",
                              a.sock, a.repo], capture_output=True, text=True,
                             env=dict(os.environ,
                                      PYTHONPATH=pythonpath()))
    assert refused.returncode != 0, "an open succeeded on an evicted model"
    assert w.ask("again")["outputs"] == w.first["outputs"], "outputs changed after the evict"
    w.end()
    workers.remove(w)
    s = wait_state(a, lambda s: s["state"] == "none", timeout=30)
    return f"draining, new opens refused, outputs unchanged; {s['state']} after the last lease"


def ask_socket(sock_path, obj):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(sock_path)
    b = json.dumps(obj).encode()
    s.sendall(struct.pack("<I", len(b)) + b)
    data, fds = b"", []
    while len(data) < 4 or len(data) < 4 + struct.unpack("<I", data[:4])[0]:
        msg, anc, _f, _a = s.recvmsg(1 << 20, socket.CMSG_SPACE(4 * 64))
        for level, typ, cdata in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds += list(struct.unpack(f"{len(cdata) // 4}i", cdata[:len(cdata) // 4 * 4]))
        assert msg, "the daemon closed the connection"
        data += msg
    return json.loads(data[4:]), fds, s


def check_legacy_cupy(a):
    if a.device == "host" or not a.legacy:
        raise Skip("legacy CUDA IPC handles are CUDA's (run with a GPU device and --legacy)")
    try:
        import cupy
    except ImportError as e:
        raise Skip(f"cupy not installed ({e})")
    check_preload(a)
    ans, fds, conn = ask_socket(a.sock, {"op": "open", "model": a.repo})
    try:
        assert ans.get("ok"), ans
        n = 0
        for al in ans["allocations"]:
            with open(os.path.join(a.model_dir, al["file"]), "rb") as f:
                blob = f.read()
            (hn,) = struct.unpack("<Q", blob[:8])
            want = blob[8 + hn:]
            with cupy.cuda.Device(al["device_id"]):
                ptr = cupy.cuda.runtime.ipcOpenMemHandle(base64.b64decode(al["raw_handle"]["b64"]))
                try:
                    mem = cupy.cuda.UnownedMemory(ptr, al["byte_size"], None)
                    arr = cupy.ndarray((al["byte_size"],), cupy.uint8,
                                       cupy.cuda.MemoryPointer(mem, 0))
                    assert arr.get().tobytes() == want, f"{al['file']} differs"
                finally:
                    cupy.cuda.runtime.ipcCloseMemHandle(ptr)
            n += 1
    finally:
        for fd in fds:
            os.close(fd)
        conn.close()
    return f"{n} legacy handles opened with cupy, every byte equal to the shards"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--sock", required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--legacy", action="store_true")
    a = ap.parse_args()
    run_check("hub_files", check_hub_files, a)
    run_check("transformers", check_transformers, a)
    run_check("sentence_transformers", check_sentence_transformers, a)
    workers = []
    try:
        if run_check("preload", check_preload, a) is not None:
            run_check("zero_copy_workers", check_workers, a, workers)
            run_check("write_isolated", check_write_isolated, a, workers)
            run_check("evict_while_leased", check_evict_while_leased, a, workers)
    finally:
        for w in workers:
            w.end()
    run_check("legacy_cupy", check_legacy_cupy, a)
    print(f"real-model checks: {len(FAILED)} failed" + (f" ({', '.join(FAILED)})" if FAILED else ""))
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
