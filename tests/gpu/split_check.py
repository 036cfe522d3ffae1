#!/usr/bin/python3
"""The tensor-parallel check of tests/gpu/run.sh: one model held as the two
ranks of a split on one device, each rank bound zero-copy into its half of
a Megatron-style MLP by a worker process of its own, the halves' outputs
combined as the collectives would and compared with the unsplit model.

    split_check.py make DIR
    split_check.py run --port PORT --sock SOCK --device DEVICE --model NAME --model-dir DIR
    split_check.py worker SOCK NAME DEVICE RANK MODEL_DIR INPUT OUTPUT   (run starts two)

The model (make): an MLP in F32, 1024 -> fc1 -> 2049 -> fc2 -> 511, with
biases, in one safetensors file written here (12 MB: a rank's part is
smaller than the file even in 2 MiB CUDA granules). The split (RULES):
fc1's weight and bias cut on dim 0 (column-parallel; 2049 does not divide
by 2, so numpy.array_split gives rank 0 1025 rows and rank 1 1024), fc2's
weight on dim 1 (row-parallel: strided runs in the file), fc2's bias
matched by no rule and so held whole by both ranks.

Each check prints `PASS|FAIL|SKIP name: detail` (run.sh files them under
tensor-parallel/); the last line is `tensor-parallel checks: N failed`, and
the exit status is 1 when one failed:

  preload   POST .../gpu {"devices": [D, D], "split": {"world": 2, RULES}}:
            both ranks ready on D, each holding its partition's bytes only,
            their checksums summed
  workers   two workers hold a lease on their rank at once (the daemon counts
            one per rank); each opens it with framework="torch" and checks
            its mapped memory against the daemon's checksums (verify()),
            world, rank, split, and every tensor's info()["part"] and shape
            against numpy.array_split's cut of the file, and its values
            against that cut; binds the tensors as the parameters of its
            torch modules (nn.Parameter over the same storage) and proves
            every parameter is the daemon's memory: data_ptr == device_ptr
            on CUDA; on the host, the same memfd pages as info()["data"]
            (/proc/self/maps: the same file at the same offset, and no
            anonymous page in the mapping, so nothing was copied)
  outputs   for one input: the ranks' column-parallel outputs concatenated
            (all-gather) against fc1(x) of the unsplit model loaded from the
            file here, and the sum of the row-parallel partials (all-reduce)
            plus fc2's bias as the workers hold it against fc2(relu(fc1(x))):
            torch.allclose (rtol RTOL, atol ATOL: only the summation order
            differs), with the largest absolute difference
  evict     DELETE .../gpu: every rank gone once the workers have left

Without torch, workers and outputs say SKIP (make test has it: python3-torch).
"""
import argparse
import json
import os
import select
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import api  # noqa: E402
from check import FAILED, Skip, pythonpath, run_check, torch_device  # noqa: E402

FILE = "model.safetensors"
D_IN, HIDDEN, D_OUT, BATCH = 1024, 2049, 511, 5
WORLD = 2
RULES = [{"match": "fc1.*", "dim": 0}, {"match": "fc2.weight", "dim": 1}]
# How each tensor is cut (None: held whole), as RULES say; what the workers
# and the parent check the daemon against.
CUT = {"fc1.weight": 0, "fc1.bias": 0, "fc2.weight": 1, "fc2.bias": None}
RTOL, ATOL = 1e-5, 1e-5  # F32 sums of ~1,000 products of order 1
TIMEOUT = 120  # seconds for each wait: a preload, a worker's answer, an evict


# ---- the model and its local load -------------------------------------------------


def make(out):
    """Writes the MLP (weights scaled by 1/sqrt(fan_in): activations of
    order 1, so the tolerance is relative to numbers near 1)."""
    rng = np.random.default_rng(32)
    tensors = {
        "fc1.weight": rng.standard_normal((HIDDEN, D_IN)) / np.sqrt(D_IN),
        "fc1.bias": rng.standard_normal(HIDDEN) * 0.1,
        "fc2.weight": rng.standard_normal((D_OUT, HIDDEN)) / np.sqrt(HIDDEN),
        "fc2.bias": rng.standard_normal(D_OUT) * 0.1,
    }
    hdr, off, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, a in tensors.items():
        b = a.astype("<f4").tobytes()
        hdr[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, FILE), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_file(model_dir):
    """{name: float32 array} from the file's bytes, with NumPy only."""
    with open(os.path.join(model_dir, FILE), "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    out = {}
    for name, e in json.loads(blob[8:8 + n]).items():
        if name != "__metadata__":
            lo, hi = e["data_offsets"]
            out[name] = np.frombuffer(blob[8 + n + lo:8 + n + hi], "<f4").reshape(e["shape"])
    return out


def cut(a, name, rank):
    """numpy.array_split's part `rank` of tensor `name` as RULES cut it, and
    the part info the daemon must report: {"dim","start","stop","length"},
    or None for a tensor held whole."""
    dim = CUT[name]
    if dim is None:
        return a, None
    rows = np.array_split(np.arange(a.shape[dim]), WORLD)[rank]
    part = {"dim": dim, "start": int(rows[0]), "stop": int(rows[-1]) + 1, "length": a.shape[dim]}
    return np.array_split(a, WORLD, axis=dim)[rank], part


def need_torch():
    try:
        import torch
    except ImportError as e:
        raise Skip(f"torch not installed ({e})")
    # Real F32 products on every GPU (no TF32): the tolerance is F32's.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


# ---- a worker: one rank --------------------------------------------------------------


def mapping_of(addr):
    """The mapping of this process that holds addr: (start, end, perms,
    file offset, inode, path), from /proc/self/maps."""
    with open("/proc/self/maps") as f:
        for line in f:
            f6 = line.split(None, 5)
            lo, hi = (int(x, 16) for x in f6[0].split("-"))
            if lo <= addr < hi:
                return lo, hi, f6[1], int(f6[2], 16), f6[4], f6[5].strip() if len(f6) > 5 else ""
    return None


def anonymous_kb(start):
    """The Anonymous kB of the mapping that starts at start (/proc/self/smaps):
    the pages that a write copied out of the file."""
    with open("/proc/self/smaps") as f:
        inside = False
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                inside = int(head.split("-")[0], 16) == start
            elif inside and head == "Anonymous:":
                return int(line.split()[1])
    return None


def zero_copy(torch, p, info):
    """'' when parameter p is the daemon's memory of the tensor info
    describes, else why not."""
    if p.is_cuda:
        return "" if p.data_ptr() == info["device_ptr"] else \
            f"data_ptr {p.data_ptr():#x} is not the daemon's device_ptr {info['device_ptr']:#x}"
    # Host: torch gets a private copy-on-write view of the daemon's sealed
    # memfd, info["data"] the shared read-only one. The same pages when both
    # map the same file at the same offset and the view copied none.
    mp, md = mapping_of(p.data_ptr()), mapping_of(info["data"])
    if not mp or not md:
        return f"no mapping holds {p.data_ptr():#x} or {info['data']:#x}"
    off_p = p.data_ptr() - mp[0] + mp[3]
    off_d = info["data"] - md[0] + md[3]
    if mp[4] == "0" or (mp[4], mp[5], off_p) != (md[4], md[5], off_d):
        return (f"data_ptr is {mp[5] or 'anonymous'} (inode {mp[4]}) at {off_p}, the daemon's "
                f"memory {md[5]} (inode {md[4]}) at {off_d}")
    anon = anonymous_kb(mp[0])
    return "" if anon == 0 else f"{anon} kB of the view were copied"


def worker(sock, name, device, rank, model_dir, input_path, output_path):
    """Opens rank `rank` of the model, checks it, computes its half of the
    MLP for the input; prints one JSON line (the checks' findings), writes
    its outputs to output_path, and holds the lease until a line on stdin."""
    torch = need_torch()
    import torch.nn.functional as F
    import tensord

    class ColumnParallelLinear(torch.nn.Module):
        """Rank r's output features of a linear layer: its rows of the
        weight and of the bias. Its output is rank r's slice of the
        features (an all-gather puts them together)."""

        def __init__(self, weight, bias):
            super().__init__()
            self.weight = torch.nn.Parameter(weight, requires_grad=False)
            self.bias = torch.nn.Parameter(bias, requires_grad=False)

        def forward(self, x):
            return F.linear(x, self.weight, self.bias)

    class RowParallelLinear(torch.nn.Module):
        """Rank r's input features of a linear layer: its columns of the
        weight, the bias whole. Its output is a partial sum; the bias is
        added once, after the all-reduce."""

        def __init__(self, weight, bias):
            super().__init__()
            self.weight = torch.nn.Parameter(weight, requires_grad=False)
            self.bias = torch.nn.Parameter(bias, requires_grad=False)

        def forward(self, x):
            return F.linear(x, self.weight)

    m = tensord.connect(sock).open(name, device=device, rank=rank, framework="torch")
    problems = []
    try:
        m.verify()  # the mapped memory against the daemon's checksums
    except tensord.TensordError as e:
        problems.append(f"verify: {e}")
    want_split = {"world": WORLD, "rank": rank, "rules": RULES}
    if (m.world, m.rank, m.split) != (WORLD, rank, want_split):
        problems.append(f"world {m.world}, rank {m.rank}, split {m.split}; expected {want_split}")
    files = read_file(model_dir)
    if sorted(m) != sorted(files):
        problems.append(f"tensors {sorted(m)}, the file has {sorted(files)}")
    t = {}
    for k, a in files.items():
        want, part = cut(a, k, rank)
        info = m.info(k)
        if info["part"] != part or list(info["shape"]) != list(want.shape):
            problems.append(f"{k}: part {info['part']} shape {list(info['shape'])}; "
                            f"numpy.array_split gives {part} {list(want.shape)}")
            continue
        t[k] = m[k]
        if not torch.equal(t[k].cpu(), torch.from_numpy(np.ascontiguousarray(want))):
            problems.append(f"{k}: values differ from numpy.array_split's part of the file")
    if problems:
        print(json.dumps({"rank": rank, "problems": problems}), flush=True)
        return 1
    fc1 = ColumnParallelLinear(t["fc1.weight"], t["fc1.bias"])
    fc2 = RowParallelLinear(t["fc2.weight"], t["fc2.bias"])
    params = {"fc1.weight": fc1.weight, "fc1.bias": fc1.bias,
              "fc2.weight": fc2.weight, "fc2.bias": fc2.bias}
    x = torch.from_numpy(np.load(input_path)).to(t["fc1.weight"].device)
    with torch.no_grad():
        h = fc1(x)
        y = fc2(torch.relu(h))
    np.savez(output_path, fc1=h.cpu().numpy(), fc2_partial=y.cpu().numpy(),
             fc2_bias=fc2.bias.cpu().numpy())
    # After the computation: the view must still have copied nothing.
    for k, p in params.items():
        why = zero_copy(torch, p, m.info(k))
        if why:
            problems.append(f"{k}: {why}")
    print(json.dumps({"rank": rank, "problems": problems, "device": str(x.device),
                      "zero_copy": len(params) - len(problems),
                      "parts": {k: m.info(k)["part"] for k in m}}), flush=True)
    sys.stdin.readline()  # the lease is held until the parent has counted it
    return 0


# ---- the parent: preload, workers, outputs, evict ------------------------------------


def gpu_path(a):
    return f"/v1/models/{a.model}/gpu"


def get_instances(a):
    return json.loads(api.call(a.port, "GET", gpu_path(a))[1]).get("instances") or []


def wait_for(what, pred, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def check_preload(a):
    body = json.dumps({"devices": [a.device] * WORLD, "split": {"world": WORLD, "rules": RULES}})
    st, ans = api.call(a.port, "POST", gpu_path(a), body)
    assert st in (200, 202), f"POST answered {st}: {ans[:300]}"

    def ended():  # loaded, and the checksums of the allocations summed
        inst = get_instances(a)
        return inst if inst and all(i["state"] != "loading" and i.get("checksums") != "pending"
                                    for i in inst) else None
    done = wait_for("both ranks to end loading and sum their allocations", ended)
    assert sorted(i.get("rank") for i in done) == list(range(WORLD)), done
    files = read_file(a.model_dir)
    sizes = []
    for i in sorted(done, key=lambda i: i["rank"]):
        assert i["state"] == "ready" and i["world"] == WORLD, i
        assert i.get("checksums") == "ready", \
            f"rank {i['rank']}: checksums {i.get('checksums')} ({i.get('checksums_reason')})"
        if not a.device.startswith("GPU-"):
            assert i["device"] == a.device, f"rank {i['rank']} on {i['device']}, not {a.device}"
        want = sum(cut(arr, k, i["rank"])[0].nbytes for k, arr in files.items())
        got = i["progress"]["bytes_total"]
        assert got == want, f"rank {i['rank']} holds {got} bytes, its partition is {want}"
        sizes.append(str(got))
    whole = sum(arr.nbytes for arr in files.values())
    return (f"ranks 0 and 1 ready on {a.device}, holding {' and '.join(sizes)} bytes "
            f"of the {whole} (fc2.bias whole in each)")


def last_lines(p, n=3):
    """Worker p's last lines of stderr, on one line (a check's line is one)."""
    with open(p.stderr_path, errors="replace") as f:
        return " | ".join(f.read().strip().splitlines()[-n:])


def read_line(p, deadline):
    """One line of worker p's stdout, waiting until deadline; raises with
    its stderr when it ends or times out first."""
    buf = b""
    fd = p.stdout.fileno()
    while not buf.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise AssertionError("a worker did not answer in time")
        chunk = os.read(fd, 65536)
        if not chunk:
            p.wait(timeout=30)
            raise AssertionError(f"a worker exited {p.returncode}: {last_lines(p)}")
        buf += chunk
    return json.loads(buf)


def check_workers(a, state):
    torch = need_torch()
    rng = np.random.default_rng(7)
    state["x"] = x = rng.standard_normal((BATCH, D_IN)).astype("<f4")
    np.save(os.path.join(state["dir"], "x.npy"), x)
    env = dict(os.environ, PYTHONPATH=pythonpath())
    procs = state["procs"]
    for rank in range(WORLD):
        # stderr to a file: a pipe nobody reads while waiting could fill.
        err_path = os.path.join(state["dir"], f"rank{rank}.err")
        with open(err_path, "w") as err:
            p = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "worker", a.sock, a.model, a.device,
                 str(rank), a.model_dir, os.path.join(state["dir"], "x.npy"),
                 os.path.join(state["dir"], f"rank{rank}.npz")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env)
        p.stderr_path = err_path
        procs.append(p)
    deadline = time.monotonic() + TIMEOUT
    answers = [read_line(p, deadline) for p in procs]
    for ans in answers:
        assert not ans["problems"], f"rank {ans['rank']}: " + "; ".join(ans["problems"])
    # Both leases held at once, one on each rank.
    leases = {i["rank"]: i["leases"] for i in get_instances(a)}
    assert leases == {r: 1 for r in range(WORLD)}, f"leases by rank {leases}, expected one each"
    for p in procs:
        p.stdin.write(b"done\n")
        p.stdin.flush()
        p.wait(timeout=TIMEOUT)
        assert p.returncode == 0, f"a worker exited {p.returncode}: {last_lines(p)}"
    state["outputs"] = [np.load(os.path.join(state["dir"], f"rank{r}.npz")) for r in range(WORLD)]
    cuts = ", ".join(f"{k} {'[%(start)d:%(stop)d] of %(length)d on dim %(dim)d' % p if p else 'whole'}"
                     for k, p in answers[1]["parts"].items())
    return (f"2 workers ({torch.__name__} {torch.__version__} on {answers[0]['device']}), a lease "
            f"on each rank at once; every part as numpy.array_split cuts it (rank 1: {cuts}); "
            f"{sum(ans['zero_copy'] for ans in answers)} parameters, all the daemon's memory")


def reference(torch, a, dev):
    """The unsplit model from the file, without the daemon: the safetensors
    package's load where installed, else the file's bytes through NumPy."""
    try:
        from safetensors.torch import load_file
        sd, how = load_file(os.path.join(a.model_dir, FILE), device="cpu"), "safetensors"
    except ImportError:
        sd = {k: torch.from_numpy(v.copy()) for k, v in read_file(a.model_dir).items()}
        how = "the file's bytes through NumPy (no safetensors package)"
    fc1, fc2 = torch.nn.Linear(D_IN, HIDDEN), torch.nn.Linear(HIDDEN, D_OUT)
    fc1.load_state_dict({"weight": sd["fc1.weight"], "bias": sd["fc1.bias"]})
    fc2.load_state_dict({"weight": sd["fc2.weight"], "bias": sd["fc2.bias"]})
    return fc1.to(dev), fc2.to(dev), how


def check_outputs(a, state):
    torch = need_torch()
    if "outputs" not in state:
        raise Skip("no workers' outputs (workers did not pass)")
    dev = torch_device(a)
    fc1, fc2, how = reference(torch, a, dev)
    x = torch.from_numpy(state["x"]).to(dev)
    with torch.no_grad():
        h_ref = fc1(x)
        y_ref = fc2(torch.relu(h_ref))
    outs = [{k: torch.from_numpy(o[k]).to(dev) for k in o.files} for o in state["outputs"]]
    # The collectives, by hand: all-gather of the column-parallel outputs,
    # all-reduce of the row-parallel partials, then the bias, once.
    h = torch.cat([o["fc1"] for o in outs], dim=-1)
    bias = outs[0]["fc2_bias"]
    assert all(torch.equal(o["fc2_bias"], bias) for o in outs), "the ranks hold different fc2.bias"
    y = sum(o["fc2_partial"] for o in outs) + bias
    found = []
    for what, got, want in (("fc1 (column-parallel, gathered)", h, h_ref),
                            ("fc2 (row-parallel, reduced, + bias)", y, y_ref)):
        assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, unsplit {tuple(want.shape)}"
        diff = (got - want).abs().max().item()
        assert torch.allclose(got, want, rtol=RTOL, atol=ATOL), \
            f"{what}: differs from the unsplit model by up to {diff:.3g} (rtol {RTOL}, atol {ATOL})"
        found.append(f"{what} {tuple(got.shape)} max abs diff {diff:.3g}")
    return (f"{'; '.join(found)}: allclose (rtol {RTOL}, atol {ATOL}) with the unsplit model "
            f"from {how}, on {dev}")


def check_evict(a):
    st, body = api.call(a.port, "DELETE", gpu_path(a))
    assert st in (200, 202), f"DELETE answered {st}: {body[:300]}"
    wait_for("every rank to go", lambda: json.loads(api.call(a.port, "GET", gpu_path(a))[1])
             .get("state") == "none")
    return "both ranks gone"


def run(a):
    with tempfile.TemporaryDirectory(prefix="tensord-split-") as tmp:
        state = {"procs": [], "dir": tmp}
        try:
            # The workers run whatever the preload check found: where the
            # ranks are there, what they see says more than its failure.
            run_check("preload", check_preload, a)
            run_check("workers", check_workers, a, state)
            run_check("outputs", check_outputs, a, state)
        finally:
            for p in state["procs"]:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        run_check("evict", check_evict, a)
    print(f"tensor-parallel checks: {len(FAILED)} failed" +
          (f" ({', '.join(FAILED)})" if FAILED else ""))
    return 1 if FAILED else 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        sock, name, device, rank, model_dir, inp, out = sys.argv[2:9]
        return worker(sock, name, device, int(rank), model_dir, inp, out)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make", help="write the model")
    mk.add_argument("dir")
    r = sub.add_parser("run", help="the checks, against a running daemon")
    for opt in ("--port", "--sock", "--device", "--model", "--model-dir"):
        r.add_argument(opt, required=True)
    a = ap.parse_args()
    if a.cmd == "make":
        make(a.dir)
        return 0
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
