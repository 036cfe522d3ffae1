"""safetensors.torch's API for models served by tensord.

    from tensord.torch import load_file, load_model, load
    state = load_file(url, device="cuda:0")           # {name: torch.Tensor}
    missing, unexpected = load_model(model, url)      # into a torch.nn.Module
    state = load(data)                                # safetensors bytes

`save`, `save_file` and `save_model` are safetensors.torch's (there when
safetensors is installed), so this module stands in for safetensors.torch
whole. torch is imported when these are called, not with this module.
"""
from . import _local, _saving
from ._errors import SafetensorRuntimeError
from .remote import load_file as _load_file

__all__ = ["load_file", "load_model", "load", "save", "save_file", "save_model"]


def load(data):
    """safetensors.torch.load(data): the safetensors file in `data` (bytes)
    as {name: torch.Tensor} on the CPU, checked as safetensors checks it;
    each tensor owns a copy of its bytes. Without torch: ModuleNotFoundError,
    as safetensors raises."""
    return _local.load(data, "pt")


def __getattr__(name):
    return _saving.attribute("safetensors.torch", name, __name__)


def load_file(url, device="cpu", *, backend=None, **kwargs):
    """safetensors.torch.load_file(filename, device) for a model URL: every
    tensor as a torch tensor on device, in storage order. backend is
    accepted and unused; the other keyword arguments are tensord.load_file's
    (token, timeout, connections, tensors, split, ...)."""
    return _load_file(url, "pt", device=device, backend=backend, **kwargs)


def load_model(model, url, strict=True, device="cpu", *, backend=None, **kwargs):
    """safetensors.torch.load_model(model, filename, strict, device) for a
    model URL: loads the tensors into `model` (a torch.nn.Module) and
    returns (missing, unexpected) as safetensors does: the set of the
    model's names the URL did not provide, and the list of the URL's names
    the model has no place for. A model whose parameters share memory (tied
    weights) needs only one name of each shared group: safetensors stores
    one, and the others count neither as missing nor, unless the URL holds
    them too, as unexpected. strict: raise RuntimeError when either is not
    empty."""
    state = load_file(url, device=device, backend=backend, **kwargs)
    aliases = _aliases(model.state_dict(), state.keys())
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = set(missing)
    unexpected = list(unexpected)
    for name in aliases:
        if name in missing:
            missing.remove(name)
        else:
            unexpected.append(name)
    if strict and (missing or unexpected):
        msg = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            msg += "\n    Missing key(s) in state_dict: " + \
                ", ".join(f'"{k}"' for k in sorted(missing))
        if unexpected:
            msg += "\n    Unexpected key(s) in state_dict: " + \
                ", ".join(f'"{k}"' for k in sorted(unexpected))
        raise SafetensorRuntimeError(msg)
    return missing, unexpected


def _storage(t):
    """(data pointer, bytes) of the storage behind t."""
    try:
        s = t.untyped_storage()
        return s.data_ptr(), s.nbytes()
    except (AttributeError, NotImplementedError):
        s = t.storage()  # torch < 2.0
        return s.data_ptr(), s.size() * t.element_size()


def _aliases(state, preferred):
    """The names of `state` (a model's state_dict) that share their memory
    with another name kept in their place: of each group of tensors over
    one stretch of memory, the one that covers it whole, preferring a name
    in `preferred` (the URL's), then the first by name."""
    preferred = set(preferred)
    by_storage = {}
    for name, t in state.items():
        if t.device.type == "meta":
            continue
        ptr, size = _storage(t)
        if ptr and size:
            by_storage.setdefault((t.device, ptr, size), []).append(name)
    out = []
    for (_, ptr, size), names in sorted(by_storage.items(), key=lambda kv: sorted(kv[1])):
        for group in _overlapping(state, names):
            if len(group) < 2:
                continue
            whole = sorted(n for n in group if state[n].data_ptr() == ptr and
                           state[n].nelement() * state[n].element_size() == size)
            if not whole:
                raise SafetensorRuntimeError(
                    f"tensors {sorted(group)} share memory and none of them covers all of it: "
                    "there is no name to load it under")
            keep = next((n for n in whole if n in preferred), whole[0])
            out += [n for n in sorted(group) if n != keep]
    return out


def _overlapping(state, names):
    """names over one storage, grouped by the stretches of it they overlap."""
    spans = []
    for n in names:
        t = state[n]
        start = t.data_ptr()
        spans.append((start, start + t.nelement() * t.element_size(), n))
    spans.sort()
    groups, end = [], None
    for start, stop, n in spans:
        if end is not None and start < end:
            groups[-1].append(n)
            end = max(end, stop)
        else:
            groups.append([n])
            end = stop
    return groups
