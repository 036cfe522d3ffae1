"""Keys of a remote slice: what the daemon cuts, and what is indexed here.

safetensors' slices index as the framework does: with framework="pt", any
key torch's indexing takes (it indexes a torch tensor); with "numpy", NumPy
basic indexing, less a few keys it refuses or mishandles. The client
follows the framework: NumPy's indexing, basic and advanced, for "numpy";
torch's for "pt", except where torch errs and NumPy answers (negative
steps, np.bool_ scalars, steps past the end), which follow NumPy.

`plan(key, shape, framework, subbyte)` first checks the key against an
array of the tensor's shape that holds no data (zero strides), so every
refusal is the framework's own error, raised before a byte moves. Then:

- basic keys (integers, slices with any step, None, Ellipsis) are sent to
  the daemon as they are ("1,::-1,2:5"): it cuts exactly the selection;
- other keys (integer and boolean arrays and lists, bools) are cut to their
  bounding box per dimension (an integer i as i:i+1, a slice as itself, an
  index array as min:max+1, a mask as the box of its True entries), and the
  key, moved into the box, is applied here with the framework's own
  indexing: the result is what indexing the whole tensor gives;
- F4/F6 tensors, which the daemon cuts on byte boundaries only, come as the
  rows that hold the selection (or whole), indexed here;
- keys this module does not take apart (lists mixing slices, several
  Ellipsis, float arrays that torch accepts) fetch the whole tensor and
  index it here.
"""
import operator
import warnings

import numpy as np

from . import _errors


class Plan:
    """What to fetch and what to do with it.

    spec: the daemon's slice spec ("" for the whole tensor); fetch_shape:
    the shape of what it sends back; local: the key to apply to that
    (None: the answer is the result, reshaped to out_shape); out_shape: the
    result's shape."""

    def __init__(self, spec, fetch_shape, local, out_shape):
        self.spec, self.fetch_shape = spec, fetch_shape
        self.local, self.out_shape = local, out_shape


# ---------------------------------------------------------------------------
# Checking a key with the framework's own indexing


def _torch_key(key, shape):
    """key for torch, where the client follows NumPy: np.bool_ scalars are
    bools (torch reads them as 1 and 0), and (for the check only) slices
    with negative or huge steps become slices of the same length that torch
    takes (it refuses negative steps, and huge ones overflow). Only the
    key's own items are changed: lists keep torch's own reading. Returns
    key itself when nothing changed."""
    items = key if isinstance(key, tuple) else (key,)
    used = sum(_dims_used(k) for k in items if k is not Ellipsis)
    out, dim = [], 0
    for k in items:
        if isinstance(k, np.bool_):
            k = bool(k)
        elif isinstance(k, slice) and dim < len(shape):
            k = _torch_slice(k, shape[dim])
        dim += len(shape) - used if k is Ellipsis else _dims_used(k)
        out.append(k)
    if all(a is b for a, b in zip(out, items)):
        return key
    return tuple(out) if isinstance(key, tuple) else out[0]


def _dims_used(k):
    """Dimensions of the tensor an item of a key consumes (a guess for items
    that are neither basic nor arrays, which only torch reads)."""
    if k is None or k is Ellipsis or isinstance(k, (bool, np.bool_)):
        return 0
    dtype = getattr(k, "dtype", None)
    if dtype is not None and str(dtype) in ("bool", "torch.bool"):
        return max(k.ndim, 0)
    return 1


def _torch_slice(s, n):
    try:
        start, stop, step = s.indices(n)
    except (TypeError, ValueError):
        return s  # torch raises its own error for it
    if 0 < step <= max(n, 1):
        return s
    return slice(0, len(range(start, stop, step)))


def _check(key, shape, framework):
    """Indexes a data-less array of `shape` with key: raises what the
    framework raises (as the class safetensors raises, see _errors), else
    returns the result's shape."""
    if framework == "numpy":
        _check_slice_bounds(key)
    try:
        if framework == "numpy":
            dummy = np.broadcast_to(np.zeros((), np.uint8), tuple(shape))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                return tuple(np.asarray(dummy[key]).shape)
        return _check_torch(key, shape)
    except _errors.SafetensorError:
        raise
    except Exception as e:
        if framework == "numpy":
            # safetensors' NumPy backend raises SafetensorError for a bad
            # key, and TypeError for slice bounds that are no integers.
            if isinstance(e, TypeError):
                raise _errors.SafetensorTypeError(str(e)) from None
            raise _errors.SafetensorError(str(e)) from None
        raise _errors.reraise_like(e) from None


def _check_torch(key, shape):
    """_check for torch. Where the key has slices torch refuses and NumPy
    takes, torch's refusal of them is no error; but when the key is refused
    for something else too, which torch would have met after them, the error
    raised is also of the class torch raised first (safetensors' class)."""
    import torch
    dummy = torch.zeros((), dtype=torch.uint8).expand(tuple(shape))
    changed = _torch_key(key, shape)
    if changed is key:
        return tuple(dummy[_torch_key_np(key)].shape)
    first = None
    try:
        dummy[_torch_key_np(key)]  # over zero strides, a huge step may not even fail
    except (ValueError, RuntimeError) as e:
        first = e
    try:
        return tuple(dummy[changed].shape)
    except Exception as e:
        raise _errors.builtin_like(type(e), *(type(first),) if first else ())(str(e)) \
            from None


def _check_slice_bounds(key):
    """safetensors reads a slice's bounds before anything else of the key:
    one that is no integer is its TypeError, whatever else is wrong."""
    for k in key if isinstance(key, tuple) else (key,):
        if isinstance(k, slice):
            for v in (k.start, k.stop, k.step):
                if v is not None:
                    try:
                        operator.index(v)
                    except TypeError:
                        raise _errors.SafetensorTypeError(
                            f"'{type(v).__name__}' object cannot be interpreted as an "
                            "integer") from None


# ---------------------------------------------------------------------------
# Taking a key apart


def _as_index(k):
    """k as a Python int when it is an integer index (not a bool)."""
    if isinstance(k, (bool, np.bool_)):
        return None
    try:
        return operator.index(k)
    except TypeError:
        return None


def _is_torch_tensor(k):
    return type(k).__module__.startswith("torch") and hasattr(k, "numpy")


def _component(k, framework):
    """One item of a key: ("none",), ("ellipsis",), ("bool", b), ("int", i),
    ("slice", s), ("ints", ndarray), ("mask", ndarray); None for items this
    module does not take apart."""
    if k is None:
        return ("none",)
    if k is Ellipsis:
        return ("ellipsis",)
    if isinstance(k, slice):
        return ("slice", k)
    if isinstance(k, (bool, np.bool_)):
        return ("bool", bool(k))
    if _is_torch_tensor(k):
        if k.device.type != "cpu":
            return None
        if framework == "numpy" and k.dim() == 0:
            return None  # NumPy reads these as integers or bools by the array's rank
        k = k.numpy()
    elif isinstance(k, list):
        if framework == "pt":
            flags = {isinstance(x, (bool, np.bool_)) for x in k}
            if len(flags) > 1 or not all(isinstance(x, (bool, int, np.integer, np.bool_))
                                         for x in k):
                return None  # torch reads such lists its own way
        if not k:
            return ("ints", np.zeros(0, np.int64))
        k = np.asarray(k)
    if isinstance(k, np.ndarray):
        if k.dtype == bool:
            return ("bool", bool(k)) if k.ndim == 0 else ("mask", k)
        if k.dtype.kind in "iu":
            return ("int", int(k)) if k.ndim == 0 else ("ints", k.astype(np.int64))
        return None
    i = _as_index(k)
    return None if i is None else ("int", i)


def _components(key, ndim, framework):
    """The key's items, Ellipsis expanded into whole slices, or None."""
    if isinstance(key, tuple):
        items = list(key)
    elif isinstance(key, list) and framework == "pt" and \
            any(isinstance(x, (list, tuple, slice)) or x is None or x is Ellipsis for x in key):
        return None
    else:
        items = [key]
    comps = []
    for k in items:
        c = _component(k, framework)
        if c is None:
            return None
        comps.append(c)
    if sum(1 for c in comps if c[0] == "ellipsis") > 1:
        return None
    used = sum(c[1].ndim if c[0] == "mask" else 1 for c in comps
               if c[0] in ("int", "slice", "ints", "mask"))
    out = []
    for c in comps:
        if c[0] == "ellipsis":
            out.extend([("slice", slice(None))] * (ndim - used))
        else:
            out.append(c)
    if not any(c[0] == "ellipsis" for c in comps):
        out.extend([("slice", slice(None))] * (ndim - used))
    return out


def _slice_text(a, b, s):
    # the resolved bounds, except a negative step's "before the first
    # element" (-1), which the spec writes by leaving it out
    stop = "" if s < 0 and b < 0 else str(b)
    return f"{a}:{stop}:{s}" if s != 1 else f"{a}:{stop}"


def _spec(dims, shape):
    """Joins per-dimension specs, leaving out whole trailing dimensions."""
    while dims and dims[-1] == ("full", int(shape[len(dims) - 1])):
        dims.pop()
    return ",".join(d[0] if d[0] != "full" else ":" for d in dims)


# ---------------------------------------------------------------------------
# Plans


def plan(key, shape, framework, subbyte=None):
    """The Plan for key on a tensor of `shape`; raises the framework's error
    (as safetensors' class) for a key it refuses. subbyte: None, "rows"
    (F4/F6 whose rows fill whole bytes) or "whole" (F4/F6 the daemon cannot
    cut)."""
    shape = tuple(int(s) for s in shape)
    out_shape = _check(key, shape, framework)
    comps = _components(key, len(shape), framework)
    if comps is None or subbyte == "whole":
        return Plan("", shape, key, out_shape)
    if subbyte:
        return _plan_rows(comps, shape, out_shape, framework)
    basic = all(c[0] in ("none", "int", "slice") for c in comps)
    dims, fetch_shape, local = [], [], []
    d = 0
    for c in comps:
        kind = c[0]
        if kind in ("none", "bool"):
            local.append(None if kind == "none" else c[1])
            continue
        if kind == "mask":
            m = c[1]
            box = _mask_box(m)
            for (lo, hi), n in zip(box, shape[d:d + m.ndim]):
                dims.append(_range_text(lo, hi, n))
                fetch_shape.append(hi - lo)
            local.append(_local_array(m[tuple(slice(lo, hi) for lo, hi in box)], framework))
            d += m.ndim
            continue
        n = shape[d]
        if kind == "int":
            i = c[1] + n if c[1] < 0 else c[1]
            if basic:
                dims.append((str(i),))
            else:
                dims.append(_range_text(i, i + 1, n))
                fetch_shape.append(1)
                local.append(0)
        elif kind == "slice":
            a, b, s = c[1].indices(n)
            s = max(-max(n, 1), min(s, max(n, 1)))  # a step past the end: the same selection
            count = len(range(a, b, s))
            dims.append(("full", n) if (a, b, s) == (0, n, 1) else (_slice_text(a, b, s),))
            fetch_shape.append(count)
            local.append(slice(None))
        else:  # ints
            idx = np.where(c[1] < 0, c[1] + n, c[1])
            lo, hi = (int(idx.min()), int(idx.max()) + 1) if idx.size else (0, 0)
            dims.append(_range_text(lo, hi, n))
            fetch_shape.append(hi - lo)
            local.append(_local_array(idx - lo, framework))
        d += 1
    if basic:
        return Plan(_spec(dims, shape), tuple(fetch_shape), None, out_shape)
    return Plan(_spec(dims, shape), tuple(fetch_shape), tuple(local), out_shape)


def _range_text(lo, hi, n):
    return ("full", n) if (lo, hi) == (0, n) else (f"{lo}:{hi}",)


def _mask_box(m):
    """[(lo, hi)] per dimension of mask m: the box of its True entries
    ((0, 0) everywhere when it has none)."""
    nz = np.nonzero(m)
    if not nz[0].size:
        return [(0, 0)] * m.ndim
    return [(int(x.min()), int(x.max()) + 1) for x in nz]


def _local_array(a, framework):
    if framework == "numpy":
        return a
    import torch
    return torch.from_numpy(np.ascontiguousarray(a))


def _plan_rows(comps, shape, out_shape, framework):
    """F4/F6 whose rows fill whole bytes: the rows of dimension 0 that the
    key selects (all of them for a mask over dimension 0); the key, moved by
    the first row, is applied here to the unpacked elements."""
    if not shape:
        return Plan("", shape, tuple(c[1] if c[0] != "none" else None for c in comps),
                    out_shape)
    n = shape[0]
    d = 0
    local, lo, hi = [], 0, n
    for c in comps:
        kind = c[0]
        if kind == "none":
            local.append(None)
            continue
        if kind == "bool":
            local.append(c[1])
            continue
        if d == 0 and kind != "mask":
            lo, hi, first = _rows_of(c, n)
            local.append(_local_array(first, framework) if isinstance(first, np.ndarray)
                         else first)
        elif kind == "mask":
            local.append(_local_array(c[1], framework))
            d += c[1].ndim
            continue
        elif kind == "ints":
            local.append(_local_array(np.where(c[1] < 0, c[1] + shape[d], c[1]), framework))
        else:
            local.append(c[1])
        d += 1
    spec = "" if (lo, hi) == (0, n) else f"{lo}:{hi}"
    return Plan(spec, (hi - lo,) + shape[1:], tuple(local), out_shape)


def _rows_of(c, n):
    """(lo, hi, item moved by lo) for the item c on dimension 0 of size n."""
    kind = c[0]
    if kind == "int":
        i = c[1] + n if c[1] < 0 else c[1]
        return i, i + 1, 0
    if kind == "slice":
        a, b, s = c[1].indices(n)
        picked = range(a, b, s)
        if not picked:
            return 0, 0, slice(0, 0)
        lo, hi = min(picked), max(picked) + 1
        stop = b - lo
        return lo, hi, slice(a - lo, None if stop < 0 else stop, s)
    idx = np.where(c[1] < 0, c[1] + n, c[1])  # ints
    if not idx.size:
        return 0, 0, idx
    lo, hi = int(idx.min()), int(idx.max()) + 1
    return lo, hi, idx - lo


# ---------------------------------------------------------------------------
# Indexing here


def apply(arr, local, framework):
    """arr[local] with the framework's indexing; for torch, negative steps
    and np.bool_ as NumPy reads them. Returns an array (NumPy: never a
    scalar) that does not keep a much larger `arr` alive."""
    if framework == "numpy":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            out = np.asarray(arr[local])
        if out.base is not None and out.size * 2 < arr.size:
            out = out.copy()
        return out
    out = _torch_apply(arr, local)
    if out.numel() * 2 < arr.numel():
        out = out.clone()
    return out


def _odd_step(c, n):
    """Whether item c is a slice whose step torch refuses or mishandles on a
    dimension of n: negative, or past the end."""
    return c[0] == "slice" and c[1].step is not None and \
        not 0 < operator.index(c[1].step) <= max(n, 1)


def _torch_apply(t, key):
    """t[key], a slice with a negative step taken as NumPy takes it (the
    dimension flipped and the slice mirrored), one with a step past the end
    as a step of the dimension's length."""
    import torch
    key = _torch_key_np(key)
    if isinstance(key, list) or (not isinstance(key, tuple) and not isinstance(key, slice)):
        return t[key]
    key = key if isinstance(key, tuple) else (key,)
    comps = _components(key, t.dim(), "pt")
    if comps is None:
        return t[key]
    sizes, d = [], 0
    for c in comps:
        sizes.append(t.shape[d] if c[0] not in ("none", "bool") and d < t.dim() else 0)
        d += 0 if c[0] in ("none", "bool") else c[1].ndim if c[0] == "mask" else 1
    if not any(_odd_step(c, n) for c, n in zip(comps, sizes)):
        return t[key]
    flips, items, d = [], [], 0
    for c in comps:
        if c[0] in ("none", "bool"):
            items.append(None if c[0] == "none" else c[1])
            continue
        if _odd_step(c, t.shape[d]):
            n = t.shape[d]
            a, b, s = c[1].indices(n)
            if s > 0:
                items.append(slice(a, b, max(n, 1)))
            else:
                flips.append(d)
                items.append(slice(n - 1 - a, n - 1 - b, min(-s, max(n, 1))) if a > b
                             else slice(0, 0))
        elif c[0] in ("ints", "mask"):
            items.append(torch.from_numpy(np.ascontiguousarray(c[1])))
        else:
            items.append(c[1])
        d += c[1].ndim if c[0] == "mask" else 1
    return t.flip(flips)[tuple(items)]


def _torch_key_np(key):
    """np.bool_ items as bools (torch would read them as 0 and 1)."""
    if isinstance(key, np.bool_):
        return bool(key)
    if isinstance(key, tuple):
        return tuple(bool(k) if isinstance(k, np.bool_) else k for k in key)
    return key
