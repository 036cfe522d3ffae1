"""Transfers of the command line (tensord/cli.py): an answer's body streamed
into a file, and a model's file downloaded, resumed and checked against
the daemon's SHA-256; with a progress bar (tqdm's when it is installed, a
line of its own otherwise) on a terminal."""
import hashlib
import os
import sys
import time

from . import _http
from ._errors import BadAnswer

PIECE = 4 << 20  # bytes read and written at a time
EXIT_OK, EXIT_BAD, EXIT_FAILED = 0, 1, 2  # as every tensord command's (cli.py)


class Failure(Exception):
    """What stops a command, with its exit status."""

    def __init__(self, message, status=EXIT_FAILED):
        super().__init__(message)
        self.status = status


class Bar:
    """Bytes done of `total`, shown on stderr when enabled (None: when
    stderr is a terminal)."""

    def __init__(self, total, desc, enabled=None):
        self.total, self.desc, self.done = total, desc, 0
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.tqdm = self.shown = None
        self.start = time.monotonic()
        if not self.enabled:
            return
        try:
            from tqdm import tqdm
            self.tqdm = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024,
                             desc=desc, leave=False)
        except ImportError:
            self.tqdm = None

    def update(self, n):
        self.done += n
        if not self.enabled:
            return
        if self.tqdm is not None:
            self.tqdm.update(n)
            return
        now = time.monotonic()
        if self.shown is not None and now - self.shown < 0.2 and self.done < self.total:
            return
        self.shown = now
        rate = self.done / max(now - self.start, 1e-6) / (1 << 20)
        pct = 100 * self.done / self.total if self.total else 100
        sys.stderr.write(f"\r{self.desc}: {self.done / (1 << 20):.1f} / "
                         f"{self.total / (1 << 20):.1f} MiB {pct:3.0f}% {rate:.1f} MiB/s ")
        sys.stderr.flush()

    def close(self):
        if self.tqdm is not None:
            self.tqdm.close()
        elif self.enabled and self.shown is not None:
            sys.stderr.write("\n")


def body_length(resp, what):
    length = resp.headers.get("Content-Length", "")
    if not _http.is_decimal(length):
        raise BadAnswer(f"{what}: the answer has no Content-Length")
    return int(length)


def copy_body(resp, deadline, what, write, bar):
    """Reads resp's whole body (its Content-Length) a piece at a time,
    handing each to write(view)."""
    left = body_length(resp, what)
    buf = bytearray(min(PIECE, max(left, 1)))
    while left:
        view = memoryview(buf)[:min(left, len(buf))]
        _http.read_into(resp, view, deadline, what, progress=bar.update)
        write(view)
        left -= len(view)
    _http.finish(resp, deadline)


def stream_to(resp, deadline, path, what, progress):
    """resp's body into path ('-': standard output): written to PATH.part
    and renamed once whole, so a file of that name is always complete."""
    bar = Bar(body_length(resp, what), os.path.basename(path) if path != "-" else what, progress)
    try:
        if path == "-":
            copy_body(resp, deadline, what, sys.stdout.buffer.write, bar)
            sys.stdout.buffer.flush()
            return
        part = path + ".part"
        with open(part, "wb") as f:
            copy_body(resp, deadline, what, f.write, bar)
        os.replace(part, path)
    except BaseException:
        _http.abandon(resp)
        raise
    finally:
        bar.close()


def sha256_of(path, h=None):
    h = h or hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(PIECE), b""):
            h.update(block)
    return h


def wait_hash(d, model, name, seconds):
    """The daemon's SHA-256 of model's file name, waiting up to `seconds`
    for it to be hashed."""
    until = time.monotonic() + seconds
    while True:
        for f in d.json("v1", "models", model).get("files", []):
            if f["name"] == name and f.get("sha256"):
                return f["sha256"]
        if time.monotonic() >= until:
            raise Failure(f"the daemon has not hashed {model}/{name} yet after {seconds:g} s: "
                          "it cannot be checked; try again later, or pass a larger --hash-wait")
        time.sleep(0.5)


def download_file(d, model, f, directory, bar, hash_wait):
    """Downloads model's file f (an entry of its description) into
    directory; returns what was done: KEPT (already there, the daemon's
    SHA-256), DOWNLOADED, RESUMED, or MISMATCH (its bytes are not the
    daemon's: nothing is left under its name)."""
    name, size = f["name"], f["size"]
    final = os.path.join(directory, name)
    part, tag = final + ".part", final + ".part.etag"
    if os.path.isfile(final) and os.path.getsize(final) == size:
        sha = f.get("sha256") or wait_hash(d, model, name, hash_wait)
        if sha256_of(final).hexdigest() == sha:
            bar.update(size)
            return "KEPT"
    h, have, etag = hashlib.sha256(), 0, None
    if os.path.isfile(part) and os.path.isfile(tag):
        with open(tag) as t:
            etag = t.read().strip()
        have = os.path.getsize(part)
        if have > size or not etag:
            have = 0
        else:
            sha256_of(part, h)
    resumed = have > 0
    if have < size or size == 0:
        what = f"file {name!r} of model {model!r}"
        headers = {"Range": f"bytes={have}-", "If-Range": etag} if have else None
        resp, deadline = d.open("GET", d.path("v1", "models", model, "files", name), what,
                                headers=headers)
        if resp.status == 200 and have:  # the file changed since the part was written
            h, have, resumed = hashlib.sha256(), 0, False
        elif resp.status == 206 and _http.content_range(resp, what)[0] != have:
            _http.abandon(resp)
            raise BadAnswer(f"{what}: the daemon sent another range than bytes={have}-")
        new_tag = resp.headers.get("ETag", "")
        with open(tag, "w") as t:  # If-Range takes a strong validator only
            t.write(new_tag if not new_tag.startswith("W/") else "")
        bar.update(have)
        with open(part, "ab" if have else "wb") as out:

            def write(view):
                h.update(view)
                out.write(view)
            try:
                copy_body(resp, deadline, what, write, bar)
            except BaseException:
                _http.abandon(resp)
                raise
    else:
        bar.update(have)
    sha = f.get("sha256") or wait_hash(d, model, name, hash_wait)
    os.remove(tag) if os.path.exists(tag) else None
    if h.hexdigest() != sha:
        os.remove(part)
        return "MISMATCH"
    os.replace(part, final)
    return "RESUMED" if resumed else "DOWNLOADED"
