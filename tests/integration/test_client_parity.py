"""tensord's Python client side by side with the real `safetensors` package
(tests/requirements.txt pins it) on the same generated files: every dtype,
single files and the shards of a sharded model, scalars and 0-size tensors,
both frameworks, keys of every kind.

For each call both are run; then:
- both answer: the same dtype, shape and bytes;
- both raise: the client's exception is an instance of the class safetensors
  raised (so `except` clauses written for safetensors catch it) and of
  tensord.SafetensorError;
- they disagree: the case must fall under one of DIFFERENCES, each of which
  client/python/README.md lists with its reason, and the client's answer is
  then checked against an independent reference: NumPy indexing of the
  tensor built from the generator's bytes (for framework="pt", the same
  bytes and NumPy's indexing where torch refuses a key NumPy takes).

A difference no rule explains fails the test, naming the case."""
import collections
import os
import sys

import ml_dtypes
import numpy as np
import pytest
import safetensors
import torch

from tdutil import MANIFEST, REPO, gen_models

sys.path.insert(0, os.path.join(REPO, "client", "python"))
import tensord  # noqa: E402

README = os.path.join(REPO, "client", "python", "README.md")
# NumPy warns that np.bool_ keys will be errors one day; both sides meet them.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
SUB = gen_models.SUB_BYTE
ML = {"BF16": ml_dtypes.bfloat16, "F8_E4M3": ml_dtypes.float8_e4m3fn,
      "F8_E5M2": ml_dtypes.float8_e5m2, "F8_E4M3FNUZ": ml_dtypes.float8_e4m3fnuz,
      "F8_E5M2FNUZ": ml_dtypes.float8_e5m2fnuz, "F8_E8M0": ml_dtypes.float8_e8m0fnu,
      "F4": ml_dtypes.float4_e2m1fn, "F6_E2M3": ml_dtypes.float6_e2m3fn,
      "F6_E3M2": ml_dtypes.float6_e3m2fn}

# Every way the client may differ from safetensors, with the phrase of
# client/python/README.md's list of differences that explains it.
DIFFERENCES = {
    "numpy-answers": "safetensors' NumPy backend refuses",
    "numpy-bool": "reads `True` and `False` as 1 and 0",
    "numpy-crash": "`OverflowError`",
    "pt-negative-step": "negative steps",
    "pt-np-bool": "`np.bool_`",
    "dtype": "dtypes the framework lacks",
}


def url(daemon, model):
    return f"http://127.0.0.1:{daemon.port}/v1/models/{model}"


def codes(t):
    """F4/F6 elements as uint8 codes, decoded with Python integers."""
    b = gen_models.dtype_bits(t.dtype)
    big = int.from_bytes(t.data, "little")
    n = gen_models.nelems(t.shape)
    return np.array([(big >> (i * b)) & ((1 << b) - 1) for i in range(n)],
                    np.uint8).reshape(t.shape)


def reference(t):
    """The tensor as a NumPy array built from the generator's bytes: the
    dtype itself where NumPy or ml_dtypes has it, F4/F6 unpacked."""
    if t.dtype in SUB:
        return codes(t).view(ML[t.dtype])
    if t.dtype in ML:
        return np.frombuffer(t.data, ML[t.dtype]).reshape(t.shape)
    return np.frombuffer(t.data, gen_models.numpy_dtype(t.dtype)).reshape(t.shape)


def run(fn):
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - both sides' outcomes are compared
        return None, e


def as_bytes(x):
    """(dtype name, shape, bytes) of an array or tensor."""
    if isinstance(x, torch.Tensor):
        c = torch.empty(x.shape, dtype=x.dtype).copy_(x).reshape(-1)  # plain strides
        raw = c.view(torch.uint8).numpy().tobytes() if c.numel() else b""
        return str(x.dtype), tuple(x.shape), raw
    a = np.asarray(x)
    return str(a.dtype), a.shape, a.tobytes()


def outcome(value, exc):
    return repr(exc) if exc is not None else repr(as_bytes(value)[:2])


def same(a, b):
    return type(a) is type(b) and as_bytes(a) == as_bytes(b)


GET = object()  # the key of get_tensor: the whole tensor


def numpy_answer(t, key):
    """NumPy's answer for key on the reference array (None when it raises)."""
    a, e = run(lambda: np.asarray(reference(t)[key]))
    return a


_BITS_OF = {1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}


def torch_answer(t, key):
    """torch's answer for key on the reference array's bytes, each element
    as an integer of its width (None when torch raises)."""
    a = np.array(reference(t), order="C")  # ascontiguousarray makes 0-d arrays 1-d
    base = torch.from_numpy(a.view(_BITS_OF[a.dtype.itemsize]))
    r, e = run(lambda: base[key])
    return None if e is not None else r.numpy()


def is_bool_scalar(k):
    """True, False, np.bool_ and 0-d boolean arrays and tensors."""
    if isinstance(k, (bool, np.bool_)):
        return True
    return isinstance(k, (np.ndarray, torch.Tensor)) and k.dim() == 0 if isinstance(
        k, torch.Tensor) else isinstance(k, np.ndarray) and k.ndim == 0 and k.dtype == bool


def has_np_bool(key):
    items = key if isinstance(key, tuple) else (key,)
    return any(isinstance(k, np.bool_) for k in items)


def negative_or_huge_step(key, shape):
    items = key if isinstance(key, tuple) else (key,)
    for k in items:
        if isinstance(k, slice) and k.step is not None:
            try:
                step = int(k.step)
            except (TypeError, ValueError):
                continue
            if step < 0 or step > max(shape or (1,)):
                return True
    return False


class Parity:
    """Runs cases and counts the differences met, by kind."""

    def __init__(self):
        self.seen = collections.Counter()
        self.cases = 0

    def diff(self, kind, ok, case):
        assert ok, f"{kind}: {case}"
        self.seen[kind] += 1

    def compare(self, st, td, case, t=None, key=GET, framework="numpy"):
        """st, td: (value, exception) of safetensors and of the client."""
        self.cases += 1
        (sv, se), (tv, te) = st, td
        if te is not None and not isinstance(te, tensord.SafetensorError):
            raise AssertionError(f"{case}: the client raised {te!r}, no SafetensorError")
        if se is not None and te is not None:
            if isinstance(se, AttributeError) and framework == "pt" and \
                    (t.dtype in ML or t.dtype in SUB):
                # safetensors has no torch dtype for it, whatever the key;
                # the client has, and refuses the key as torch does
                self.diff("dtype", torch_answer(t, key) is None, case)
                return
            if isinstance(se, (OverflowError, SystemError)) and framework == "numpy":
                # safetensors' conversions of slice bounds failing: NumPy's
                # refusal instead (it answers otherwise, see below)
                self.diff("numpy-crash", numpy_answer(t, key) is None, case)
                return
            assert isinstance(te, type(se)), f"{case}: safetensors {se!r}, client {te!r}"
            return
        if se is None and te is None and same(sv, tv):
            return
        case = f"{case}: safetensors {outcome(sv, se)}, client {outcome(tv, te)}"
        assert te is None, f"the client refuses what safetensors answers: {case}"
        assert t is not None, f"unexplained difference: {case}"
        kind = self.kind(t, key, se, framework, case)
        self.diff(kind, self.right(t, key, tv, kind), case)

    @staticmethod
    def kind(t, key, se, framework, case):
        """Which listed difference explains the case (or fails)."""
        if framework == "numpy":
            if t.dtype in ML:
                return "dtype"
            if se is not None:
                return "numpy-answers"
            items = key if isinstance(key, tuple) else (key,)
            assert any(is_bool_scalar(k) for k in items), f"unexplained difference: {case}"
            return "numpy-bool"
        # safetensors' get_tensor looks a dtype torch lacks up in torch
        # (AttributeError), its load(bytes) in a table (KeyError) that may
        # hand None to torch (TypeError)
        if t.dtype in SUB or isinstance(se, AttributeError) or \
                (t.dtype in ML and isinstance(se, (TypeError, KeyError))):
            return "dtype"
        if has_np_bool(key):
            return "pt-np-bool"
        if negative_or_huge_step(key, t.shape):
            return "pt-negative-step"
        raise AssertionError(f"unexplained difference: {case}")

    @staticmethod
    def right(t, key, tv, kind):
        """Whether the client's answer is NumPy's on the reference array
        (for torch tensors: the same shape and bytes; for dtypes torch
        lacks, torch's indexing of the same bytes, except for the keys where
        the client follows NumPy)."""
        if key is GET:
            want = reference(t)
        elif kind == "dtype" and isinstance(tv, torch.Tensor) and not has_np_bool(key) and \
                not negative_or_huge_step(key, t.shape):
            want = torch_answer(t, key)
        else:
            want = numpy_answer(t, key)
        if want is None:
            return False
        if isinstance(tv, torch.Tensor):
            return as_bytes(tv)[1:] == as_bytes(np.asarray(want))[1:]
        return same(tv, np.asarray(want))


def keys_for(shape, full=True):
    """Keys of every kind for a tensor of `shape`."""
    nd = len(shape)
    n = shape[0] if nd else 1
    keys = [..., (), 0, -1, n, -n - 1, slice(None), slice(1, None), slice(None, None, 2),
            slice(None, None, -1), None, True, [0], "a", 1.5, (..., ...),
            slice(None, None, 0), tuple([0] * (nd + 1))]
    if not full:
        return keys
    keys += [np.int64(1), slice(None, -1), slice(1, None, 3), slice(-2, None, -2),
             slice(5, 1, -1), slice(10, 20), slice(-10, 2), slice(3, 1), slice(0, 0),
             slice(n, n), slice(None, None, 2 ** 70), slice(None, None, -2 ** 70),
             slice(1.0, 2), slice("a", 2), (..., 0), (0, ...), (None, 0), (..., None),
             (None, None), [0, -1], [], [n], [[0, 1]], [0, slice(None)], [True] * n,
             False, (0, True), np.bool_(True), np.array([0, 1]), np.array(1),
             np.array(True), np.array([0.5]), torch.tensor([0, 1]), torch.tensor(1),
             torch.tensor(True), b"a", 0.0, {1}, (0, 1.5), 2 ** 70, [True, 0]]
    if nd:
        keys.append(np.ones(shape, bool) if np.prod(shape) else np.zeros(shape, bool))
        keys.append(np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) % 2 == 0)
    if nd >= 2:
        m = shape[1]
        keys += [(0, [1, 0]), ([0, 1], [1, 0]), (slice(None), [0]), (slice(None), -1),
                 (slice(None, None, -1), [0, 1]), (1, ..., -1), (None, 0, None, ...),
                 (slice(None), slice(None, None, -2)), ([0], slice(None, None, -1)),
                 (slice(1, None), m), (slice(None), np.array([True] * m))]
    if nd >= 3:
        keys += [([0], slice(None), [0]), (0, slice(None), [1, 0]), (..., [0, -1]),
                 (slice(None), 1, slice(None, None, -1))]
    return keys


FULL_KEYS = {"F32", "BF16", "U8", "BOOL", "I64", "C64", "F16", "F8_E5M2", "F4", "F6_E2M3",
             "U16"}
DTYPES = list(gen_models.DTYPES)
_parity = Parity()


def local_path(models_root, model):
    info = MANIFEST.models[model]
    if info.is_root_file:
        return [os.path.join(models_root[0], info.path)]
    return [os.path.join(models_root[0], info.path, f) for f in sorted(info.metadata)]


def model_tensors(model, names):
    return {n: MANIFEST[model][n] for n in names}


def compare_handles(daemon, path, model, framework, parity, full, whole_model=True):
    """One safetensors file against the client's handle on its model."""
    g = safetensors.safe_open(path, framework)
    with tensord.safe_open(url(daemon, model), framework) as f:
        names = g.keys()
        if whole_model:
            assert f.keys() == names and f.offset_keys() == g.offset_keys()
            assert f.metadata() == g.metadata()
        for name in names:
            t = MANIFEST[model][name]
            case = f"{model} {name!r} {framework}"
            parity.compare(run(lambda: g.get_tensor(name)), run(lambda: f.get_tensor(name)),
                           f"{case} get_tensor", t, GET, framework)
            s, h = f.get_slice(name), g.get_slice(name)
            assert s.get_shape() == h.get_shape() and s.get_dtype() == h.get_dtype()
            for key in keys_for(t.shape, full):
                parity.compare(run(lambda: h[key]), run(lambda: s[key]),
                               f"{case} [{key!r} {type(key).__name__}]", t, key, framework)


@pytest.mark.parametrize("framework", ["numpy", "pt"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_dtype_models(daemon, models_root, dtype, framework):
    model = f"dtype-{dtype.lower()}"
    (path,) = local_path(models_root, model)
    compare_handles(daemon, path, model, framework, _parity, dtype in FULL_KEYS)


@pytest.mark.parametrize("framework", ["numpy", "pt"])
def test_sharded_model(daemon, models_root, framework):
    """Each shard against the one handle the client opens on the model."""
    names = set()
    for path in local_path(models_root, "sharded"):
        if path.endswith(".safetensors"):
            compare_handles(daemon, path, "sharded", framework, _parity, True, False)
            with safetensors.safe_open(path, "numpy") as g:
                names |= set(g.keys())
    with tensord.safe_open(url(daemon, "sharded"), framework) as f:
        assert f.keys() == sorted(names)


# ---------------------------------------------------------------------------
# The rest of the surface: arguments, names, closed handles, the loaders

SURFACE = {
    "frameworks": "`tf`, `jax`",
    "backend-none": "`backend=None`",
    "torch-device": "a `torch.device`",
    "closed-slice": "after `close()`",
    "len": "`len()` of a slice",
}
_surface = collections.Counter()


def equal(a, b):
    if isinstance(a, (np.ndarray, torch.Tensor)) or isinstance(b, (np.ndarray, torch.Tensor)):
        return same(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(equal(a[k], b[k]) for k in a)
    if isinstance(a, (safetensors.safe_open, tensord.safe_open)):
        return isinstance(b, (safetensors.safe_open, tensord.safe_open))
    return a == b


def pair(st_fn, td_fn, case, kind=None, python=False):
    """Runs both: the same answer, or exceptions of one class (the client's
    a SafetensorError, unless Python itself raised it: python=True); with
    kind, the listed difference: safetensors refuses and the client
    answers, or (frameworks) the other way round."""
    (sv, se), (tv, te) = run(st_fn), run(td_fn)
    if kind is not None:
        assert (se is None) != (te is None) or type(se) is not type(te), \
            f"{case}: listed as a difference, but both {outcome(sv, se)}"
        _surface[kind] += 1
        if te is not None:
            assert isinstance(te, tensord.SafetensorError), f"{case}: {te!r}"
        return tv
    if se is not None or te is not None:
        assert se is not None and te is not None, \
            f"{case}: safetensors {se!r} {sv!r}, client {te!r} {tv!r}"
        assert isinstance(te, type(se)) and (python or isinstance(te, tensord.SafetensorError)), \
            f"{case}: safetensors {se!r}, client {te!r}"
        return None
    assert equal(sv, tv), f"{case}: safetensors {sv!r}, client {tv!r}"
    return tv


def test_open_arguments(daemon, models_root):
    (path,) = local_path(models_root, "dtype-f32")
    u = url(daemon, "dtype-f32")

    def both(case, kind=None, **kw):
        pair(lambda: safetensors.safe_open(path, **kw), lambda: tensord.safe_open(u, **kw),
             case, kind)

    for fw in ["pt", "torch", "pytorch", "np", "numpy", "PT", "bogus", "", "np ", None, 3]:
        both(f"framework {fw!r}", framework=fw)
    for fw in ["tf", "tensorflow", "jax", "flax", "mlx", "paddle"]:
        both(f"framework {fw!r}", "frameworks", framework=fw)
    for dev in ["cpu", "cuda", "cpu:0", 0, "bogus"]:
        both(f"numpy device {dev!r}", framework="numpy", device=dev)
    for dev in ["cpu", "cuda", "cuda:0", "cuda:3", 0, 2, True, None, "mps", "xpu:1", "bogus",
                "meta", "cpu:1", "CPU", -1, "gpu", "cuda:x", "cuda:-1"]:
        both(f"pt device {dev!r}", framework="pt", device=dev)
    both("pt torch.device", "torch-device", framework="pt", device=torch.device("cpu"))
    for backend in ["mmap", "pread", "x", 3]:
        both(f"backend {backend!r}", framework="pt", backend=backend)
    both("backend None", "backend-none", framework="pt", backend=None)
    pair(lambda: safetensors.safe_open(path + ".nope", "numpy"),
         lambda: tensord.safe_open(u + ".nope", "numpy"), "missing file")


@pytest.mark.parametrize("framework", ["numpy", "pt"])
def test_handle_surface(daemon, models_root, framework):
    (path,) = local_path(models_root, "dtype-f32")
    g = safetensors.safe_open(path, framework)
    f = tensord.safe_open(url(daemon, "dtype-f32"), framework)
    for name in [3, None, b"vec", "nope", ["vec"]]:
        pair(lambda: g.get_tensor(name), lambda: f.get_tensor(name), f"get_tensor({name!r})")
        pair(lambda: g.get_slice(name), lambda: f.get_slice(name), f"get_slice({name!r})")
    pair(g.get_tensors, f.get_tensors, "get_tensors")
    pair(lambda: g.get_slice("vec").get_shape(), lambda: f.get_slice("vec").get_shape(),
         "get_shape")
    pair(lambda: len(g.get_slice("vec")), lambda: len(f.get_slice("vec")), "len", "len")
    if framework == "pt" and not torch.cuda.is_available():
        h = safetensors.safe_open(path, "pt", device="cuda")
        c = tensord.safe_open(url(daemon, "dtype-f32"), "pt", device="cuda")
        pair(lambda: h.get_tensor("vec"), lambda: c.get_tensor("vec"), "cuda get_tensor")
        pair(lambda: h.get_slice("vec")[1:], lambda: c.get_slice("vec")[1:], "cuda slice")
        pair(h.get_tensors, c.get_tensors, "cuda get_tensors")
        c.close()
    gs, fs = g.get_slice("layers.0/attn q"), f.get_slice("layers.0/attn q")
    pair(lambda: g.__exit__(None, None, None), lambda: f.__exit__(None, None, None), "close")
    for what in ["keys", "offset_keys", "metadata", "get_tensors"]:
        pair(getattr(g, what), getattr(f, what), f"{what} after close")
        with pytest.raises(tensord.SafetensorError, match="^File is closed$"):
            getattr(f, what)()
    pair(lambda: g.get_tensor("vec"), lambda: f.get_tensor("vec"), "get_tensor after close")
    pair(lambda: g.get_slice("vec"), lambda: f.get_slice("vec"), "get_slice after close")
    pair(gs.get_shape, fs.get_shape, "get_shape after close")
    pair(gs.get_dtype, fs.get_dtype, "get_dtype after close")
    pair(lambda: gs[1:], lambda: fs[1:], "slice after close", "closed-slice")
    pair(lambda: g.__exit__(None, None, None), lambda: f.__exit__(None, None, None), "again")
    pair(g.__enter__, f.__enter__, "enter after close")


def test_loaders(daemon, models_root):
    import safetensors.numpy
    import safetensors.torch
    (path,) = local_path(models_root, "dtype-f32")
    u = url(daemon, "dtype-f32")
    pair(lambda: safetensors.numpy.load_file(path), lambda: tensord.numpy.load_file(u),
         "numpy.load_file")
    pair(lambda: safetensors.numpy.load_file(path, backend="pread"),
         lambda: tensord.numpy.load_file(u, backend="pread"), "numpy.load_file backend")
    pair(lambda: safetensors.numpy.load_file(path, "cpu"),
         lambda: tensord.numpy.load_file(u, "cpu"), "numpy.load_file(path, 'cpu')", python=True)
    for dev in ["cpu", None, "bogus", "cuda"]:
        pair(lambda: safetensors.torch.load_file(path, dev),
             lambda: tensord.torch.load_file(u, dev), f"torch.load_file(path, {dev!r})")
    pair(lambda: safetensors.torch.load_file(path, device="cpu", backend="mmap"),
         lambda: tensord.torch.load_file(u, device="cpu", backend="mmap"), "keywords")
    # tensord.load_file's second argument: a device there is read as
    # safetensors.torch.load_file reads it
    pair(lambda: safetensors.torch.load_file(path, "cpu"), lambda: tensord.load_file(u, "cpu"),
         "tensord.load_file(url, 'cpu')")
    pair(lambda: safetensors.numpy.load_file(path), lambda: tensord.load_file(u, "numpy"),
         "tensord.load_file(url, 'numpy')")


@pytest.mark.parametrize("framework", ["numpy", "pt"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_load_bytes(models_root, dtype, framework):
    """tensord.numpy.load and tensord.torch.load against safetensors' load
    of the same bytes, tensor by tensor (the differences of dtypes the
    framework lacks as for every other call)."""
    import safetensors.numpy
    import safetensors.torch
    model = f"dtype-{dtype.lower()}"
    (path,) = local_path(models_root, model)
    with open(path, "rb") as fh:
        data = fh.read()
    st, td = ((safetensors.numpy.load, tensord.numpy.load) if framework == "numpy"
              else (safetensors.torch.load, tensord.torch.load))
    (sv, se), (tv, te) = run(lambda: st(data)), run(lambda: td(data))
    if te is not None:  # U16/U32/U64 before torch 2.3: both refuse, as listed
        assert se is not None and isinstance(te, type(se)), f"{model}: {se!r}, {te!r}"
        assert isinstance(te, tensord.SafetensorError)
        return
    assert sv is None or set(sv) == set(tv)
    for name, t in MANIFEST[model].items():
        _parity.compare((sv[name], None) if sv is not None else (None, se), (tv[name], None),
                        f"{model} load {name!r} {framework}", t, GET, framework)
    # tensors that own their bytes, writable as safetensors' are
    for v in tv.values():
        assert (v.flags.writeable if framework == "numpy" else v.is_contiguous())
    # damaged bytes: the same class of error, a SafetensorError
    for cut in (data[:7], data[:-1], data + b"\0", b"\xff" * 8 + data[8:], data[:8] + b"[" +
                data[9:]):
        pair(lambda: st(cut), lambda: td(cut), f"{model} load of damaged bytes")
    pair(lambda: st(bytearray(data)), lambda: td(bytearray(data)), "load(bytearray)")
    pair(lambda: st("text"), lambda: td("text"), "load(str)")


def test_writers_are_safetensors_own(tmp_path):
    """save and save_file (and torch's save_model) are safetensors'; what
    they write, tensord's load reads back."""
    import safetensors.numpy
    import safetensors.torch
    assert tensord.numpy.save is safetensors.numpy.save
    assert tensord.numpy.save_file is safetensors.numpy.save_file
    assert tensord.torch.save is safetensors.torch.save
    assert tensord.torch.save_file is safetensors.torch.save_file
    assert tensord.torch.save_model is safetensors.torch.save_model
    from tensord.numpy import save_file  # noqa: F401  (the import a script writes)
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    back = tensord.numpy.load(tensord.numpy.save(state))
    assert back.keys() == state.keys() and np.array_equal(back["w"], state["w"])
    with pytest.raises(AttributeError):
        tensord.numpy.save_model  # noqa: B018  (safetensors.numpy has none)


def test_missing_framework_raises_module_not_found(models_root, tmp_path):
    """Without torch, framework "pt" and tensord.torch.load raise
    ModuleNotFoundError as safetensors does (and a SafetensorError); so do
    the frameworks tensord does not serve when their module is missing."""
    (path,) = local_path(models_root, "dtype-f32")
    code = f"""
import sys
sys.modules["torch"] = None  # as if it were not installed
sys.path.insert(0, {os.path.join(REPO, "client", "python")!r})
import safetensors, safetensors.numpy, tensord, tensord.torch
data = open({path!r}, "rb").read()
outcomes = []
for fn in (lambda: safetensors.safe_open({path!r}, "pt"),
           lambda: tensord.safe_open("http://127.0.0.1:9/v1/models/m", "pt"),
           lambda: tensord.torch.load(data),
           lambda: tensord.safe_open("http://127.0.0.1:9/v1/models/m", "paddle")):
    try:
        fn()
        outcomes.append("no error")
    except Exception as e:
        outcomes.append((type(e).__mro__[1].__name__ if "tensord" in type(e).__module__
                         else type(e).__name__,
                         isinstance(e, ModuleNotFoundError),
                         isinstance(e, tensord.SafetensorError), str(e)))
print(outcomes)
"""
    import subprocess
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    outcomes = eval(p.stdout.strip().splitlines()[-1])  # noqa: S307 (our own child's repr)
    st, td_open, td_load, other = outcomes
    assert st[:2] == ("ModuleNotFoundError", True), st
    for got in (td_open, td_load):
        assert got[1:3] == (True, True) and got[3] == "No module named 'torch'", got
    assert other[1:3] == (True, True) and "paddle" in other[3], other


class _Tied(torch.nn.Module):
    """An embedding whose output head shares its weight (tied weights), as
    language models have; `extra` adds a parameter the saved file lacks,
    `untie` gives the head its own weight."""

    def __init__(self, extra=False, untie=False, no_norm=False):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.emb = torch.nn.Embedding(6, 4)
        self.head = torch.nn.Linear(4, 6, bias=False)
        with torch.no_grad():
            self.emb.weight.copy_(torch.randn(6, 4, generator=g))
        if not untie:
            self.head.weight = self.emb.weight
        if not no_norm:
            self.norm = torch.nn.LayerNorm(4)
        if extra:
            self.extra = torch.nn.Parameter(torch.zeros(3))


@pytest.fixture(scope="module")
def torch_models(tmp_path_factory):
    """A daemon of this module's own serving a model saved with
    safetensors.torch.save_model (its tied weights stored once)."""
    import faultlib
    import safetensors.torch
    root = tmp_path_factory.mktemp("parity-models")
    os.makedirs(root / "tied")
    path = str(root / "tied" / "model.safetensors")
    safetensors.torch.save_model(_Tied(), path)
    os.utime(path, (gen_models.FIXED_MTIME, gen_models.FIXED_MTIME))
    with faultlib.running_daemon(str(root)) as d:
        yield d, path


@pytest.mark.parametrize("kw", [{}, {"extra": True}, {"untie": True}, {"no_norm": True},
                                {"extra": True, "no_norm": True}])
@pytest.mark.parametrize("strict", [True, False])
def test_load_model(torch_models, kw, strict):
    import safetensors.torch
    d, path = torch_models
    a, b = _Tied(**kw), _Tied(**kw)
    for m in (a, b):
        with torch.no_grad():
            for p in m.parameters():
                p.zero_()
    got = pair(lambda: safetensors.torch.load_model(a, path, strict=strict),
               lambda: tensord.torch.load_model(b, url(d, "tied"), strict=strict),
               f"load_model {kw} strict={strict}")
    if got is not None:
        assert isinstance(got[0], set) and isinstance(got[1], list)
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb) and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_differences_are_listed():
    """Every kind of difference the cases above met is in the README's list
    (run after them: pytest keeps the file's order)."""
    with open(README, encoding="utf-8") as fh:
        text = " ".join(fh.read().split())
    if not _parity.cases:
        pytest.skip("runs after the cases of this file (not selected)")
    print(f"\n{_parity.cases} cases, differences: {dict(_parity.seen)}, {dict(_surface)}")
    assert _parity.cases > 5000, _parity.cases
    assert set(_parity.seen) == set(DIFFERENCES), _parity.seen
    assert set(_surface) == set(SURFACE), _surface
    for kind in _parity.seen:
        assert DIFFERENCES[kind] in text, f"README does not list the difference {kind!r}"
    for kind in _surface:
        assert SURFACE[kind] in text, f"README does not list the difference {kind!r}"
