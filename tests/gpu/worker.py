#!/usr/bin/python3
"""Worker 2 of tests/gpu/run.sh: opens the preloaded model through the
Python binding (PyTorch tensors on a GPU, NumPy arrays on the host),
compares every tensor with what the safetensors package loads from the
files, prints one JSON line, waits for a line on stdin (the script evicts
the model meanwhile) and compares again: the memory must stay valid while
the lease is held.

    worker.py SOCK MODEL MODEL_DIR DEVICE
"""
import glob, json, os, sys, time
import numpy as np
import tensord
sock, model, mdir, device = sys.argv[1:5]
host = device == "host"
t0 = time.perf_counter()
c = tensord.connect(sock)
m = c.open(model)
open_ms = (time.perf_counter() - t0) * 1e3
arrays = {k: m[k] for k in m}  # zero-copy views, kept for the re-check after the evict

def reference():
    """What the safetensors package loads from the files (tensord's own reader
    only where the package is missing, said so in the output)."""
    try:
        if host:
            try:
                import ml_dtypes  # noqa: F401  (gives NumPy the bfloat16 safetensors asks for)
            except ImportError:
                pass
            from safetensors.numpy import load_file
            for f in sorted(glob.glob(os.path.join(mdir, "*.safetensors"))):
                yield from load_file(f).items()
        else:
            from safetensors.torch import load_file
            for f in sorted(glob.glob(os.path.join(mdir, "*.safetensors"))):
                yield from load_file(f, device=str(next(iter(arrays.values())).device)).items()
        return
    except ImportError:
        print("safetensors package missing: comparing with raw file bytes", file=sys.stderr)
    import struct
    for f in sorted(glob.glob(os.path.join(mdir, "*.safetensors"))):
        blob = open(f, "rb").read()
        (n,) = struct.unpack("<Q", blob[:8])
        for k, e in json.loads(blob[8:8 + n]).items():
            if k != "__metadata__":
                b, e_ = e["data_offsets"]
                yield k, blob[8 + n + b:8 + n + e_]

def raw(a):
    if host:
        return a.tobytes() if isinstance(a, np.ndarray) else bytes(a)
    import torch
    if isinstance(a, (bytes, bytearray)):
        return torch.frombuffer(bytearray(a), dtype=torch.uint8) if len(a) else torch.empty(0, dtype=torch.uint8)
    return a.contiguous().reshape(-1).view(torch.uint8)

def same(a, b):
    if host:
        return raw(a) == raw(b)
    import torch
    x, y = raw(a), raw(b).to(raw(a).device)
    return x.numel() == y.numel() and bool(torch.equal(x, y))

def check():
    t = time.perf_counter()
    ok = bad = 0
    for k, ref in reference():
        if k in arrays and same(arrays[k], ref):
            ok += 1
        else:
            bad += 1
            print("mismatch:", k, file=sys.stderr)
    if not host:
        import torch
        torch.cuda.synchronize()
    return ok, bad, time.perf_counter() - t

ok, bad, secs = check()
kind = type(next(iter(arrays.values()))).__module__
print(json.dumps({"open_ms": open_ms, "ok": ok, "bad": bad, "compare_s": secs, "kind": kind,
                  "generation": m.generation}), flush=True)
sys.stdin.readline()  # the script evicts the model meanwhile
ok2, bad2, _ = check()
print(json.dumps({"after_evict_ok": ok2, "after_evict_bad": bad2}), flush=True)
