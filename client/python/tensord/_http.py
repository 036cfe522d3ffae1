"""HTTP for the remote API: model URLs, a pooled keep-alive session on urllib3,
errors, and reading a response body straight into a caller's buffer.

urllib3's own HTTPResponse.readinto reads into a temporary bytes object and
copies it; `read_into` goes one level down, to the http.client response that
urllib3 wraps, whose readinto fills the caller's memoryview from the socket
(recv_into), so tensor bytes land in their final array with no copy in
between. The connection goes back to the pool once the body is read whole.
"""
import json
import os
import re
import urllib.parse

import urllib3

from . import _errors

VERSION = "0.1.0"
USER_AGENT = f"tensord-python/{VERSION}"
_MODELS = "/v1/models/"


class ModelURL:
    """http[s]://host:port[/prefix]/v1/models/{model}, split into its parts.

    The model may be written with '/' or '%2F' between its components; paths
    built from it encode it as one segment (the daemon accepts both)."""

    def __init__(self, url):
        if not isinstance(url, str):
            url = os.fspath(url)
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"{url!r} is not an http:// or https:// URL of a tensord model "
                             "(http://HOST:PORT/v1/models/MODEL)")
        at = parts.path.find(_MODELS)
        model = parts.path[at + len(_MODELS):].strip("/") if at >= 0 else ""
        if at < 0 or not model:
            raise ValueError(f"{url!r} does not name a model: expected "
                             "http://HOST:PORT/v1/models/MODEL")
        if parts.query or parts.fragment:
            raise ValueError(f"{url!r}: a model URL has no query or fragment")
        self.url = url
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.prefix = parts.path[:at]
        self.model = urllib.parse.unquote(model)
        self.base = f"{self.prefix}{_MODELS}{urllib.parse.quote(self.model, safe='')}"

    def path(self, *segments, query=None):
        """The path of an endpoint below the model, each segment encoded."""
        p = self.base + "".join("/" + urllib.parse.quote(s, safe="") for s in segments)
        if query:
            p += "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote, safe=":,-")
        return p


def _error_from(resp, body, what):
    """A RemoteError (or the safetensors-like error the code maps to) for a
    status >= 400, from the daemon's JSON error document."""
    code, message = None, None
    try:
        doc = json.loads(body)
        code, message = doc["error"]["code"], doc["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = body[:300].decode("utf-8", "replace").strip() or resp.reason
    status = resp.status
    text = f"{what}: {status} {code or ''}: {message}".replace(" : ", ": ")
    if status == 404 and code == "model_not_found":
        return _errors.ModelNotFound(status, code, message, text)
    if status == 404 and code == "tensor_not_found":
        return _errors.TensorNotFound(status, code, message, text)
    return _errors.RemoteError(status, code, message, text)


class Session:
    """A pool of keep-alive connections to one daemon (thread-safe)."""

    def __init__(self, origin, token=None, timeout=60.0, connections=8, verify=True):
        token = token if token is not None else os.environ.get("TENSORD_TOKEN")
        self.headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        kw = {}
        if origin.startswith("https:"):
            if verify is False:
                kw["cert_reqs"] = "CERT_NONE"
            elif isinstance(verify, str):
                kw["ca_certs"] = verify
        # Connection errors on an idle pooled connection are retried, and 503
        # (overloaded, not ready, a file being rescanned) after its
        # Retry-After; a response that started is never retried here (callers
        # resume with Range). Every request here only reads, POST included.
        retries = urllib3.Retry(total=4, connect=3, read=0, status=3, redirect=0,
                                status_forcelist=(503,), respect_retry_after_header=True,
                                backoff_factor=0.2, raise_on_status=False,
                                allowed_methods=None)
        self.pool = urllib3.connection_from_url(
            origin, maxsize=max(1, connections), block=True, retries=retries,
            timeout=urllib3.Timeout(connect=min(timeout, 30.0), read=timeout), **kw)
        self.origin = origin

    def close(self):
        self.pool.close()

    def open(self, method, path, headers=None, body=None, what=None):
        """Sends a request; returns the urllib3 response with its body unread.
        Raises RemoteError (and its kinds) for statuses >= 400, ConnectionError
        when the daemon cannot be reached."""
        h = dict(self.headers)
        if headers:
            h.update(headers)
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body, separators=(",", ":")).encode()
            h.setdefault("Content-Type", "application/json")
        try:
            resp = self.pool.urlopen(method, path, body=body, headers=h, preload_content=False,
                                     decode_content=False, redirect=False)
        except urllib3.exceptions.MaxRetryError as e:
            raise ConnectionError(f"cannot reach tensord at {self.origin}: {e.reason}") from None
        except urllib3.exceptions.HTTPError as e:
            raise ConnectionError(f"{method} {self.origin}{path}: {e}") from None
        if resp.status >= 400:
            data = resp.read()
            resp.release_conn()
            raise _error_from(resp, data, what or f"{method} {path}")
        return resp

    def json(self, path, what=None):
        resp = self.open("GET", path, what=what)
        try:
            return json.loads(resp.read())
        finally:
            resp.release_conn()


_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+)$")


def content_range(resp):
    """(first, last, size) of a 206 answer."""
    m = _CONTENT_RANGE.match(resp.headers.get("Content-Range", ""))
    if not m:
        raise _errors.RemoteError(resp.status, None, "bad Content-Range",
                                  f"unexpected Content-Range {resp.headers.get('Content-Range')!r}")
    return tuple(int(x) for x in m.groups())


def read_into(resp, view, progress=None, counter=None):
    """Fills the writable memoryview `view` (bytes) from resp's body; raises
    ConnectionError when the body ends first (and OSError when the socket
    fails). counter[0] grows by every byte stored, as it is stored;
    progress(n) is called as bytes arrive, at most every 1 MiB."""
    raw = getattr(resp, "_fp", None)
    reader = raw.readinto if raw is not None and hasattr(raw, "readinto") else resp.readinto
    got, n, pending = 0, len(view), 0
    try:
        while got < n:
            k = reader(view[got:])
            if not k:
                raise ConnectionError(f"the answer ended after {got} of {n} bytes")
            got += k
            if counter is not None:
                counter[0] += k
            pending += k
            if progress is not None and (pending >= (1 << 20) or got == n):
                progress(pending)
                pending = 0
    finally:
        if progress is not None and pending and got < n:
            progress(pending)


def finish(resp):
    """Reads what is left of a body (nothing, normally) and returns the
    connection to the pool."""
    resp.read()
    resp.release_conn()


def abandon(resp):
    """Drops a response read only in part: its connection cannot be reused."""
    try:
        resp.close()
    finally:
        resp.release_conn()
