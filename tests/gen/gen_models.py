#!/usr/bin/python3
"""Model generator for tensord: demo models, test models and big sparse files.

NumPy only, with its own small safetensors writer (8-byte little-endian header
length, JSON header padded with spaces to a multiple of 8, then the data
buffer), so the tests never depend on the code under test to make their
inputs. Everything is seeded: the same call writes the same bytes.

CLI:
  gen_models.py --demo DIR          demo models for `make run` (only those DIR lacks)
  gen_models.py --test DIR          every test model (valid and invalid)
  gen_models.py --big PATH SIZE     sparse file with one 2-D U8 tensor [SIZE/65536, 65536]
                                    (SIZE takes K/M/G suffixes; only the header is written)

API (for the tests):
  write_safetensors(path, tensors, metadata=None, ...) -> {name: (begin, end)}
  make_test_models(root) -> Manifest: {model: {tensor: Tensor(dtype, shape, data)}}
  test_manifest() -> the same Manifest without writing anything
  make_big(path, rows, cols, dtype="U8")
  make_many_tensors(path, count, ...)   a valid header of `count` tensors (~100 bytes each)
  make_big_index_model(dir, count, ...) a valid sharded model with a big index
"""
import argparse
import collections
import json
import os
import struct
import sys

import numpy as np

# dtype -> (bits per element, NumPy dtype where NumPy has it)
DTYPES = collections.OrderedDict([
    ("BOOL", (8, "|b1")),
    ("U8", (8, "|u1")),
    ("I8", (8, "|i1")),
    ("U16", (16, "<u2")),
    ("I16", (16, "<i2")),
    ("F16", (16, "<f2")),
    ("BF16", (16, None)),
    ("U32", (32, "<u4")),
    ("I32", (32, "<i4")),
    ("F32", (32, "<f4")),
    ("U64", (64, "<u8")),
    ("I64", (64, "<i8")),
    ("F64", (64, "<f8")),
    ("C64", (64, "<c8")),
    ("F8_E4M3", (8, None)),
    ("F8_E5M2", (8, None)),
    ("F8_E4M3FNUZ", (8, None)),
    ("F8_E5M2FNUZ", (8, None)),
    ("F8_E8M0", (8, None)),
    ("F6_E2M3", (6, None)),
    ("F6_E3M2", (6, None)),
    ("F4", (4, None)),
])
SUB_BYTE = {d for d, (bits, _) in DTYPES.items() if bits < 8}
# Fixed mtime of every generated file, so Last-Modified is known and in the past.
FIXED_MTIME = 1_700_000_000  # 2023-11-14T22:13:20Z
SEED = 20240521


def dtype_bits(dtype):
    return DTYPES[dtype][0]


def numpy_dtype(dtype):
    """NumPy dtype string, or None where NumPy lacks the type."""
    return DTYPES[dtype][1]


def standin_dtype(dtype):
    """A NumPy dtype of the same element size, for slicing raw bytes of any
    dtype of 8 bits or more (BF16 -> <u2, F8_* -> u1). None for sub-byte."""
    bits, npd = DTYPES[dtype]
    if npd:
        return npd
    return {8: "|u1", 16: "<u2"}.get(bits)


def nelems(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


def nbytes_of(dtype, shape):
    bits = nelems(shape) * dtype_bits(dtype)
    if bits % 8:
        raise ValueError(f"{dtype}{list(shape)}: {bits} bits is not a whole number of bytes")
    return bits // 8


def random_data(rng, dtype, shape):
    """Deterministic bytes for a tensor of dtype and shape."""
    n = nelems(shape)
    npd = numpy_dtype(dtype)
    if dtype == "BOOL":
        return rng.integers(0, 2, size=n, dtype=np.uint8).tobytes()
    if dtype in ("F16", "F32", "F64"):
        return (rng.standard_normal(n) * 4).astype(npd).tobytes()
    if dtype == "C64":
        v = rng.standard_normal(n) + 1j * rng.standard_normal(n)
        return v.astype(npd).tobytes()
    if dtype == "BF16":
        f = (rng.standard_normal(n) * 4).astype("<f4")
        return (f.view("<u4") >> 16).astype("<u2").tobytes()
    # Integers, FP8/FP6/FP4: every bit pattern will do.
    return rng.bytes(nbytes_of(dtype, shape))


class Tensor(collections.namedtuple("Tensor", "dtype shape data")):
    """(dtype, shape tuple, raw bytes); .file and .offsets say where it is stored."""
    file = None
    offsets = None


def encode_header(tensors, metadata=None, ensure_ascii=False, align=8):
    """Returns (header JSON bytes padded to `align`, {name: (begin, end)})."""
    hdr = collections.OrderedDict()
    if metadata is not None:
        hdr["__metadata__"] = metadata
    layout = {}
    off = 0
    for name, dtype, shape, data in tensors:
        nb = len(data)
        hdr[name] = {"dtype": dtype, "shape": [int(s) for s in shape],
                     "data_offsets": [off, off + nb]}
        layout[name] = (off, off + nb)
        off += nb
    raw = json.dumps(hdr, ensure_ascii=ensure_ascii, separators=(",", ":")).encode("utf-8")
    if align and len(raw) % align:
        raw += b" " * (align - len(raw) % align)
    return raw, layout


def _as_list(tensors):
    if isinstance(tensors, dict):
        return [(k,) + tuple(v) for k, v in tensors.items()]
    return list(tensors)


def encode_safetensors(tensors, metadata=None, ensure_ascii=False):
    """tensors: [(name, dtype, shape, bytes)] or {name: (dtype, shape, bytes)}.
    Returns (file bytes, header length, layout)."""
    tensors = _as_list(tensors)
    for name, dtype, shape, data in tensors:
        if len(data) != nbytes_of(dtype, shape):
            raise ValueError(f"{name}: {len(data)} bytes for {dtype}{list(shape)}")
    hdr, layout = encode_header(tensors, metadata, ensure_ascii)
    body = b"".join(bytes(t[3]) for t in tensors)
    return struct.pack("<Q", len(hdr)) + hdr + body, len(hdr), layout


def write_safetensors(path, tensors, metadata=None, ensure_ascii=False, mtime=FIXED_MTIME):
    """Writes a safetensors file; returns {name: (begin, end)} (offsets in the data buffer)."""
    blob, _, layout = encode_safetensors(tensors, metadata, ensure_ascii)
    _write(path, blob, mtime)
    return layout


def _write(path, blob, mtime=FIXED_MTIME):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(blob)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def make_big(path, rows=32768, cols=65536, dtype="U8", name="w", mtime=FIXED_MTIME):
    """A sparse file holding one 2-D tensor of rows x cols: the header is written,
    the data is a hole (reads as zeros). Returns the file size."""
    nb = nbytes_of(dtype, (rows, cols))
    meta = collections.OrderedDict([("__metadata__", {"format": "pt"}),
                                    (name, {"dtype": dtype, "shape": [rows, cols],
                                            "data_offsets": [0, nb]})])
    hdr = json.dumps(meta, separators=(",", ":")).encode()
    hdr += b" " * (-len(hdr) % 8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr)
        f.truncate(8 + len(hdr) + nb)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return 8 + len(hdr) + nb


def _many_tensors_header(names, shape, first_offset=0, metadata=None):
    """Header bytes (padded to 8) for U8 tensors of one shape, in order."""
    nb = nelems(shape)
    dims = ",".join(str(int(d)) for d in shape).encode()
    parts = [b"{"]
    if metadata is not None:
        parts.append(json.dumps({"__metadata__": metadata}, separators=(",", ":")).encode()[1:-1])
    off = first_offset
    for name in names:
        parts.append(b'%s"%s":{"dtype":"U8","shape":[%s],"data_offsets":[%d,%d]}' % (
            b"," if len(parts) > 1 else b"", name, dims, off, off + nb))
        off += nb
    parts.append(b"}")
    hdr = b"".join(parts)
    return hdr + b" " * (-len(hdr) % 8)


def many_tensor_names(count, fmt="model.layers.%07d.self_attn.q_proj.weight"):
    """`count` distinct ASCII tensor names (bytes), as big models name them."""
    pat = fmt.encode()
    return [pat % i for i in range(count)]


def make_many_tensors(path, count, shape=(1,), fmt="model.layers.%07d.self_attn.q_proj.weight",
                      metadata=None, mtime=FIXED_MTIME):
    """A valid file of `count` U8 tensors of one shape (data all 0x01), written
    fast enough for headers of ~100 MB (a million tensors). Returns the header
    length N."""
    names = many_tensor_names(count, fmt)
    hdr = _many_tensors_header(names, shape, metadata=metadata)
    _write(path, struct.pack("<Q", len(hdr)) + hdr + b"\x01" * (count * nelems(shape)), mtime)
    return len(hdr)


def make_big_index_model(directory, count, shards=2, fmt="model.layers.%07d.mlp.gate_proj.weight",
                         held=None, mtime=FIXED_MTIME):
    """A sharded model of `count` U8[1] tensors spread over `shards` shards,
    with an indented model.safetensors.index.json as transformers writes it
    (a million tensors make an index of ~90 MB). Valid, unless `held` is
    given: then each shard holds only the first `held` tensors the index
    maps to it (the model is invalid, tensor_not_in_shard, once the whole
    index has been read). Returns the index's size in bytes."""
    names = many_tensor_names(count, fmt)
    per = -(-count // shards)
    files = ["model-%05d-of-%05d.safetensors" % (k + 1, shards) for k in range(shards)]
    for k, fname in enumerate(files):
        part = names[k * per:(k + 1) * per][:held]
        hdr = _many_tensors_header(part, (1,))
        _write(os.path.join(directory, fname),
               struct.pack("<Q", len(hdr)) + hdr + b"\x02" * len(part), mtime)
    body = b",\n".join(b'    "%s": "%s"' % (n, files[i // per].encode()) for i, n in enumerate(names))
    index = (b'{\n  "metadata": {\n    "total_size": %d\n  },\n  "weight_map": {\n' % count +
             body + b"\n  }\n}\n")
    _write(os.path.join(directory, "model.safetensors.index.json"), index, mtime)
    return len(index)


# ---------------------------------------------------------------------------
# Test models


class ModelInfo:
    """What the tests need to know about one model on disk."""

    def __init__(self, name, path, sharded=False):
        self.name = name
        self.path = path          # the model directory, or the file for root models
        self.sharded = sharded
        self.files = {}           # file name -> bytes as written
        self.header_length = {}   # safetensors file name -> N
        self.metadata = {}        # safetensors file name -> __metadata__ (or None)
        self.index = None         # index file name for sharded models
        self.error_hint = None    # invalid models: the kind of breakage

    @property
    def is_root_file(self):
        return self.path.endswith(".safetensors")


class Manifest(dict):
    """model name -> {tensor name: Tensor(dtype, shape, data)} for every valid
    model; .models has a ModelInfo for every model (valid and invalid),
    .invalid the names of the invalid ones."""

    def __init__(self):
        super().__init__()
        self.root = None
        self.models = collections.OrderedDict()
        self.invalid = []


def dtype_model_tensors(rng, dtype):
    """Tensors of the per-dtype model: every rank, zero-sized, odd names."""
    sub = dtype in SUB_BYTE
    specs = []
    if not sub:
        specs.append(("scalar", ()))
    specs += [
        ("vec", (8,) if sub else (7,)),
        ("layers.0/attn q", (4, 6) if sub else (5, 6)),
        ("größe", (3, 4, 5)),
        ("block.4d", (2, 3, 4, 5)),
        ("empty", (0, 5)),
        ("name with spaces", (2, 2) if dtype.startswith("F6") else (2, 3)),
    ]
    if sub:
        specs.append(("rows", (4, 8)))
    return [(n, dtype, s, random_data(rng, dtype, s)) for n, s in specs]


def build_test_models():
    """Everything make_test_models writes, in memory: [(relative path, bytes)]
    plus the Manifest (without root)."""
    rng = np.random.default_rng(SEED)
    files = []
    man = Manifest()

    def add_st(model, relpath, fname, tensors, metadata, info, ensure_ascii=False):
        blob, hlen, layout = encode_safetensors(tensors, metadata, ensure_ascii)
        files.append((relpath, blob))
        info.files[fname] = blob
        info.header_length[fname] = hlen
        info.metadata[fname] = metadata
        if model is not None:
            tens = man.setdefault(model, collections.OrderedDict())
            for name, dtype, shape, data in tensors:
                t = Tensor(dtype, tuple(shape), bytes(data))
                t.file = fname
                t.offsets = layout[name]
                tens[name] = t
        return blob, layout

    def add_plain(relpath, fname, blob, info):
        files.append((relpath, blob))
        info.files[fname] = blob

    # One single-file model per dtype, at the root.
    for dtype in DTYPES:
        model = "dtype-" + dtype.lower()
        info = ModelInfo(model, model + ".safetensors")
        # One file with \u escapes in the header, the rest raw UTF-8.
        add_st(model, model + ".safetensors", model + ".safetensors",
               dtype_model_tensors(rng, dtype), {"format": "pt", "dtype": dtype}, info,
               ensure_ascii=(dtype == "I16"))
        man.models[model] = info

    # A sharded model: 3 shards and an index with metadata.
    model = "sharded"
    info = ModelInfo(model, model, sharded=True)
    shard_specs = [
        [("model.embed_tokens.weight", "F32", (16, 8)),
         ("model.layers.0.self_attn.q_proj.weight", "BF16", (8, 8)),
         ("model.norm.eps", "F64", ())],
        [("model.layers.0.mlp.up_proj.weight", "F16", (8, 12)),
         ("model.layers.0.mlp.bias", "I64", (12,)),
         ("model.layers.0/odd name", "U8", (3, 5, 7)),
         ("model.empty", "F32", (0, 5))],
        [("lm_head.weight", "F32", (2, 3, 4, 5)),
         ("lm_head.scales", "F8_E4M3", (8, 4)),
         ("lm_head.packed", "F4", (4, 8))],
    ]
    weight_map = collections.OrderedDict()
    total = 0
    for i, specs in enumerate(shard_specs, 1):
        fname = f"model-{i:05d}-of-00003.safetensors"
        tensors = [(n, d, s, random_data(rng, d, s)) for n, d, s in specs]
        add_st(model, f"{model}/{fname}", fname, tensors,
               {"format": "pt", f"part_{i}": str(i)}, info)
        for n, d, s, data in tensors:
            weight_map[n] = fname
            total += len(data)
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    info.index = "model.safetensors.index.json"
    add_plain(f"{model}/{info.index}", info.index,
              json.dumps(index, indent=2).encode(), info)
    man.models[model] = info

    # A nested model "org/name".
    model = "org/name"
    info = ModelInfo(model, model)
    tensors = [(n, d, s, random_data(rng, d, s)) for n, d, s in [
        ("w", "F32", (4, 4)), ("nested/tensor name", "I32", (3,)), ("ü.bias", "F16", (4,))]]
    add_st(model, f"{model}/model.safetensors", "model.safetensors", tensors, None, info)
    man.models[model] = info

    # A model directory with config.json and tokenizer files next to the weights.
    model = "with-config"
    info = ModelInfo(model, model)
    tensors = [(n, d, s, random_data(rng, d, s)) for n, d, s in [
        ("embed.weight", "F32", (8, 16)), ("head.bias", "F32", (16,))]]
    add_st(model, f"{model}/model.safetensors", "model.safetensors", tensors,
           {"format": "pt"}, info)
    config = {"architectures": ["TinyModel"], "hidden_size": 16, "vocab_size": 8,
              "torch_dtype": "float32"}
    add_plain(f"{model}/config.json", "config.json",
              json.dumps(config, indent=2).encode() + b"\n", info)
    add_plain(f"{model}/tokenizer.json", "tokenizer.json",
              json.dumps({"version": "1.0", "vocab": {"a": 0, "b": 1}}).encode(), info)
    man.models[model] = info

    # A model directory with two safetensors files and no index.
    model = "multifile"
    info = ModelInfo(model, model)
    for fname, specs in [("a.safetensors", [("a.x", "I8", (6, 6))]),
                         ("b.safetensors", [("b.y", "U16", (5, 3)), ("b.z", "F32", (2,))])]:
        tensors = [(n, d, s, random_data(rng, d, s)) for n, d, s in specs]
        add_st(model, f"{model}/{fname}", fname, tensors, {"format": "pt"}, info)
    man.models[model] = info

    # ---- invalid models (listed with state "invalid", data not served) ----
    def invalid(model, path, hint):
        info = ModelInfo(model, path)
        info.error_hint = hint
        man.models[model] = info
        man.invalid.append(model)
        return info

    ok = [("w", "F32", (4, 4), random_data(rng, "F32", (4, 4)))]

    # Truncated: the data buffer is 10 bytes short.
    info = invalid("bad-truncated", "bad-truncated.safetensors", "truncated")
    blob, _, _ = encode_safetensors(ok, {"format": "pt"})
    add_plain("bad-truncated.safetensors", "bad-truncated.safetensors", blob[:-10], info)

    # Bad JSON: an unterminated object.
    info = invalid("bad-json", "bad-json", "bad json")
    hdr = b'{"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]'
    hdr += b" " * (-len(hdr) % 8)
    add_plain("bad-json/model.safetensors", "model.safetensors",
              struct.pack("<Q", len(hdr)) + hdr + bytes(64), info)

    # Overlapping offsets: b starts inside a.
    info = invalid("bad-overlap", "bad-overlap", "overlapping offsets")
    hdr = json.dumps({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                      "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    add_plain("bad-overlap/model.safetensors", "model.safetensors",
              struct.pack("<Q", len(hdr)) + hdr + bytes(24), info)

    # Sharded with a missing shard.
    info = invalid("bad-shard-missing", "bad-shard-missing", "missing shard")
    info.sharded = True
    blob, _, _ = encode_safetensors([("a", "F32", (2,), bytes(8))], {"format": "pt"})
    add_plain("bad-shard-missing/model-00001-of-00002.safetensors",
              "model-00001-of-00002.safetensors", blob, info)
    idx = {"metadata": {"total_size": 16},
           "weight_map": {"a": "model-00001-of-00002.safetensors",
                          "b": "model-00002-of-00002.safetensors"}}
    add_plain("bad-shard-missing/model.safetensors.index.json",
              "model.safetensors.index.json", json.dumps(idx).encode(), info)

    # Sharded whose index maps a tensor to the wrong shard.
    info = invalid("bad-shard-wrongmap", "bad-shard-wrongmap", "tensor in the wrong shard")
    info.sharded = True
    for i, tname in [(1, "a"), (2, "b")]:
        blob, _, _ = encode_safetensors([(tname, "F32", (2,), bytes(8))], {"format": "pt"})
        fn = f"model-0000{i}-of-00002.safetensors"
        add_plain(f"bad-shard-wrongmap/{fn}", fn, blob, info)
    idx = {"metadata": {"total_size": 16},
           "weight_map": {"a": "model-00001-of-00002.safetensors",
                          "b": "model-00001-of-00002.safetensors"}}
    add_plain("bad-shard-wrongmap/model.safetensors.index.json",
              "model.safetensors.index.json", json.dumps(idx).encode(), info)
    return files, man


def test_manifest():
    """The Manifest of make_test_models, computed without writing anything."""
    return build_test_models()[1]


test_manifest.__test__ = False  # not a pytest test


def make_test_models(root):
    """Writes every test model under root; returns the Manifest."""
    files, man = build_test_models()
    root = os.path.abspath(root)
    for rel, blob in files:
        _write(os.path.join(root, rel), blob)
    man.root = root
    return man


# ---------------------------------------------------------------------------
# Demo models for `make run`


def _demo_models():
    rng = np.random.default_rng(7)

    def t(name, dtype, shape):
        return (name, dtype, shape, random_data(rng, dtype, shape))

    demos = collections.OrderedDict()
    demos["demo-f32"] = [
        ("demo-f32/model.safetensors", "st",
         ([t("embed.weight", "F32", (8, 16)), t("layers.0.weight", "F32", (16, 16)),
           t("layers.0.bias", "F32", (16,))], {"format": "pt"})),
        ("demo-f32/config.json", "raw",
         json.dumps({"architectures": ["DemoModel"], "hidden_size": 16, "vocab_size": 8,
                     "torch_dtype": "float32"}, indent=2).encode() + b"\n"),
    ]
    demos["demo-bf16"] = [
        ("demo-bf16.safetensors", "st",
         ([t("w", "BF16", (16, 32)), t("b", "BF16", (32,))], {"format": "pt"})),
    ]
    s1 = [t("a.weight", "F32", (8, 16)), t("a.bias", "F32", (16,))]
    s2 = [t("b.weight", "F16", (16, 16)), t("b.scale", "F32", ())]
    wm = {n: "model-00001-of-00002.safetensors" for n, *_ in s1}
    wm.update({n: "model-00002-of-00002.safetensors" for n, *_ in s2})
    total = sum(len(x[3]) for x in s1 + s2)
    demos["demo-sharded"] = [
        ("demo-sharded/model-00001-of-00002.safetensors", "st", (s1, {"format": "pt"})),
        ("demo-sharded/model-00002-of-00002.safetensors", "st", (s2, {"format": "pt"})),
        ("demo-sharded/model.safetensors.index.json", "raw",
         json.dumps({"metadata": {"total_size": total}, "weight_map": wm}, indent=2).encode()),
    ]
    demos["org/demo-i8"] = [
        ("org/demo-i8/model.safetensors", "st",
         ([t("q", "I8", (32, 32)), t("scale", "F32", (32,))], {"format": "pt"})),
    ]
    return demos


def make_demo_models(root):
    """Writes the demo models root lacks; returns the names written."""
    written = []
    for model, entries in _demo_models().items():
        if any(os.path.exists(os.path.join(root, rel)) for rel, _, _ in entries):
            continue
        for rel, kind, payload in entries:
            path = os.path.join(root, rel)
            if kind == "st":
                write_safetensors(path, payload[0], payload[1], mtime=None)
            else:
                _write(path, payload, mtime=None)
        written.append(model)
    return written


def parse_size(s):
    s = s.strip().upper().rstrip("B")
    mult = 1
    for suf, m in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40)):
        if s.endswith(suf):
            s, mult = s[:-1], m
            break
    return int(float(s) * mult)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--demo", metavar="DIR", help="write the demo models DIR lacks")
    g.add_argument("--test", metavar="DIR", help="write every test model into DIR")
    g.add_argument("--big", nargs=2, metavar=("PATH", "SIZE"),
                   help="sparse file with one U8 tensor [SIZE/65536, 65536]")
    ap.add_argument("--cols", type=int, default=65536, help="columns of the --big tensor")
    ap.add_argument("--dtype", default="U8", help="dtype of the --big tensor (U8, F32, ...)")
    a = ap.parse_args(argv)
    if a.demo:
        written = make_demo_models(a.demo)
        print(f"demo models in {a.demo}: " + (", ".join(written) if written else
                                               "all present, nothing written"))
    elif a.test:
        man = make_test_models(a.test)
        print(f"{len(man.models)} test models ({len(man.invalid)} invalid) in {a.test}")
    else:
        path, size = a.big[0], parse_size(a.big[1])
        row_bytes = nbytes_of(a.dtype, (a.cols,))
        rows = max(1, size // row_bytes)
        total = make_big(path, rows, a.cols, a.dtype)
        print(f"{path}: {a.dtype}[{rows}, {a.cols}], {total} bytes (sparse)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
