"""Parallel ranged reads of one resource into preallocated buffers.

A resource (a model file, a slice, a fetch answer) is read as byte ranges
over a pool of keep-alive connections. Each range goes straight into the
memoryviews of the arrays it covers (no staging buffer); ranges are cut at
tensor boundaries where a tensor is big enough, so each one stays inside one
contiguous piece of the daemon's files (which it sends with sendfile). Every
range after the first carries If-Match with the first answer's ETag, so a
file replaced midway fails the load instead of mixing two versions; a range
whose connection breaks is asked again from where it stopped, twice at most.
"""
import concurrent.futures
import sys
import threading

from . import _errors
from ._http import abandon, content_range, finish, read_into

DEFAULT_CHUNK = 16 << 20
_RESUMES = 2


class Progress:
    """A byte counter shown with tqdm when it is installed and enabled."""

    def __init__(self, total, enabled, desc):
        self.bar = None
        self.lock = threading.Lock()
        if enabled is None:
            enabled = sys.stderr.isatty()
        if enabled:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                                desc=desc, leave=False)
            except ImportError:
                self.bar = None

    def __call__(self, n):
        if self.bar is not None:
            with self.lock:
                self.bar.update(n)

    def close(self):
        if self.bar is not None:
            self.bar.close()


class Chunk:
    """Bytes [start, end) of the resource and the views they fill, in order."""

    def __init__(self, start):
        self.start = start
        self.end = start
        self.views = []

    def add(self, view):
        self.views.append(view)
        self.end += len(view)


def plan_chunks(spans, chunk):
    """spans: (offset in the resource, writable memoryview) sorted by offset,
    not overlapping. Returns Chunks of at most `chunk` bytes, each contiguous
    in the resource; a chunk ends where a span would overflow it, so spans of
    `chunk` bytes or more start their own chunks."""
    out = []
    cur = None
    for off, view in spans:
        if len(view) == 0:
            continue
        if cur is not None and (off != cur.end or cur.end - cur.start + len(view) > chunk):
            out.append(cur)
            cur = None
        pos = 0
        while pos < len(view):
            if cur is None:
                cur = Chunk(off + pos)
            take = min(len(view) - pos, chunk - (cur.end - cur.start))
            cur.add(view[pos:pos + take])
            pos += take
            if cur.end - cur.start >= chunk:
                out.append(cur)
                cur = None
    if cur is not None:
        out.append(cur)
    return out


def _skip_views(views, n):
    """The views left once their first n bytes are filled."""
    out = []
    for v in views:
        if n >= len(v):
            n -= len(v)
            continue
        out.append(v[n:])
        n = 0
    return out


def _changed(etag, what):
    return _errors.RemoteError(412, "precondition_failed", "changed",
                               f"{what}: changed on the daemon since this read began (it no "
                               f"longer has ETag {etag}); read it again")


def _same_version(a, b):
    """Weak comparison of two entity-tags (RFC 9110 §8.8.3.2)."""
    if a is None or b is None:
        return False
    return (a[2:] if a.startswith("W/") else a) == (b[2:] if b.startswith("W/") else b)


def read_chunk(session, method, path, body, c, etag, progress, what):
    """Fills chunk c from a Range request; resumes after a broken connection.
    With etag given, every part must come from that version: a strong tag
    goes in If-Match, so the daemon refuses another version (412); a weak
    one (a file whose content hash the daemon does not know yet) never
    satisfies If-Match, so each answer's tag is compared with it instead.
    Returns the answer's ETag."""
    done, attempt = 0, 0
    while True:
        first = c.start + done
        headers = {"Range": f"bytes={first}-{c.end - 1}"}
        if etag and not etag.startswith("W/"):
            headers["If-Match"] = etag
        try:
            resp = session.open(method, path, headers, body, what=what)
        except _errors.RemoteError as e:
            if e.status == 412 and etag:
                raise _changed(etag, what) from None
            raise
        counted = [0]
        try:
            if etag and not _same_version(etag, resp.headers.get("ETag")):
                raise _changed(etag, what)
            if resp.status != 206:
                raise _errors.RemoteError(resp.status, None, "range ignored",
                                          f"{what}: expected 206 for a range, got {resp.status}")
            lo, hi, _ = content_range(resp)
            if (lo, hi) != (first, c.end - 1):
                raise _errors.RemoteError(206, None, "wrong range",
                                          f"{what}: asked bytes {first}-{c.end - 1}, got {lo}-{hi}")
            for v in _skip_views(c.views, done):
                read_into(resp, v, progress, counted)
        except OSError:
            abandon(resp)
            done += counted[0]
            attempt += 1
            if attempt > _RESUMES:
                raise
            etag = etag or resp.headers.get("ETag")
            continue
        except BaseException:
            abandon(resp)
            raise
        finish(resp)
        return resp.headers.get("ETag")


def run_chunks(session, method, path, body, chunks, etag, connections, progress, what):
    """Reads the chunks of one resource over up to `connections` connections."""
    run_jobs(session, method, body, [(path, c, etag, what) for c in chunks], connections,
             progress)


def run_jobs(session, method, body, jobs, connections, progress):
    """Reads (path, chunk, etag, what) jobs, of one resource or several (a
    model's files), over one pool of up to `connections` connections, so no
    resource waits for the last range of the one before. The first error
    stops the others (the pending ones are cancelled)."""
    if not jobs:
        return
    if connections <= 1 or len(jobs) == 1:
        for path, c, etag, what in jobs:
            read_chunk(session, method, path, body, c, etag, progress, what)
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=connections) as ex:
        futures = [ex.submit(read_chunk, session, method, path, body, c, etag, progress, what)
                   for path, c, etag, what in jobs]
        try:
            for f in concurrent.futures.as_completed(futures):
                f.result()
        except BaseException:
            for f in futures:
                f.cancel()
            raise
