"""NumPy basic indexing, checked here and sent to the daemon as a slice spec.

`plan(key, shape)` checks the key as NumPy checks it (raising the error NumPy
raises, with NumPy's text) and returns the spec the daemon understands
("1,::-1,2:5"), the shape NumPy's result has (None adds an axis of 1), and
the per-dimension selection (start, stop, step, is_int) that sub-byte dtypes
apply locally."""
import operator

_TYPES_MSG = ("only integers, slices (`:`), ellipsis (`...`) and numpy.newaxis (`None`) are "
              "valid indices of a remote slice (no integer or boolean arrays)")


def _as_int(x):
    if isinstance(x, bool) or type(x).__name__ == "bool_":
        raise IndexError(_TYPES_MSG)
    try:
        return operator.index(x)
    except TypeError:
        raise IndexError(_TYPES_MSG) from None


def plan(key, shape):
    """Returns (spec, result shape, selection); see the module docstring."""
    if not isinstance(key, tuple):
        key = (key,)
    ndim = len(shape)
    n_ellipsis = sum(1 for k in key if k is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    if used > ndim:
        raise IndexError(f"too many indices for array: array is {ndim}-dimensional, but "
                         f"{used} were indexed")
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (ndim - used))
        else:
            expanded.append(k)
    if not n_ellipsis:
        expanded.extend([slice(None)] * (ndim - used))

    spec, out_shape, sel = [], [], []
    dim = 0
    for k in expanded:
        if k is None:
            out_shape.append(1)
            continue
        n = int(shape[dim])
        if isinstance(k, slice):
            start = None if k.start is None else _as_int(k.start)
            stop = None if k.stop is None else _as_int(k.stop)
            step = None if k.step is None else _as_int(k.step)
            if step == 0:
                raise ValueError("slice step cannot be zero")
            a, b, s = slice(start, stop, step).indices(n)
            count = len(range(a, b, s))
            out_shape.append(count)
            sel.append((a, b, s, False))
            # the resolved bounds, except a negative step's "before the
            # first element" (-1), which the spec writes by leaving it out
            stop_txt = "" if s < 0 and b < 0 else str(b)
            spec.append(f"{a}:{stop_txt}:{s}" if s != 1 else f"{a}:{stop_txt}")
        else:
            i = _as_int(k)
            if i < -n or i >= n:
                raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n}")
            i = i + n if i < 0 else i
            sel.append((i, i + 1, 1, True))
            spec.append(str(i))
        dim += 1
    # whole trailing dimensions need not be sent
    while spec and sel[len(spec) - 1][:3] == (0, int(shape[len(spec) - 1]), 1) \
            and not sel[len(spec) - 1][3]:
        spec.pop()
    return ",".join(spec), tuple(out_shape), sel
