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

tensord.numpy.load_file, tensord.torch.load_file and load_model mirror
safetensors.numpy and safetensors.torch. The token comes from `token=` or
$TENSORD_TOKEN (see _http.env_token_for). Every call has a deadline
(`timeout`, _deadline.py). Dtypes: see tensord._dtypes (BF16/FP8 as
ml_dtypes arrays when ml_dtypes is installed, else raw bits).
"""
import numpy as np

from . import _dtypes, _errors, _fetch, _frameworks, _index, _loader, _validate
from ._deadline import Deadline
from ._errors import SafetensorError
from ._http import ModelURL, Session

__all__ = ["safe_open", "load_file", "RemoteSlice"]


class _Model:
    """What safe_open and load_file know of a model: its description
    (GET /v1/models/{model}, checked), a session, and a Pin per file."""

    def __init__(self, url, token, connections, verify, deadline):
        self.url = ModelURL(url)
        self.session = Session(self.url.origin, token, connections, verify)
        try:
            self._describe(deadline)
        except BaseException:
            self.session.close()
            raise

    def _describe(self, deadline):
        what = f"model {self.url.model!r}"
        doc = _validate.model_document(self.session.json(self.url.path(), deadline, what), what)
        if doc["state"] != "ready":
            err = doc.get("error")
            msg = err.get("message") if isinstance(err, dict) else None
            raise SafetensorError(f"model {self.url.model!r} is invalid: "
                                  f"{msg if isinstance(msg, str) else doc['state']}")
        self.doc = doc
        self.files = {f["name"]: f for f in doc["files"]}
        self.tensors = doc["tensors"]
        # Every call of a handle reads a file as one version: a weak tag
        # (content hash not known yet) turns strong in place (_loader.Pin).
        self.pins = {name: _loader.Pin(f.get("etag"), file=True) for name, f in self.files.items()}
        order = {f["name"]: i for i, f in enumerate(doc["files"])}
        self.offset_order = sorted(self.tensors, key=lambda n: (
            order[self.tensors[n]["file"]], self.tensors[n]["data_offsets"][0]))

    def info(self, name):
        if not isinstance(name, str):
            raise _errors.SafetensorTypeError(f"argument 'name': '{type(name).__name__}' object "
                                              "is not an instance of 'str'")
        try:
            return self.tensors[name]
        except KeyError:
            raise _errors.TensorNotFound(
                404, "tensor_not_found", f"no tensor {name!r}",
                f"File does not contain tensor {name} (model {self.url.model})") from None

    def nbytes(self, name):
        b, e = self.tensors[name]["data_offsets"]
        return e - b

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

    def read_tensors(self, names, connections, progress, chunk, deadline):
        """{name: uint8 ndarray of the stored bytes}, read as ranges of the
        model's files (whole tensors in file order make long ranges)."""
        bufs, by_file = {}, {}
        total = sum(self.nbytes(n) for n in names)
        for n in names:
            info = self.tensors[n]
            f = self.files[info["file"]]
            begin, end = info["data_offsets"]
            bufs[n] = np.empty(end - begin, np.uint8)
            start = 8 + f["header_length"] + begin
            by_file.setdefault(f["name"], []).append((start, memoryview(bufs[n]).cast("B")))
        jobs = []
        for fname, spans in by_file.items():
            spans.sort(key=lambda s: s[0])
            what = f"file {fname!r} of model {self.url.model!r}"
            jobs += [(self.url.path("files", fname), c, self.pins[fname], what)
                     for c in _loader.plan_chunks(spans, chunk)]
        bar = _loader.Progress(total, progress, self.url.model)
        try:
            _loader.run_jobs(self.session, "GET", None, jobs, connections, deadline, bar)
        finally:
            bar.close()
        return bufs


class RemoteSlice:
    """safetensors' PySafeSlice for a remote tensor: get_shape(), get_dtype()
    and [...] with the framework's indexing (see _index), the selection cut
    by the daemon."""

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
        f, dtype, shape = self._f, self._info["dtype"], tuple(self._info["shape"])
        fw = f._framework
        if fw == "pt":
            _dtypes.torch_dtype(dtype)  # a dtype torch lacks fails first, as in safetensors
        sub = None
        if _dtypes.BITS[dtype] < 8:
            row_bits = _dtypes.BITS[dtype] * int(np.prod(shape[1:], dtype=object))
            sub = "rows" if shape and row_bits % 8 == 0 else "whole"
        p = _index.plan(key, shape, fw, sub)
        f._check_open()
        raw = np.empty(_dtypes.nbytes(dtype, p.fetch_shape), np.uint8)
        if raw.nbytes:
            deadline = Deadline(f._timeout, f"tensor {self._name!r} of model "
                                            f"{f._model.url.model!r}")
            f._read_slice(self._name, p.spec, raw, deadline)
        if sub:
            codes = _dtypes.unpack(dtype, raw, p.fetch_shape)
            if fw == "pt":
                import torch
                codes = torch.from_numpy(codes)
            res = _frameworks.from_codes(dtype, self._apply(codes, p.local), fw)
        else:
            arr = _frameworks.output(dtype, p.fetch_shape, raw, fw)
            res = arr.reshape(p.out_shape) if p.local is None else self._apply(arr, p.local)
        return _frameworks.to_device(res, f._device, fw)

    def _apply(self, arr, local):
        try:
            return _index.apply(arr, local, self._f._framework)
        except Exception as e:  # only keys the check let through and torch then refused
            raise _errors.reraise_like(e) from None


class safe_open:
    """safetensors.safe_open for a model served by tensord.

    url: http[s]://HOST:PORT/v1/models/MODEL. framework: "numpy" (or "np")
    or "pt" ("torch", "pytorch"). device: "cpu" for numpy; for pt, any
    device safetensors takes ("cpu", "cuda", "cuda:1", 0, ...) or a
    torch.device. backend: safetensors' "mmap"/"pread", accepted and unused.
    token: bearer token (default $TENSORD_TOKEN, see the README). timeout:
    the deadline of each call (opening, get_tensor, a slice, ...) in seconds;
    None: 60 s plus 1 s per MiB received; math.inf: none.
    connections: parallel connections for large reads. verify: TLS
    verification (False, or a CA bundle path). A sharded model opens as one:
    keys() lists every shard's tensors."""

    def __init__(self, url, framework, device="cpu", *, backend=None, token=None, timeout=None,
                 connections=8, verify=True, progress=False):
        _frameworks.check_backend(backend)
        self._model = None
        self._framework, self._device = _frameworks.framework_device(framework, device)
        self._connections = max(1, int(connections))
        self._progress = progress
        self._timeout = timeout
        deadline = Deadline(timeout, f"opening {url}")
        self._model = _Model(url, token, self._connections, verify, deadline)
        self._closed = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Closes the connections; every later call raises
        SafetensorError("File is closed") (slices too: they need the
        network, where safetensors' keep reading its memory map)."""
        self._closed = True
        if self._model is not None:
            self._model.session.close()

    def _check_open(self):
        if self._closed:
            raise SafetensorError("File is closed")

    def _deadline(self, what):
        return Deadline(self._timeout, f"{what} of model {self._model.url.model!r}")

    def keys(self):
        """Tensor names, sorted (as safetensors sorts them)."""
        self._check_open()
        return sorted(self._model.tensors)

    def offset_keys(self):
        """Tensor names in storage order: by file, then by offset."""
        self._check_open()
        return list(self._model.offset_order)

    def metadata(self):
        self._check_open()
        return self._model.metadata()

    def get_tensor(self, name):
        self._check_open()
        info = self._model.info(name)
        raw = self._model.read_tensors([name], self._connections, self._progress,
                                       _loader.DEFAULT_CHUNK,
                                       self._deadline(f"tensor {name!r}"))[name]
        t = _frameworks.output(info["dtype"], info["shape"], raw, self._framework)
        return _frameworks.to_device(t, self._device, self._framework, RuntimeError)

    def get_tensors(self):
        """Every tensor, read in parallel: {name: tensor} in storage order."""
        self._check_open()
        names = self.offset_keys()
        bufs = self._model.read_tensors(names, self._connections, self._progress,
                                        _loader.DEFAULT_CHUNK, self._deadline("every tensor"))
        return _convert(self._model.tensors, names, bufs, self._framework, self._device)

    def get_slice(self, name):
        self._check_open()
        return RemoteSlice(self, name)

    def _read_slice(self, name, spec, raw, deadline):
        """Reads ?slice=spec of tensor name into raw (its exact size)."""
        m = self._model
        path = m.url.path("tensors", name, query={"slice": spec} if spec else None)
        what = f"tensor {name!r} of model {m.url.model!r}"
        view = memoryview(raw).cast("B")
        chunks = _loader.plan_chunks([(0, view)], _loader.DEFAULT_CHUNK)
        _loader.read_resource(m.session, "GET", path, None, chunks, deadline,
                              self._connections, None, what)


def _convert(tensors, names, bufs, framework, device):
    out = {n: _frameworks.output(tensors[n]["dtype"], tensors[n]["shape"], bufs[n], framework)
           for n in names}
    for n in names:
        out[n] = _frameworks.to_device(out[n], device, framework, RuntimeError)
    return out


def load_file(url, framework="numpy", tensors=None, split=None, device="cpu", *, backend=None,
              token=None, connections=8, progress=None, timeout=None, verify=True,
              chunk_bytes=None):
    """Loads a model, or some of its tensors, as {name: tensor}.

    framework: "numpy" or "pt"; a device in its place (load_file(url,
    "cpu"), as safetensors.torch.load_file(filename, device) is called)
    means framework "pt" on that device. tensors: None for every tensor,
    or names, or (name, slice) pairs / {"name", "slice"} dicts with a
    NumPy-style SPEC ("0:1024,::2"). split: {"world": W, "rank": R,
    "rules": [{"match": GLOB, "dim": D}, ...]}: the tensors the first
    matching rule names are cut as numpy.array_split cuts dimension D into
    W parts, and part R comes back (one fetch request). connections:
    parallel keep-alive connections. progress: a tqdm bar (None: when
    stderr is a terminal and tqdm is installed). timeout: the deadline of
    the whole call (see safe_open). Every tensor is read straight into its
    final array."""
    if _frameworks.is_device(framework):
        framework, device = "pt", framework
    _frameworks.check_backend(backend)
    fw, dev = _frameworks.framework_device(framework, device)
    connections = max(1, int(connections))
    chunk = int(chunk_bytes) if chunk_bytes else _loader.DEFAULT_CHUNK
    deadline = Deadline(timeout, f"load_file({url!r})")
    model = _Model(url, token, connections, verify, deadline)
    try:
        items = None if tensors is None else _fetch.items(tensors)
        if split is not None or (items and any(isinstance(i, dict) for i in items)):
            request = {}
            if items is not None:
                request["tensors"] = items
            if split is not None:
                request["split"] = split
            got = _fetch.load(model, request, items, fw, connections, progress, chunk, deadline)
            for n in got:
                got[n] = _frameworks.to_device(got[n], dev, fw, RuntimeError)
            return got
        names = model.offset_order if items is None else list(dict.fromkeys(items))
        for n in names:
            model.info(n)
        bufs = model.read_tensors(names, connections, progress, chunk, deadline)
        return _convert(model.tensors, names, bufs, fw, dev)
    finally:
        model.session.close()
