"""Checks of what the daemon sends, before any of it is used or allocated.

`model_document` checks GET /v1/models/{model}: every field the client
reads has its type, every tensor's dtype is known, its shape and dtype make
its byte count, and its bytes lie inside its file. `fetch_header` checks the
safetensors header of a fetch answer as safetensors checks a file's (at most
100 MB, JSON, entries ordered and contiguous from 0 to the end of the data,
sizes that agree with dtype and shape) and against the request: only names
asked for, each with the model's dtype and at most the model's bytes, so a
hostile answer cannot make the client allocate more than the tensors it
asked for. Errors are BadAnswer (a SafetensorError)."""
import json

from . import _dtypes
from ._errors import BadAnswer

MAX_HEADER = 100_000_000  # safetensors' limit on a header's length


def _bad(what, why):
    return BadAnswer(f"{what}: {why}")


def _is_int(v):
    return type(v) is int


def _shape_ok(shape):
    return isinstance(shape, list) and all(_is_int(s) and s >= 0 for s in shape)


def _offsets_ok(offs):
    return isinstance(offs, list) and len(offs) == 2 and all(_is_int(x) and x >= 0 for x in offs) \
        and offs[0] <= offs[1]


def _tensor_bytes(dtype, shape):
    """Bytes of a tensor, or None when its elements do not fill whole bytes."""
    bits = _dtypes.BITS[dtype]
    for s in shape:
        bits *= s
    return bits // 8 if bits % 8 == 0 else None


def model_document(doc, what):
    """Checks the model description; returns it."""
    if not isinstance(doc, dict):
        raise _bad(what, "the model description is not a JSON object")
    state = doc.get("state")
    if not isinstance(state, str):
        raise _bad(what, "the model description has no state")
    if state != "ready":
        return doc  # the caller reports the model's own error
    files, tensors, meta = doc.get("files"), doc.get("tensors"), doc.get("metadata")
    if not isinstance(files, list) or not isinstance(tensors, dict):
        raise _bad(what, "the model description has no files or tensors")
    by_name = {}
    for f in files:
        if not isinstance(f, dict) or not isinstance(f.get("name"), str) or \
                f["name"] in by_name or not _is_int(f.get("size")) or f["size"] < 0:
            raise _bad(what, f"malformed file entry {str(f)[:200]}")
        hl, etag = f.get("header_length"), f.get("etag")
        if hl is not None and (not _is_int(hl) or hl < 0 or 8 + hl > f["size"]):
            raise _bad(what, f"file {f['name']!r}: header_length {hl!r} for {f['size']} bytes")
        if etag is not None and not isinstance(etag, str):
            raise _bad(what, f"file {f['name']!r}: malformed etag")
        by_name[f["name"]] = f
    for name, t in tensors.items():
        _check_tensor(name, t, by_name, what)
    if meta is not None:
        if not isinstance(meta, dict) or not all(
                isinstance(m, dict) and all(isinstance(v, str) for v in m.values())
                for m in meta.values()):
            raise _bad(what, "malformed metadata")
    return doc


def _check_tensor(name, t, files, what):
    if not isinstance(t, dict):
        raise _bad(what, f"tensor {name!r} is not an object")
    dtype, shape, offs, fname = t.get("dtype"), t.get("shape"), t.get("data_offsets"), t.get("file")
    if not isinstance(dtype, str) or not _dtypes.known(dtype):
        raise _bad(what, f"tensor {name!r} has an unknown dtype {dtype!r}")
    if not _shape_ok(shape) or not _offsets_ok(offs):
        raise _bad(what, f"tensor {name!r}: malformed shape or data_offsets")
    if _tensor_bytes(dtype, shape) != offs[1] - offs[0]:
        raise _bad(what, f"tensor {name!r}: {dtype} {shape} is not {offs[1] - offs[0]} bytes")
    f = files.get(fname) if isinstance(fname, str) else None
    if f is None or f.get("header_length") is None:
        raise _bad(what, f"tensor {name!r} names no safetensors file of the model")
    if 8 + f["header_length"] + offs[1] > f["size"]:
        raise _bad(what, f"tensor {name!r} ends past the end of {fname!r}")


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def fetch_header_length(hlen, total, what):
    """Checks the header length of a fetch answer of `total` bytes."""
    if hlen < 2 or hlen > MAX_HEADER or 8 + hlen > total:
        raise _bad(what, f"header length {hlen} for an answer of {total} bytes (safetensors "
                         f"allows at most {MAX_HEADER})")


def fetch_header(raw, data_len, asked, model_tensors, what):
    """Checks a fetch answer's header (bytes), its data being data_len
    bytes. asked: the names requested (None: every tensor of the model).
    Returns {name: entry} in offset order."""
    if not raw.startswith(b"{"):
        raise _bad(what, "the answer's header is not a JSON object")
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise _bad(what, f"the answer's header is not valid JSON ({e})") from None
    meta = doc.pop("__metadata__", None)
    if meta is not None and (not isinstance(meta, dict) or
                             not all(isinstance(v, str) for v in meta.values())):
        raise _bad(what, "malformed __metadata__ in the answer")
    want = set(model_tensors) if asked is None else set(asked)
    if set(doc) != want:
        raise _bad(what, f"the answer holds other tensors than the ones asked for "
                         f"({len(set(doc) ^ want)} differ)")
    entries = []
    for name, e in doc.items():
        if not isinstance(e, dict):
            raise _bad(what, f"tensor {name!r} of the answer is not an object")
        dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        model = model_tensors[name]
        if dtype != model["dtype"] or not _shape_ok(shape) or not _offsets_ok(offs):
            raise _bad(what, f"tensor {name!r} of the answer: malformed dtype, shape or "
                             "data_offsets")
        n = _tensor_bytes(dtype, shape)
        if n != offs[1] - offs[0] or n > model["data_offsets"][1] - model["data_offsets"][0]:
            raise _bad(what, f"tensor {name!r} of the answer: {dtype} {shape} does not make "
                             f"its {offs[1] - offs[0]} bytes, or makes more than the tensor has")
        entries.append((offs[0], offs[1], name, e))
    entries.sort(key=lambda x: (x[0], x[1]))
    end = 0
    for b, e_, name, _ in entries:
        if b != end:
            raise _bad(what, f"tensor {name!r} of the answer starts at {b}, not {end}: the "
                             "data offsets overlap or leave a gap")
        end = e_
    if end != data_len:
        raise _bad(what, f"the answer's tensors end at {end}, its data at {data_len}")
    return {name: e for _, _, name, e in entries}
