"""The generator itself (no daemon): every file it writes reads back, with an
independent reader and NumPy, as the manifest says; the invalid ones are
broken the way they should be; output is deterministic."""
import hashlib
import json
import os
import struct
import subprocess

import numpy as np
import pytest

from tdutil import REPO, gen_models, read_safetensors_bytes, read_tensor_from_file, subbyte_slice

GEN = os.path.join(REPO, "tests", "gen", "gen_models.py")


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("gen"))
    return root, gen_models.make_test_models(root)


def strict_header(blob):
    """Parses a safetensors header with the spec's rules; raises ValueError."""
    if len(blob) < 8:
        raise ValueError("too small")
    (n,) = struct.unpack("<Q", blob[:8])
    if n == 0 or n > 100_000_000 or 8 + n > len(blob):
        raise ValueError("bad header length")

    def no_dups(pairs):
        keys = [k for k, _ in pairs]
        if len(keys) != len(set(keys)):
            raise ValueError("duplicate key")
        return dict(pairs)
    hdr = json.loads(blob[8:8 + n].decode("utf-8"), object_pairs_hook=no_dups)
    spans = []
    for name, e in hdr.items():
        if name == "__metadata__":
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in e.items()):
                raise ValueError("metadata")
            continue
        if set(e) != {"dtype", "shape", "data_offsets"}:
            raise ValueError("fields")
        nb = gen_models.nbytes_of(e["dtype"], e["shape"])
        b, end = e["data_offsets"]
        if not 0 <= b <= end or end - b != nb:
            raise ValueError(f"{name}: size mismatch")
        spans.append((b, end))
    spans.sort()
    pos = 0
    for b, end in spans:
        if b != pos:
            raise ValueError("hole or overlap")
        pos = end
    if pos != len(blob) - 8 - n:
        raise ValueError("data length mismatch")
    return hdr, n


def test_every_dtype_has_a_model(generated):
    _, man = generated
    for d in gen_models.DTYPES:
        model = "dtype-" + d.lower()
        assert model in man
        assert {t.dtype for t in man[model].values()} == {d}
        shapes = {len(t.shape) for t in man[model].values()}
        assert {1, 2, 3, 4} <= shapes
        if d not in gen_models.SUB_BYTE:
            assert 0 in shapes
        assert any(0 in t.shape for t in man[model].values())
        names = set(man[model])
        assert {"layers.0/attn q", "größe", "name with spaces"} <= names


def test_valid_files_read_back(generated):
    root, man = generated
    checked = 0
    for model, tensors in man.items():
        info = man.models[model]
        for fname, blob in info.files.items():
            path = os.path.join(root, info.path)
            if not info.is_root_file:
                path = os.path.join(path, fname)
            with open(path, "rb") as f:
                disk = f.read()
            assert disk == blob, path
            assert os.stat(path).st_mtime == gen_models.FIXED_MTIME
            if not fname.endswith(".safetensors"):
                continue
            hdr, n = strict_header(disk)
            assert n % 8 == 0 and n == info.header_length[fname]
            assert hdr.get("__metadata__") == info.metadata[fname]
            _, _, read = read_safetensors_bytes(disk)
            for name, (dtype, shape, data) in read.items():
                t = tensors[name]
                assert (dtype, shape, data) == (t.dtype, t.shape, t.data)
                assert t.file == fname
                assert tuple(hdr[name]["data_offsets"]) == t.offsets
                assert read_tensor_from_file(path, dtype, shape, *t.offsets) == t.data
                npd = gen_models.numpy_dtype(dtype)
                if npd:
                    with open(path, "rb") as f:
                        (hn,) = struct.unpack("<Q", f.read(8))
                    a = np.fromfile(path, dtype=npd, count=gen_models.nelems(shape),
                                    offset=8 + hn + t.offsets[0]).reshape(shape)
                    assert a.tobytes() == t.data
                checked += 1
        assert sum(1 for f in info.files if f.endswith(".safetensors")) >= 1
        assert {t.file for t in tensors.values()} <= set(info.files)
    assert checked == sum(len(v) for v in man.values())


def test_sharded_index(generated):
    root, man = generated
    with open(os.path.join(root, "sharded", "model.safetensors.index.json")) as f:
        idx = json.load(f)
    assert {n: t.file for n, t in man["sharded"].items()} == idx["weight_map"]
    assert len(set(idx["weight_map"].values())) == 3
    assert idx["metadata"]["total_size"] == sum(len(t.data) for t in man["sharded"].values())


def test_invalid_models_are_invalid(generated):
    root, man = generated
    assert set(man.invalid) == {"bad-truncated", "bad-json", "bad-overlap", "bad-shard-missing",
                                "bad-shard-wrongmap"}
    for m in man.invalid:
        assert m not in man  # no tensors promised
    with open(os.path.join(root, "bad-truncated.safetensors"), "rb") as f:
        with pytest.raises(ValueError, match="data length"):
            strict_header(f.read())
    with open(os.path.join(root, "bad-json", "model.safetensors"), "rb") as f:
        with pytest.raises(ValueError):
            strict_header(f.read())
    with open(os.path.join(root, "bad-overlap", "model.safetensors"), "rb") as f:
        with pytest.raises(ValueError, match="overlap"):
            strict_header(f.read())
    d = os.path.join(root, "bad-shard-missing")
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    assert any(not os.path.exists(os.path.join(d, s)) for s in idx["weight_map"].values())
    d = os.path.join(root, "bad-shard-wrongmap")
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    wrong = 0
    for tname, shard in idx["weight_map"].items():
        with open(os.path.join(d, shard), "rb") as f:
            hdr, _ = strict_header(f.read())
        wrong += tname not in hdr
    assert wrong == 1


def test_deterministic(tmp_path):
    def digest(root):
        h = hashlib.sha256()
        for dp, dn, fn in sorted(os.walk(root)):
            dn.sort()
            for f in sorted(fn):
                p = os.path.join(dp, f)
                h.update(os.path.relpath(p, root).encode())
                h.update(open(p, "rb").read())
        return h.hexdigest()
    gen_models.make_test_models(str(tmp_path / "a"))
    gen_models.make_test_models(str(tmp_path / "b"))
    assert digest(str(tmp_path / "a")) == digest(str(tmp_path / "b"))
    m1, m2 = gen_models.test_manifest(), gen_models.test_manifest()
    assert {k: dict(v) for k, v in m1.items()} == {k: dict(v) for k, v in m2.items()}


def test_cli_demo(tmp_path):
    out = subprocess.run(["/usr/bin/python3", GEN, "--demo", str(tmp_path)], check=True,
                         capture_output=True, text=True).stdout
    assert "demo-f32" in out
    total = 0
    for dp, _, fn in os.walk(tmp_path):
        for f in fn:
            total += os.path.getsize(os.path.join(dp, f))
    assert total < 2 << 20
    assert os.path.isfile(tmp_path / "demo-f32" / "config.json")
    assert os.path.isfile(tmp_path / "demo-bf16.safetensors")
    assert os.path.isfile(tmp_path / "demo-sharded" / "model.safetensors.index.json")
    assert os.path.isfile(tmp_path / "org" / "demo-i8" / "model.safetensors")
    for p in ["demo-f32/model.safetensors", "demo-bf16.safetensors",
              "demo-sharded/model-00001-of-00002.safetensors",
              "demo-sharded/model-00002-of-00002.safetensors", "org/demo-i8/model.safetensors"]:
        hdr, _ = strict_header((tmp_path / p).read_bytes())
        if p.startswith("demo-f32"):
            assert hdr["embed.weight"]["shape"] == [8, 16] and hdr["embed.weight"]["dtype"] == "F32"
    idx = json.loads((tmp_path / "demo-sharded" / "model.safetensors.index.json").read_text())
    for t, shard in idx["weight_map"].items():
        hdr, _ = strict_header((tmp_path / "demo-sharded" / shard).read_bytes())
        assert t in hdr
    before = (tmp_path / "demo-f32" / "model.safetensors").stat().st_mtime_ns
    out = subprocess.run(["/usr/bin/python3", GEN, "--demo", str(tmp_path)], check=True,
                         capture_output=True, text=True).stdout
    assert "nothing written" in out
    assert (tmp_path / "demo-f32" / "model.safetensors").stat().st_mtime_ns == before


def test_cli_test(tmp_path):
    subprocess.run(["/usr/bin/python3", GEN, "--test", str(tmp_path)], check=True,
                   capture_output=True)
    assert (tmp_path / "dtype-f4.safetensors").is_file()
    assert (tmp_path / "org" / "name" / "model.safetensors").is_file()


def test_big_sparse(tmp_path):
    p = tmp_path / "big.safetensors"
    subprocess.run(["/usr/bin/python3", GEN, "--big", str(p), "2G"], check=True,
                   capture_output=True)
    st = p.stat()
    assert st.st_blocks * 512 < 1 << 20, "file is not sparse"
    with open(p, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        hdr = json.loads(f.read(n))
    assert hdr["w"] == {"dtype": "U8", "shape": [32768, 65536], "data_offsets": [0, 1 << 31]}
    assert st.st_size == 8 + n + (1 << 31)


def test_subbyte_reference_helper():
    # F4 (4,8): aligned row slice equals the raw row bytes; a mid-byte cut is refused.
    data = bytes(range(16))
    got, shape = subbyte_slice("F4", (4, 8), data, (slice(1, 3),))
    assert got == data[4:12] and shape == (2, 8)
    got, shape = subbyte_slice("F4", (4, 8), data, (slice(None), slice(0, 4)))
    assert got == data[0:2] + data[4:6] + data[8:10] + data[12:14] and shape == (4, 4)
    assert subbyte_slice("F4", (4, 8), data, (slice(None), slice(1, 3)))[0] is None
    data6 = bytes(range(24))  # F6 (4,8): 6 bytes per row
    got, _ = subbyte_slice("F6_E2M3", (4, 8), data6, (slice(None), slice(4, 8)))
    assert got == b"".join(data6[6 * r + 3:6 * r + 6] for r in range(4))
    assert subbyte_slice("F6_E2M3", (4, 8), data6, (slice(None), slice(0, 2)))[0] is None
