"""Parallel ranged reads of one resource into preallocated buffers.

A resource (a model file, a slice, a fetch answer) is read as byte ranges
over a pool of keep-alive connections. Each range goes straight into the
memoryviews of the arrays it covers (no staging buffer); ranges are cut at
tensor boundaries where a tensor is big enough, so each one stays inside one
contiguous piece of the daemon's files (which it sends with sendfile). Every
range of a resource must come from one version of it (a Pin); a range whose
connection breaks is asked again from where it stopped, twice at most.
"""
import calendar
import concurrent.futures
import email.utils
import re
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


def _opaque(tag):
    return tag[2:] if tag.startswith("W/") else tag


class Upgraded(Exception):
    """A derived resource (a slice, a fetch answer) whose weak ETag turned
    strong midway: the daemon learnt its files' content hashes. Nothing
    relates the two tags, so the caller reads it again under the strong one
    (`tag`)."""

    def __init__(self, tag):
        super().__init__(tag)
        self.tag = tag


_WEAK_FILE = re.compile(r'W/"([0-9a-f]{1,16})-([0-9a-f]{1,16})"$')


class Pin:
    """The version every range of one resource must come from, shared by
    the ranges read in parallel (and, for a model's files, by every call of
    a safe_open handle).

    A strong ETag goes in If-Match, so the daemon refuses another version
    (412). A weak one (a file whose content hash the daemon does not know
    yet) never satisfies If-Match, so each answer's tag is compared with it
    instead; and when the daemon has learnt the hash meanwhile, the answer
    carries the strong tag. For a model file, the weak tag is
    W/"<size>-<mtime ns>" (docs/API.md): the strong answer is taken as the
    same version when its Content-Range size and Last-Modified second agree
    with it, and becomes the pin. For derived resources nothing ties the
    two tags together: Upgraded makes the caller start again.
    """

    def __init__(self, tag=None, file=False):
        self.lock = threading.Lock()
        self.file = file
        self.weak = self.strong = None
        if tag:
            self._take(tag)

    def _take(self, tag):
        if tag.startswith("W/"):
            self.weak = tag
        else:
            self.strong = tag

    def if_match(self):
        return self.strong

    def check(self, resp, total, what):
        """Accepts resp's version or raises: RemoteError 412 for another
        version, Upgraded for a derived resource whose tag turned strong."""
        tag = resp.headers.get("ETag")
        with self.lock:
            if self.weak is None and self.strong is None:
                if tag:
                    self._take(tag)
                return
            if tag and any(t is not None and _opaque(t) == _opaque(tag)
                           for t in (self.weak, self.strong)):
                return
            if tag and not tag.startswith("W/") and self.strong is None and self.weak:
                if not self.file:
                    raise Upgraded(tag)
                if self._same_file(resp, total):
                    self.strong = tag
                    return
        raise changed(self.strong or self.weak, what)

    def _same_file(self, resp, total):
        m = _WEAK_FILE.match(self.weak)
        if not m:
            return False
        size, mtime_ns = int(m.group(1), 16), int(m.group(2), 16)
        try:
            lm = email.utils.parsedate_tz(resp.headers.get("Last-Modified", ""))
            seconds = calendar.timegm(lm[:9]) - (lm[9] or 0) if lm else None
        except (TypeError, ValueError, OverflowError):
            seconds = None
        return size == total and seconds == mtime_ns // 1_000_000_000


def changed(etag, what):
    return _errors.RemoteError(412, "precondition_failed", "changed",
                               f"{what}: changed on the daemon since this read began (it no "
                               f"longer has ETag {etag}); read it again")


def read_chunk(session, method, path, body, c, pin, deadline, progress, what):
    """Fills chunk c from a Range request under `pin` (see Pin); resumes
    after a broken connection."""
    done, attempt = 0, 0
    while True:
        first = c.start + done
        headers = {"Range": f"bytes={first}-{c.end - 1}"}
        strong = pin.if_match()
        if strong:
            headers["If-Match"] = strong
        try:
            resp = session.open(method, path, deadline, headers, body, what=what)
        except _errors.RemoteError as e:
            if e.status == 412 and strong:
                raise changed(strong, what) from None
            raise
        counted = [0]
        try:
            if resp.status != 206:
                raise _errors.BadAnswer(f"{what}: expected 206 for a range, got {resp.status}")
            lo, hi, total = content_range(resp, what)
            if (lo, hi) != (first, c.end - 1):
                raise _errors.BadAnswer(f"{what}: asked bytes {first}-{c.end - 1}, got "
                                        f"{lo}-{hi}")
            pin.check(resp, total, what)
            for v in _skip_views(c.views, done):
                read_into(resp, v, deadline, what, progress, counted)
        except _errors.RemoteConnectionError:
            abandon(resp)
            done += counted[0]
            attempt += 1
            if attempt > _RESUMES:
                raise
            continue
        except BaseException:
            abandon(resp)
            raise
        finish(resp, deadline)
        return


def run_jobs(session, method, body, jobs, connections, deadline, progress):
    """Reads (path, chunk, pin, what) jobs, of one resource or several (a
    model's files), over one pool of up to `connections` connections, so no
    resource waits for the last range of the one before. The first error
    stops the others (the pending ones are cancelled)."""
    if not jobs:
        return
    if connections <= 1 or len(jobs) == 1:
        for path, c, pin, what in jobs:
            read_chunk(session, method, path, body, c, pin, deadline, progress, what)
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=connections) as ex:
        futures = [ex.submit(read_chunk, session, method, path, body, c, pin, deadline,
                             progress, what)
                   for path, c, pin, what in jobs]
        try:
            for f in concurrent.futures.as_completed(futures):
                f.result()
        except BaseException:
            for f in futures:
                f.cancel()
            raise


def read_resource(session, method, path, body, chunks, deadline, connections, progress, what,
                  pin=None):
    """Reads the chunks of one derived resource (a slice): the first range
    pins the version the others must match; when its weak tag turns strong
    midway, the whole resource is read again under the strong one (once)."""
    def read(pin):
        read_chunk(session, method, path, body, chunks[0], pin, deadline, progress, what)
        run_jobs(session, method, body, [(path, c, pin, what) for c in chunks[1:]],
                 connections, deadline, progress)
    try:
        read(pin or Pin())
    except Upgraded as u:  # once: a strong tag stays strong
        read(Pin(u.tag))
