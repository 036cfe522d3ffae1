"""Hugging Face-shaped repos for the Hub endpoint's tests (test_hub*.py),
generated into a models root of their own: a single-file repo, a sharded
one under an org, a diffusers layout, a deep tree, plus the files that must
stay out of a repo (hidden names, symlinks leaving the root)."""
import json
import os

import numpy as np

from tdutil import gen_models

REPOS = ("single", "org/sharded", "org/sd", "org/deep")


def _tensor(rng, name, dtype, shape):
    a = rng.standard_normal(shape).astype(np.float32)
    if dtype == "F16":
        data = a.astype(np.float16).tobytes()
    elif dtype == "BF16":
        data = (a.view(np.uint32) >> 16).astype(np.uint16).tobytes()
    else:
        data = a.tobytes()
    return (name, dtype, shape, data)


def _write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def make_repos(root, big_bytes=11 * 1024 * 1024):
    """Writes the repos below root; returns {repo id: {path: bytes}} for the
    files each must serve (the hidden and outside ones are not listed)."""
    rng = np.random.default_rng(13)
    files = {r: {} for r in REPOS}

    def put(repo, path, data):
        _write(os.path.join(root, repo, path), data)
        files[repo][path] = data

    def put_st(repo, path, tensors, metadata=None):
        blob, _, _ = gen_models.encode_safetensors(tensors, metadata or {"format": "pt"})
        put(repo, path, blob)
        return tensors

    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 8}
    put_st("single", "model.safetensors",
           [_tensor(rng, "wte.weight", "F32", (16, 8)), _tensor(rng, "ln.bias", "F16", (8,)),
            _tensor(rng, "emb/ü \"q\".weight", "F32", (3, 2))])
    put("single", "config.json", json.dumps(cfg).encode())
    put("single", "README.md", "# single\n\nA tiny repo. Ünïcödé too.\n".encode())

    shard1 = put_st("org/sharded", "model-00001-of-00002.safetensors",
                    [_tensor(rng, "a.weight", "F32", (32, 16)), _tensor(rng, "a.bias", "F32", (32,))])
    shard2 = put_st("org/sharded", "model-00002-of-00002.safetensors",
                    [_tensor(rng, "b.weight", "BF16", (16, 32))])
    wm = {t[0]: "model-00001-of-00002.safetensors" for t in shard1}
    wm.update({t[0]: "model-00002-of-00002.safetensors" for t in shard2})
    put("org/sharded", "model.safetensors.index.json",
        json.dumps({"metadata": {"total_size": 0}, "weight_map": wm}, indent=1).encode())
    put("org/sharded", "config.json", json.dumps(cfg).encode())
    # A plain file over the Hub's 10 MB line: an LFS file by size alone.
    put("org/sharded", "big.bin", bytes(rng.integers(0, 256, big_bytes, dtype=np.uint8)))

    put("org/sd", "model_index.json", json.dumps({"_class_name": "StableDiffusionPipeline"}).encode())
    put("org/sd", "scheduler/scheduler_config.json", b'{"num_train_timesteps": 1000}')
    for comp in ("unet", "vae"):
        put("org/sd", f"{comp}/config.json", json.dumps({"component": comp}).encode())
        put_st("org/sd", f"{comp}/diffusion_pytorch_model.safetensors",
               [_tensor(rng, f"{comp}.conv.weight", "F16", (4, 4, 3, 3))])
    put_st("org/sd", "text_encoder/model.safetensors",
           [_tensor(rng, "emb.weight", "F32", (10, 4))])

    put("org/deep", "a/b/c/d.txt", b"deep\n")
    put("org/deep", "a/x.txt", b"x\n")
    put("org/deep", "a.txt", b"a dot txt\n")
    put("org/deep", "top.json", b"{}")

    # Never served: hidden names and links that leave the root.
    _write(os.path.join(root, "single", ".hidden"), b"secret")
    _write(os.path.join(root, "org/sd", ".git/config"), b"[core]\n")
    outside = os.path.join(os.path.dirname(os.path.abspath(root)), "outside-hub.txt")
    _write(outside, b"outside the root\n")
    os.symlink(outside, os.path.join(root, "org/deep", "escape.txt"))
    return files


def commit_of(repo_files):
    """The revision id API.md defines, computed independently."""
    import hashlib
    h = hashlib.sha1()
    for path in sorted(repo_files, key=lambda p: p.encode()):
        data = repo_files[path]
        h.update(path.encode() + b"\0" + str(len(data)).encode() + b"\0" +
                 hashlib.sha256(data).hexdigest().encode() + b"\n")
    return h.hexdigest()
