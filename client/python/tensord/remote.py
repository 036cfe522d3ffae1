"""Remote tensors: the safetensors API over HTTP, against a tensord daemon.

    import tensord
    url = "http://127.0.0.1:8077/v1/models/llama-3-8b"
    with tensord.safe_open(url, framework="pt") as f:        # as safetensors.safe_open
        names = f.keys()
        emb = f.get_tensor("model.embed_tokens.weight")
        cols = f.get_slice("lm_head.weight")[:, 1024:2048]    # sliced by the daemon
    state = tensord.load_file(url)                           # the whole model, in parallel
    part = tensord.load_file(url, split={"world": 4, "rank": 1, "rules": [
        {"match": "*.q_proj.weight", "dim": 0}]})            # one fetch for rank 1 of 4

The token comes from `token=` or $TENSORD_TOKEN. Dtypes: see tensord._dtypes
(BF16/FP8 as ml_dtypes arrays when ml_dtypes is installed, else raw bits).
"""
import json

import numpy as np

from . import _dtypes, _errors, _index, _loader
from ._errors import SafetensorError
from ._http import ModelURL, Session, abandon, content_range, finish, read_into

__all__ = ["safe_open", "load_file", "RemoteSlice"]

_FRAMEWORKS = {"numpy": "numpy", "np": "numpy", "pt": "pt", "torch": "pt", "pytorch": "pt"}


def _framework(framework, device):
    fw = _FRAMEWORKS.get(str(framework).lower()) if framework is not None else None
    if fw is None:
        raise SafetensorError(f"framework {framework} is invalid: tensord serves \"numpy\" and "
                              "\"pt\"")
    if fw == "numpy":
        if str(device) != "cpu":
            raise SafetensorError(f"Device {device} is not supported for framework numpy")
        return fw, "cpu"
    try:
        import torch
    except ImportError:
        raise SafetensorError("framework \"pt\" needs PyTorch (pip install torch)") from None
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise SafetensorError(f"device {device} is invalid") from None
    return fw, dev


def _output(dtype, shape, raw, framework, device):
    """The framework's tensor over the stored bytes `raw` (a uint8 ndarray),
    without a copy except to unpack F4/F6 or to move to a device."""
    shape = tuple(int(s) for s in shape)
    if framework == "numpy":
        return _dtypes.as_numpy(dtype, raw, shape)
    import torch
    tdt, packed = _dtypes.torch_dtype(dtype)
    if _dtypes.BITS[dtype] < 8:
        if packed and shape and shape[-1] % 2 == 0:
            t = torch.from_numpy(raw).view(tdt).reshape(shape[:-1] + (shape[-1] // 2,))
        else:
            t = torch.from_numpy(_dtypes.unpack(dtype, raw, shape))
    elif raw.nbytes == 0:
        t = torch.empty(shape, dtype=tdt)  # torch will not view an empty byte array
    else:
        t = torch.from_numpy(raw).view(tdt).reshape(shape)
    if device.type != "cpu":
        t = t.to(device)
    return t


class _Model:
    """What safe_open and load_file know of a model: its description
    (GET /v1/models/{model}) and a session."""

    def __init__(self, url, token, timeout, connections, verify):
        self.url = ModelURL(url)
        self.session = Session(self.url.origin, token, timeout, connections, verify)
        doc = self.session.json(self.url.path(), what=f"model {self.url.model!r}")
        if doc.get("state") != "ready":
            err = doc.get("error") or {}
            raise SafetensorError(f"model {self.url.model!r} is invalid: "
                                  f"{err.get('message', doc.get('state'))}")
        self.doc = doc
        self.files = {f["name"]: f for f in doc["files"]}
        self.tensors = doc["tensors"]
        order = {f["name"]: i for i, f in enumerate(doc["files"])}
        self.offset_order = sorted(self.tensors, key=lambda n: (
            order[self.tensors[n]["file"]], self.tensors[n]["data_offsets"][0]))

    def info(self, name):
        try:
            return self.tensors[name]
        except (KeyError, TypeError):
            raise _errors.TensorNotFound(
                404, "tensor_not_found", f"no tensor {name!r}",
                f"Model {self.url.model} does not contain tensor {name}") from None

    def metadata(self):
        """__metadata__ merged over the files, the first file (by name) to set
        a key winning; None when no file has __metadata__."""
        per_file = self.doc.get("metadata") or {}
        if not per_file:
            return None
        out = {}
        for f in self.doc["files"]:
            for k, v in (per_file.get(f["name"]) or {}).items():
                out.setdefault(k, v)
        return out

    def read_tensors(self, names, connections, progress, chunk):
        """{name: uint8 ndarray of the stored bytes}, read as ranges of the
        model's files (whole tensors in file order make long ranges)."""
        bufs, by_file = {}, {}
        for n in names:
            info = self.info(n)
            f = self.files[info["file"]]
            begin, end = info["data_offsets"]
            bufs[n] = np.empty(end - begin, np.uint8)
            start = 8 + f["header_length"] + begin
            by_file.setdefault(f["name"], []).append((start, memoryview(bufs[n]).cast("B")))
        total = sum(b.nbytes for b in bufs.values())
        jobs = []
        for fname, spans in by_file.items():
            spans.sort(key=lambda s: s[0])
            what = f"file {fname!r} of model {self.url.model!r}"
            jobs += [(self.url.path("files", fname), c, self.files[fname]["etag"], what)
                     for c in _loader.plan_chunks(spans, chunk)]
        bar = _loader.Progress(total, progress, self.url.model)
        try:
            _loader.run_jobs(self.session, "GET", None, jobs, connections, bar)
        finally:
            bar.close()
        return bufs


class RemoteSlice:
    """safetensors' PySafeSlice for a remote tensor: get_shape(), get_dtype()
    and [...] with NumPy basic indexing, sliced by the daemon."""

    def __init__(self, f, name):
        self._f = f
        self._name = name
        self._info = f._model.info(name)

    def get_shape(self):
        return list(self._info["shape"])

    def get_dtype(self):
        return self._info["dtype"]

    def __len__(self):
        shape = self._info["shape"]
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    def __getitem__(self, key):
        dtype, shape = self._info["dtype"], self._info["shape"]
        spec, out_shape, sel = _index.plan(key, shape)
        if _dtypes.BITS[dtype] < 8:
            return self._subbyte(dtype, shape, out_shape, sel)
        raw = np.empty(_dtypes.nbytes(dtype, out_shape), np.uint8)
        if raw.nbytes:
            self._f._read_slice(self._name, spec, raw)
        return _output(dtype, out_shape, raw, self._f._framework, self._f._device)

    def _subbyte(self, dtype, shape, out_shape, sel):
        """F4/F6: the daemon cuts only on byte boundaries, so the rows that
        hold the selection come whole (when rows fill whole bytes; else the
        tensor) and the index is applied to their unpacked elements."""
        row_bits = _dtypes.BITS[dtype]
        for s in shape[1:]:
            row_bits *= s
        if any(s == 0 for s in out_shape):
            empty = np.zeros(out_shape, np.uint8)
            return self._convert_codes(dtype, empty)
        lo, hi = 0, shape[0]
        if row_bits % 8 == 0:
            a, b, st, _ = sel[0]
            picked = range(a, b, st)
            lo, hi = min(picked), max(picked) + 1
        rows = (hi - lo,) + tuple(shape[1:])
        raw = np.empty(_dtypes.nbytes(dtype, rows), np.uint8)
        self._f._read_slice(self._name, f"{lo}:{hi}" if (lo, hi) != (0, shape[0]) else "", raw)
        codes = _dtypes.unpack(dtype, raw, rows)
        idx = []
        for d, (a, b, st, is_int) in enumerate(sel):
            off = lo if d == 0 else 0
            if is_int:
                idx.append(a - off)
            else:
                stop = b - off
                idx.append(slice(a - off, None if stop < 0 else stop, st))
        return self._convert_codes(dtype, np.ascontiguousarray(codes[tuple(idx)]).reshape(out_shape))

    def _convert_codes(self, dtype, codes):
        """Unpacked F4/F6 codes as the framework's array, as get_tensor gives
        the tensor."""
        if self._f._framework == "numpy":
            return codes.view(_dtypes.numpy_dtype(dtype))
        import torch
        tdt, packed = _dtypes.torch_dtype(dtype)
        if packed and codes.ndim and codes.shape[-1] % 2 == 0:
            # as get_tensor gives F4: pairs packed, the first in the low nibble
            pairs = np.ascontiguousarray(codes[..., 0::2] | (codes[..., 1::2] << np.uint8(4)))
            t = torch.from_numpy(pairs).view(tdt)
        else:
            t = torch.from_numpy(codes)
        return t.to(self._f._device) if self._f._device.type != "cpu" else t


class safe_open:
    """safetensors.safe_open for a model served by tensord.

    url: http[s]://HOST:PORT/v1/models/MODEL. framework: "numpy" (or "np")
    or "pt" (torch). device: "cpu" for numpy; any torch device for pt.
    token: bearer token (default $TENSORD_TOKEN). connections: parallel
    connections for large reads. verify: TLS verification (False, or a CA
    bundle path). A sharded model opens as one: keys() lists every shard's
    tensors."""

    def __init__(self, url, framework, device="cpu", *, token=None, timeout=60.0,
                 connections=8, verify=True, progress=False):
        self._framework, self._device = _framework(framework, device)
        self._connections = max(1, int(connections))
        self._progress = progress
        self._model = _Model(url, token, timeout, self._connections, verify)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        self._model.session.close()

    def keys(self):
        """Tensor names, sorted (as safetensors sorts them)."""
        return sorted(self._model.tensors)

    def offset_keys(self):
        """Tensor names in storage order: by file, then by offset."""
        return list(self._model.offset_order)

    def metadata(self):
        return self._model.metadata()

    def get_tensor(self, name):
        info = self._model.info(name)
        raw = self._model.read_tensors([name], self._connections, self._progress,
                                       _loader.DEFAULT_CHUNK)[name]
        return _output(info["dtype"], info["shape"], raw, self._framework, self._device)

    def get_tensors(self):
        """Every tensor, read in parallel: {name: tensor} in storage order."""
        names = self.offset_keys()
        bufs = self._model.read_tensors(names, self._connections, self._progress,
                                        _loader.DEFAULT_CHUNK)
        t = self._model.tensors
        return {n: _output(t[n]["dtype"], t[n]["shape"], bufs[n], self._framework,
                           self._device) for n in names}

    def get_slice(self, name):
        return RemoteSlice(self, name)

    def _read_slice(self, name, spec, raw):
        """Reads ?slice=spec of tensor name into raw (its exact size)."""
        m = self._model
        path = m.url.path("tensors", name, query={"slice": spec} if spec else None)
        what = f"tensor {name!r} of model {m.url.model!r}"
        view = memoryview(raw).cast("B")
        chunks = _loader.plan_chunks([(0, view)], _loader.DEFAULT_CHUNK)
        first = chunks[0]
        # The first range also tells the ETag that the others must match.
        etag = _loader.read_chunk(m.session, "GET", path, None, first, None, None, what)
        _loader.run_chunks(m.session, "GET", path, None, chunks[1:], etag, self._connections,
                           None, what)


def _fetch_items(tensors):
    items = []
    for t in tensors:
        if isinstance(t, str):
            items.append(t)
        elif isinstance(t, dict):
            items.append({k: t[k] for k in ("name", "slice") if k in t})
        elif isinstance(t, (tuple, list)) and len(t) == 2:
            items.append({"name": t[0], "slice": t[1]})
        else:
            raise TypeError(f"a tensor is a name, (name, slice) or {{'name', 'slice'}}, "
                            f"not {t!r}")
    return items


def _load_fetch(model, request, framework, device, connections, progress, chunk):
    """One fetch answer, read as ranges of the POST: the first range brings
    the header (and the data after it, up to `chunk` bytes in all); the rest
    go in parallel, each with If-Match on the first's ETag. A small answer is
    a single request."""
    s, path = model.session, model.url.path("fetch")
    what = f"fetch from model {model.url.model!r}"
    resp = s.open("POST", path, {"Range": f"bytes=0-{chunk - 1}"}, request, what=what)
    try:
        if resp.status == 206:
            _, last, total = content_range(resp)
        else:  # a server that ignores Range: the whole answer comes
            total = int(resp.headers["Content-Length"])
            last = total - 1
        etag = resp.headers.get("ETag")
        prefix = bytearray(8)
        read_into(resp, memoryview(prefix))
        hlen = int.from_bytes(prefix, "little")
        if hlen <= 0 or 8 + hlen > total:
            raise SafetensorError(f"{what}: the answer is not a safetensors file")
        header = bytearray(hlen)
        in_first = min(hlen, last + 1 - 8)
        read_into(resp, memoryview(header)[:in_first])
        have = last + 1
        if in_first < hlen:  # a header longer than the first range
            finish(resp)
            resp = None
            rest = _loader.Chunk(8 + in_first)
            rest.add(memoryview(header)[in_first:])
            _loader.read_chunk(s, "POST", path, request, rest, etag, None, what)
            have = 8 + hlen
        doc = json.loads(bytes(header))
        doc.pop("__metadata__", None)
        data0 = 8 + hlen
        names = sorted(doc, key=lambda n: doc[n]["data_offsets"][0])
        bufs, spans = {}, []
        for n in names:
            b, e = doc[n]["data_offsets"]
            bufs[n] = np.empty(e - b, np.uint8)
            spans.append((data0 + b, memoryview(bufs[n]).cast("B")))
        bar = _loader.Progress(total - data0, progress, model.url.model)
        try:
            later = []  # what the first answer does not hold
            for off, v in spans:
                n = max(0, min(len(v), have - off))
                if n:
                    read_into(resp, v[:n], bar)
                if n < len(v):
                    later.append((off + n, v[n:]))
            if resp is not None:
                finish(resp)
                resp = None
            chunks = _loader.plan_chunks(later, chunk)
            _loader.run_chunks(s, "POST", path, request, chunks, etag, connections, bar, what)
        finally:
            bar.close()
    finally:
        if resp is not None:
            abandon(resp)
    return {n: _output(doc[n]["dtype"], doc[n]["shape"], bufs[n], framework, device)
            for n in names}


def load_file(url, framework="numpy", tensors=None, split=None, device="cpu", *, token=None,
              connections=8, progress=None, timeout=60.0, verify=True, chunk_bytes=None):
    """Loads a model, or some of its tensors, as {name: tensor}.

    tensors: None for every tensor, or names, or (name, slice) pairs /
    {"name", "slice"} dicts with a NumPy-style SPEC ("0:1024,::2").
    split: {"world": W, "rank": R, "rules": [{"match": GLOB, "dim": D}, ...]}:
    the tensors the first matching rule names are cut as numpy.array_split
    cuts dimension D into W parts, and part R comes back (one fetch request).
    connections: parallel keep-alive connections. progress: a tqdm bar (None:
    when stderr is a terminal and tqdm is installed). Every tensor is read
    straight into its final array."""
    fw, dev = _framework(framework, device)
    connections = max(1, int(connections))
    chunk = int(chunk_bytes) if chunk_bytes else _loader.DEFAULT_CHUNK
    model = _Model(url, token, timeout, connections, verify)
    try:
        items = None if tensors is None else _fetch_items(tensors)
        if split is not None or (items and any(isinstance(i, dict) for i in items)):
            request = {}
            if items is not None:
                request["tensors"] = items
            if split is not None:
                request["split"] = split
            return _load_fetch(model, request, fw, dev, connections, progress, chunk)
        names = model.offset_order if items is None else list(dict.fromkeys(items))
        for n in names:
            model.info(n)
        bufs = model.read_tensors(names, connections, progress, chunk)
        t = model.tensors
        return {n: _output(t[n]["dtype"], t[n]["shape"], bufs[n], fw, dev) for n in names}
    finally:
        model.session.close()
