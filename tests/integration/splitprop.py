"""Random models and random tensor-parallel splits, with the expected bytes of
every rank computed independently (numpy.array_split, fnmatch): shared by the
partition property tests of the host backend
(test_gpu_split_property.py) and of the CUDA driver test double
(tests/cuda_double/test_cuda_split_property.py).

A model has every dtype, shapes of 0 to 3 dimensions (zero-length ones
included), several shards, tensors packed at odd offsets, and one tensor big
enough to span many 64 KiB staging chunks with rows that are not page- or
chunk-aligned. A split has a random world and rules (globs, dims counted
from either end); one that some tensor cannot take (a dim out of range, a
sub-byte cut off a byte boundary) is what the daemon must refuse."""
import fnmatch
import hashlib
import json
import os
import subprocess
import sys

import numpy as np

from tdutil import gen_models, read_safetensors_bytes, subbyte_slice

SUB = gen_models.SUB_BYTE
DTYPES = list(gen_models.DTYPES)


def _shape(rng, dtype):
    """A shape of 0 to 3 dimensions whose bits make whole bytes."""
    for _ in range(100):
        shape = tuple(int(x) for x in rng.integers(0, 12, size=int(rng.integers(0, 4))))
        if rng.random() < 0.15 and shape:
            shape = shape[:-1] + (0,)
        if gen_models.nelems(shape) * gen_models.dtype_bits(dtype) % 8 == 0:
            return shape
    return (2,)


def write_model(root, name, rng):
    """root/name/: 1 to 3 shards with an index, tensors of random dtypes and
    shapes (every dtype at least once over the model); the first shard also
    holds `big`, F32 [733, 61] (175 KiB: three 64 KiB chunks, rows of 244
    bytes). Returns {tensor: (dtype, shape, bytes)}."""
    d = os.path.join(root, name)
    os.makedirs(d)
    n_shards = int(rng.integers(1, 4))
    dtypes = DTYPES + [DTYPES[int(i)] for i in rng.integers(0, len(DTYPES), size=8)]
    rng.shuffle(dtypes)
    shards = [[] for _ in range(n_shards)]
    for i, dt in enumerate(dtypes):
        group = ("w", "b", "norm")[i % 3]
        shape = _shape(rng, dt)
        shards[i % n_shards].append((f"l{i}.{group}", dt, shape,
                                     bytes(gen_models.random_data(rng, dt, shape))))
    big = bytes(gen_models.random_data(rng, "F32", (733, 61)))
    shards[0].insert(int(rng.integers(0, len(shards[0]) + 1)), ("big", "F32", (733, 61), big))
    out, wm = {}, {}
    for k, ts in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{n_shards:05d}.safetensors"
        # metadata of a random length: the data starts at odd offsets
        gen_models.write_safetensors(os.path.join(d, fname), ts,
                                     {"pad": "x" * int(rng.integers(0, 64))})
        for t in ts:
            wm[t[0]] = fname
            out[t[0]] = (t[1], tuple(t[2]), t[3])
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wm}, f)
    return out


def random_split(rng, world_max=5):
    """{"world", "rules"}: 1 to 3 rules over the names write_model makes."""
    globs = ["*.w", "*.b", "l1*", "*", "big", "l?.*", "*[02468].*", "*.norm"]
    dims = (0, 0, -1, -1, 1, -2)
    rules = [{"match": globs[int(rng.integers(0, len(globs)))],
              "dim": dims[int(rng.integers(0, len(dims)))]} for _ in range(int(rng.integers(1, 4)))]
    return {"world": int(rng.integers(1, world_max + 1)), "rules": rules}


def rank_part(dtype, shape, data, split, rank, name):
    """What rank holds of a tensor: (shape, bytes, part or None), or the
    reason it cannot be cut (a string)."""
    rule = next((r for r in split["rules"] if fnmatch.fnmatchcase(name, r["match"])), None)
    if rule is None or not shape:
        return list(shape), data, None
    dim = rule["dim"] + len(shape) if rule["dim"] < 0 else rule["dim"]
    if not 0 <= dim < len(shape):
        return "dim"
    world = split["world"]
    if world == 1:  # the whole model: nothing is cut
        return list(shape), data, None
    n = shape[dim]
    lo = sum(len(x) for x in np.array_split(np.arange(n), world)[:rank])
    if dtype in SUB:
        flat = np.arange(gen_models.nelems(shape)).reshape(shape)
        pos = np.array_split(flat, world, axis=dim)[rank]
        got, _ = subbyte_slice(dtype, (gen_models.nelems(shape),), data, (pos.ravel(),))
        if got is None:
            return "byte boundary"
        part_shape = pos.shape
    else:
        a = np.frombuffer(data, gen_models.standin_dtype(dtype)).reshape(shape)
        p = np.array_split(a, world, axis=dim)[rank]
        got, part_shape = np.ascontiguousarray(p).tobytes(), p.shape
    return (list(part_shape), got,
            {"dim": dim, "start": lo, "stop": lo + part_shape[dim], "length": n})


def expected(tensors, split):
    """([{name: (shape, sha256, part)}] per rank, {names of the tensors some
    rank cannot be cut from})."""
    ranks, bad = [], set()
    for rank in range(split["world"]):
        want = {}
        for name, (dt, shape, data) in tensors.items():
            p = rank_part(dt, shape, data, split, rank, name)
            if isinstance(p, str):
                bad.add(name)
            else:
                want[name] = (p[0], hashlib.sha256(p[1]).hexdigest(), p[2])
        ranks.append(want)
    return ranks, bad


def fetched(d, model, split, rank):
    """{name: (shape, sha256)} of what POST /fetch sends for the rank."""
    r = d.request("POST", f"/v1/models/{model}/fetch", body=json.dumps(
        {"split": dict(split, rank=rank)}).encode())
    assert r.status == 200, (r.status, r.body[:300])
    return {k: (list(shape), hashlib.sha256(b).hexdigest())
            for k, (_dt, shape, b) in read_safetensors_bytes(r.body)[2].items()}


def check_ranks(d, model, split, ranks, got):
    """Each rank a worker opened (got, from opened()) holds what the split
    gives it (ranks, from expected()), and POST /fetch with the same split
    sends those very parts."""
    for rank, (want, have) in enumerate(zip(ranks, got)):
        assert have["world"] == split["world"] and have["rank"] == rank and have["verify"], have
        assert {k: tuple(v) for k, v in have["tensors"].items()} == want, (split, rank)
        assert fetched(d, model, split, rank) == {
            k: (v[0], v[1]) for k, v in want.items()}, (split, rank)


# Opens each (model, device, rank) of argv's JSON list and prints, per
# tensor, [shape, sha256, part], one JSON line per open, checking each
# mapping against the daemon's checksums.
WORKER = r"""
import hashlib, json, sys, tensord
c = tensord.connect(sys.argv[1])
for model, device, rank in json.loads(sys.argv[2]):
    m = c.open(model, device=device, rank=rank)
    out = {k: [list(m.info(k)["shape"]), hashlib.sha256(m.read(k)).hexdigest(), m.info(k)["part"]]
           for k in m}
    print(json.dumps({"world": m.world, "rank": m.rank, "verify": m.verify(), "tensors": out}),
          flush=True)
    m.close()
c.close()
"""


def opened(sock, opens, env):
    """What a worker process maps of each (model, device, rank) in opens."""
    p = subprocess.run([sys.executable, "-c", WORKER, sock, json.dumps(opens)],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return [json.loads(line) for line in p.stdout.splitlines()]
