#!/usr/bin/python3
"""The generated model of tests/gpu/run.sh: SIZE_MB of mixed dtypes (F32,
BF16, F16, I64, U8) in odd shapes, over 3 shards with different, unaligned
data starts, plus a scalar and an empty tensor, and the index file.

    make_model.py DIR SIZE_MB
"""
import json, os, struct, sys
import numpy as np
out, size_mb = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)
total = size_mb << 20
# Mixed dtypes, odd shapes and header lengths; big tensors split over 3 shards.
kinds = [("F32", 4), ("BF16", 2), ("F16", 2), ("I64", 8), ("U8", 1)]
tensors, budget, i = [], total, 0
while budget > 0:
    dt, w = kinds[i % len(kinds)]
    rows = max(1, min(budget // w // 4099, 16384))
    n = rows * 4099 * w
    tensors.append((f"layers.{i}.{dt.lower()}", dt, (rows, 4099), n))
    budget -= n
    i += 1
tensors.append(("scalar", "F32", (), 4))
tensors.append(("empty", "F32", (0, 3), 0))
shards = [tensors[k::3] for k in range(3)]
weight_map = {}
for k, group in enumerate(shards):
    name = f"model-{k + 1:05d}-of-00003.safetensors"
    hdr, off = {"__metadata__": {"format": "pt"}}, 0
    for tname, dt, shape, n in group:
        hdr[tname] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
        weight_map[tname] = name
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8 + 8 * k)  # a different, unaligned data start per shard
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for tname, dt, shape, n in group:
            left = n
            while left:
                chunk = min(left, 64 << 20)
                f.write(rng.integers(0, 256, chunk, dtype=np.uint8).tobytes())
                left -= chunk
with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
