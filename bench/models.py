"""Benchmark models: a minimal safetensors writer and the model sets the bench needs.

The writer is deliberately separate from tests/gen: the benchmark must not depend on
the test generator's choices, and it needs different shapes (a 1 GiB tensor, a
50-shard model, a 500k-tensor header, a root of 1,000 files).

Generated data is cached under build/bench/models and reused while GEN_VERSION and
the parameters match, so a second `make bench` spends no time writing 1.2 GB.
"""
import json
import os
import shutil
import struct

import numpy as np

GEN_VERSION = "3"

DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2, "U8": 1, "I32": 4, "F64": 8}

# Tensors the throughput tests read by name; sizes are exact payload bytes.
TENSOR_SIZES = {"bench.4k": 4096, "bench.1m": 1 << 20, "bench.64m": 64 << 20}
BIG_ROWS, BIG_COLS = 16384, 16384  # F32: 16384 * 16384 * 4 = 1 GiB, one row = 64 KiB
SHARDS = 50
SHARD_TENSORS = 40
START_MODELS, START_FILES_PER_MODEL = 100, 10  # 1,000 files
HUGE_TENSORS = 500_000


class PatternSource:
    """An endless byte stream made by tiling one random block of odd length, so
    consecutive rows and tensors never start on the same pattern phase (an offset
    bug in a server shows up as wrong bytes rather than as identical ones)."""

    def __init__(self, seed=7, block=(8 << 20) + 12345):
        self.block = np.random.default_rng(seed).integers(0, 256, block, dtype=np.uint8).tobytes()
        self.pos = 0

    def chunks(self, nbytes, max_chunk=8 << 20):
        while nbytes > 0:
            take = min(nbytes, max_chunk, len(self.block) - self.pos)
            yield memoryview(self.block)[self.pos:self.pos + take]
            self.pos = (self.pos + take) % len(self.block)
            nbytes -= take


def tensor_nbytes(dtype, shape):
    n = DTYPE_BYTES[dtype]
    for d in shape:
        n *= d
    return n


def encode_header(tensors, metadata=None):
    """JSON header bytes for [(name, dtype, shape)] laid out contiguously in order,
    space-padded to a multiple of 8 as the reference writer does."""
    hdr = {}
    if metadata:
        hdr["__metadata__"] = metadata
    off = 0
    for name, dtype, shape in tensors:
        n = tensor_nbytes(dtype, shape)
        hdr[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(hdr, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return raw, off


def write_safetensors(path, tensors, source, metadata=None):
    """Writes [(name, dtype, shape)] with bytes drawn from `source` (a PatternSource),
    via a temporary name so an interrupted run never leaves a half file behind.
    Returns the header length N."""
    raw, total = encode_header(tensors, metadata)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for chunk in source.chunks(total):
            f.write(chunk)
    os.replace(tmp, path)
    return len(raw)


def llm_like_tensors(layers=24, hidden=64):
    """Names and shapes of a llama-style checkpoint, tiny in bytes but with a real
    header (about 200 entries, ~20 KB of JSON), so the header-range read is realistic."""
    out = [("model.embed_tokens.weight", "F16", (256, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        for name, shape in (("self_attn.q_proj.weight", (hidden, hidden)),
                            ("self_attn.k_proj.weight", (hidden, hidden)),
                            ("self_attn.v_proj.weight", (hidden, hidden)),
                            ("self_attn.o_proj.weight", (hidden, hidden)),
                            ("mlp.gate_proj.weight", (2 * hidden, hidden)),
                            ("mlp.up_proj.weight", (2 * hidden, hidden)),
                            ("mlp.down_proj.weight", (hidden, 2 * hidden)),
                            ("input_layernorm.weight", (hidden,)),
                            ("post_attention_layernorm.weight", (hidden,))):
            out.append((p + name, "F16", shape))
    out.append(("model.norm.weight", "F16", (hidden,)))
    out.append(("lm_head.weight", "F16", (256, hidden)))
    return out


def _stamp_ok(d, stamp):
    try:
        with open(os.path.join(d, ".stamp")) as f:
            return f.read() == stamp
    except OSError:
        return False


def _write_stamp(d, stamp):
    with open(os.path.join(d, ".stamp"), "w") as f:
        f.write(stamp)


def _fresh(d):
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)


def make_data_root(d, log):
    """The root both servers serve in the throughput tests: `llm` (small-read and
    tensor-read targets), `big` (the 1 GiB 2-D tensor), `shard50` (metadata test)."""
    stamp = f"{GEN_VERSION} {BIG_ROWS}x{BIG_COLS} {SHARDS}x{SHARD_TENSORS}"
    info_path = os.path.join(d, "info.json")
    if _stamp_ok(d, stamp):
        with open(info_path) as f:
            return json.load(f)
    log(f"generating benchmark models in {d} (cached for later runs)")
    _fresh(d)
    src = PatternSource()
    info = {}

    os.makedirs(os.path.join(d, "llm"))
    tensors = llm_like_tensors()
    tensors += [("bench.4k", "F32", (1024,)), ("bench.1m", "F32", (512, 512)),
                ("bench.64m", "F32", (4096, 4096))]
    path = os.path.join(d, "llm", "model.safetensors")
    hlen = write_safetensors(path, tensors, src, {"format": "pt"})
    raw, _ = encode_header(tensors, {"format": "pt"})
    hdr = json.loads(raw)
    info["llm"] = {"file": "model.safetensors", "header_len": hlen, "size": os.path.getsize(path),
                   "tensors": {n: {"begin": 8 + hlen + hdr[n]["data_offsets"][0],
                                   "nbytes": TENSOR_SIZES[n]} for n in TENSOR_SIZES}}
    for n, t in info["llm"]["tensors"].items():
        assert t["nbytes"] == hdr[n]["data_offsets"][1] - hdr[n]["data_offsets"][0]

    os.makedirs(os.path.join(d, "big"))
    path = os.path.join(d, "big", "model.safetensors")
    hlen = write_safetensors(path, [("w", "F32", (BIG_ROWS, BIG_COLS))], src)
    info["big"] = {"file": "model.safetensors", "header_len": hlen, "data_begin": 8 + hlen,
                   "rows": BIG_ROWS, "cols": BIG_COLS, "itemsize": 4, "size": os.path.getsize(path)}

    sd = os.path.join(d, "shard50")
    os.makedirs(sd)
    weight_map = {}
    for s in range(SHARDS):
        fname = f"model-{s + 1:05d}-of-{SHARDS:05d}.safetensors"
        ts = [(f"model.layers.{s}.t{k}.weight", "F16", (64, 64)) for k in range(SHARD_TENSORS)]
        write_safetensors(os.path.join(sd, fname), ts, src, {"format": "pt"})
        for name, _, _ in ts:
            weight_map[name] = fname
    with open(os.path.join(sd, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": SHARDS * SHARD_TENSORS * 64 * 64 * 2},
                   "weight_map": weight_map}, f)
    info["shard50"] = {"index": "model.safetensors.index.json", "shards": SHARDS,
                       "tensors": SHARDS * SHARD_TENSORS}

    with open(info_path, "w") as f:
        json.dump(info, f)
    _write_stamp(d, stamp)
    return info


def make_start_roots(base, log):
    """Two roots for the start-up test: `files1000` (100 models x 10 files) and
    `tensors500k` (one model whose header lists 500,000 tensors)."""
    roots = {"files1000": os.path.join(base, "files1000"),
             "tensors500k": os.path.join(base, "tensors500k")}
    src = PatternSource(seed=11, block=(1 << 20) + 7)

    d = roots["files1000"]
    stamp = f"{GEN_VERSION} {START_MODELS}x{START_FILES_PER_MODEL}"
    if not _stamp_ok(d, stamp):
        log(f"generating {START_MODELS * START_FILES_PER_MODEL} files in {d}")
        _fresh(d)
        for m in range(START_MODELS):
            md = os.path.join(d, f"model-{m:03d}")
            os.makedirs(md)
            for k in range(START_FILES_PER_MODEL):
                ts = [(f"f{k}.layer.{j}.weight", "F16", (16, 16)) for j in range(16)]
                write_safetensors(os.path.join(md, f"part-{k:02d}.safetensors"), ts, src)
        _write_stamp(d, stamp)

    d = roots["tensors500k"]
    stamp = f"{GEN_VERSION} {HUGE_TENSORS}"
    if not _stamp_ok(d, stamp):
        log(f"generating a {HUGE_TENSORS}-tensor header in {d}")
        _fresh(d)
        ts = [(f"model.blocks.{i // 1000}.param.{i % 1000}", "F16", (2,)) for i in range(HUGE_TENSORS)]
        write_safetensors(os.path.join(d, "huge.safetensors"), ts, src)
        _write_stamp(d, stamp)
    return roots


def warm_page_cache(paths):
    """Reads every file once so all figures are page-cache figures."""
    buf = bytearray(8 << 20)
    for top in paths:
        for dirpath, _, files in os.walk(top):
            for fn in files:
                with open(os.path.join(dirpath, fn), "rb", buffering=0) as f:
                    while f.readinto(buf):
                        pass
