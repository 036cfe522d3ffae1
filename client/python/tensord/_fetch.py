"""load_file through POST /v1/models/{model}/fetch: many tensors, slices and
tensor-parallel parts in one answer, a safetensors file read as ranges.

The answer comes from an untrusted server: its size is bounded by the
bytes of the tensors asked for before a byte of it is read, its header is
checked as safetensors checks one (_validate.fetch_header) before anything
is allocated for its tensors, and every range must come from one version of
it (a _loader.Pin; a weak tag that turns strong midway reads it again)."""
import numpy as np

from . import _frameworks, _loader, _validate
from ._errors import BadAnswer
from ._http import abandon, content_range, finish, is_decimal, read_into


def items(tensors):
    """The request's `tensors`: names, or {"name", "slice"} dicts."""
    out = []
    for t in tensors:
        if isinstance(t, str):
            out.append(t)
        elif isinstance(t, dict):
            out.append({k: t[k] for k in ("name", "slice") if k in t})
        elif isinstance(t, (tuple, list)) and len(t) == 2:
            out.append({"name": t[0], "slice": t[1]})
        else:
            raise TypeError(f"a tensor is a name, (name, slice) or {{'name', 'slice'}}, "
                            f"not {t!r}")
    return out


def load(model, request, asked_items, framework, connections, progress, chunk, deadline):
    """{name: tensor on the CPU} from one fetch answer. The first range
    brings the header (and the data after it, up to `chunk` bytes in all);
    the rest go in parallel under the first's version. A small answer is a
    single request."""
    asked = None
    if asked_items is not None:
        asked = [i if isinstance(i, str) else i.get("name") for i in asked_items]
        for n in asked:
            model.info(n)
    bound = sum(model.nbytes(n) for n in (model.tensors if asked is None else set(asked)))
    pin = _loader.Pin()
    try:
        doc, bufs = _read(model, request, asked, bound, pin, connections, progress, chunk,
                          deadline)
    except _loader.Upgraded as u:  # once: a strong tag stays strong
        doc, bufs = _read(model, request, asked, bound, _loader.Pin(u.tag), connections,
                          progress, chunk, deadline)
    return {n: _frameworks.output(doc[n]["dtype"], doc[n]["shape"], bufs[n], framework)
            for n in doc}


def _read(model, request, asked, bound, pin, connections, progress, chunk, deadline):
    s, path = model.session, model.url.path("fetch")
    what = f"fetch from model {model.url.model!r}"
    headers = {"Range": f"bytes=0-{chunk - 1}"}
    if pin.if_match():
        headers["If-Match"] = pin.if_match()
    resp = s.open("POST", path, deadline, headers, request, what=what)
    try:
        if resp.status == 206:
            first, last, total = content_range(resp, what)
            if first != 0:
                raise BadAnswer(f"{what}: asked bytes 0-{chunk - 1}, got {first}-{last}")
        elif resp.status == 200:  # a server that ignores Range: the whole answer comes
            length = resp.headers.get("Content-Length", "")
            if not is_decimal(length):
                raise BadAnswer(f"{what}: an answer without Content-Length")
            total = int(length)
            last = total - 1
        else:
            raise BadAnswer(f"{what}: expected 206 or 200, got {resp.status}")
        if total > 8 + _validate.MAX_HEADER + bound:
            raise BadAnswer(f"{what}: an answer of {total} bytes, more than the {bound} bytes "
                            "of the tensors asked for could make")
        pin.check(resp, total, what)
        prefix = bytearray(8)
        if total < 8:
            raise BadAnswer(f"{what}: an answer of {total} bytes is no safetensors file")
        read_into(resp, memoryview(prefix), deadline, what)
        hlen = int.from_bytes(prefix, "little")
        _validate.fetch_header_length(hlen, total, what)
        header = bytearray(hlen)
        in_first = min(hlen, last + 1 - 8)
        read_into(resp, memoryview(header)[:in_first], deadline, what)
        have = last + 1
        if in_first < hlen:  # a header longer than the first range
            finish(resp, deadline)
            resp = None
            rest = _loader.Chunk(8 + in_first)
            rest.add(memoryview(header)[in_first:])
            _loader.read_chunk(s, "POST", path, request, rest, pin, deadline, None, what)
            have = 8 + hlen
        data0 = 8 + hlen
        doc = _validate.fetch_header(bytes(header), total - data0, asked, model.tensors, what)
        del header
        bufs, spans = {}, []
        for n, e in doc.items():
            b, end = e["data_offsets"]
            bufs[n] = np.empty(end - b, np.uint8)
            spans.append((data0 + b, memoryview(bufs[n]).cast("B")))
        bar = _loader.Progress(total - data0, progress, model.url.model)
        try:
            later = []  # what the first answer does not hold
            for off, v in spans:
                n = max(0, min(len(v), have - off))
                if n:
                    read_into(resp, v[:n], deadline, what, bar)
                if n < len(v):
                    later.append((off + n, v[n:]))
            if resp is not None:
                finish(resp, deadline)
                resp = None
            jobs = [(path, c, pin, what) for c in _loader.plan_chunks(later, chunk)]
            _loader.run_jobs(s, "POST", request, jobs, connections, deadline, bar)
        finally:
            bar.close()
    finally:
        if resp is not None:
            abandon(resp)
    return doc, bufs
