"""HTTP for the remote API: model URLs, a pooled keep-alive session on urllib3,
errors, and reading a response body, bounded, straight into a caller's buffer.

Everything here treats the server as untrusted: every call has a deadline
(_deadline.py) that bounds connecting, waiting, retrying and reading; every
document and error body is read with a size limit; a body longer than what
was asked is dropped with its connection, never drained.

urllib3's own HTTPResponse.readinto reads into a temporary bytes object and
copies it; `read_into` goes one level down, to the http.client response that
urllib3 wraps, whose readinto fills the caller's memoryview from the socket
(recv_into), so tensor bytes land in their final array with no copy in
between. The connection goes back to the pool once the body is read whole.
"""
import collections
import email.utils
import http.client
import ipaddress
import json
import os
import re
import socket
import ssl
import time
import urllib.parse

import urllib3
import urllib3.connection
import urllib3.exceptions

from . import _deadline, _errors

VERSION = "0.1.0"
USER_AGENT = f"tensord-python/{VERSION}"
_MODELS = "/v1/models/"

# Size limits of what the client reads into memory without knowing its size
# from a document it already checked. A model description takes about 140
# bytes per tensor: 64 MiB is some 450,000 tensors.
MAX_DOCUMENT_BYTES = 64 << 20
MAX_ERROR_BODY = 64 << 10
_DRAIN = 64 << 10           # what is read of a body's unread end to keep its connection
_PIECE = 1 << 20            # bytes read_into reads at a time
_STATUS_RETRIES = 3         # 503 answers retried, after their Retry-After
_CONNECT_RETRIES = 2        # connections refused or timed out, retried
MAX_RETRY_AFTER = 30.0      # a longer Retry-After is an error at once


# ---------------------------------------------------------------------------
# Sockets whose every operation is bounded by the call's deadline


_REARM = 0.05  # seconds a socket's timeout may lag behind the deadline


def _arm(sock):
    """Sets sock's timeout to what is left of the bound deadline. Setting
    it costs a system call or two (the blocking mode), so it is set again
    only once it is _REARM away from the time left: a recv may then wait
    that much past the deadline, at most."""
    t = _deadline.socket_timeout()
    if t is False:
        return
    cur = sock.gettimeout()
    if t is None:
        if cur is not None:
            sock.settimeout(None)
    elif cur is None or abs(cur - t) > _REARM:
        sock.settimeout(t)


class _DeadlineMixin:
    """Socket operations that first take the time left to the deadline bound
    to their thread as the socket's timeout (see _deadline.py). No state of
    its own: a socket's class can be swapped for one that mixes it in."""
    __slots__ = ()

    def recv(self, *args):
        _arm(self)
        return super().recv(*args)

    def recv_into(self, *args):
        _arm(self)
        return super().recv_into(*args)

    def send(self, *args):
        _arm(self)
        return super().send(*args)

    def sendall(self, *args):
        _arm(self)
        return super().sendall(*args)


class _DeadlineSocket(_DeadlineMixin, socket.socket):
    __slots__ = ()


class _DeadlineSSLSocket(_DeadlineMixin, ssl.SSLSocket):
    """The mixin over TLS (ssl applies the timeout across one record's reads)."""


class _Connection(urllib3.connection.HTTPConnection):
    def _new_conn(self):
        sock = super()._new_conn()
        if type(sock) is socket.socket:  # same layout: the class can be swapped
            sock.__class__ = _DeadlineSocket
        return sock


class _HTTPSConnection(urllib3.connection.HTTPSConnection):
    def connect(self):
        super().connect()
        if type(self.sock) is ssl.SSLSocket:
            self.sock.__class__ = _DeadlineSSLSocket


class _Pool(urllib3.HTTPConnectionPool):
    ConnectionCls = _Connection


class _HTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


# ---------------------------------------------------------------------------
# URLs and the token


class Origin(collections.namedtuple("Origin", "scheme host port")):
    """Where a URL's requests go: its scheme, host (lower case; an IPv6
    address in brackets) and port (made explicit). The one parse of a URL
    that both the token decision and the connection use."""

    def __str__(self):
        return f"{self.scheme}://{self.host}:{self.port}"


_PRINTABLE = re.compile(r"[!-~]*\Z")
_URL = re.compile(r"(https?)://([^/?#]*)(.*)\Z", re.I | re.S)
_AUTHORITY = re.compile(r"\[([0-9A-Fa-f:.]+)\](?::([0-9]*))?|([A-Za-z0-9.-]+)(?::([0-9]*))?")


def split_url(url):
    """(Origin, the rest of the URL: path, query and fragment) of an
    http[s] URL, or ValueError. Strict, so that no two parsers can read it
    differently: printable ASCII only (no space, control byte, backslash),
    no user information (user@host: pass token=), a host name of letters,
    digits, '.' and '-' or a bracketed IPv6 address, a port of digits.
    ("http://HOST\\@127.0.0.1/" is 127.0.0.1 to urllib.parse and HOST to
    urllib3: such a URL is refused, not read one way for the token and the
    other way for the connection.)"""
    if not isinstance(url, str):
        url = os.fspath(url)
    if not isinstance(url, str) or not _PRINTABLE.match(url) or "\\" in url:
        raise ValueError(f"{url!r} is not a URL tensord takes: printable ASCII without spaces "
                         "or backslashes")
    m = _URL.match(url)
    if not m:
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    scheme, authority, rest = m.group(1).lower(), m.group(2), m.group(3)
    if "@" in authority:
        raise ValueError(f"{url!r}: a URL with user information (user@host) is refused; pass "
                         "the token with token= or $TENSORD_TOKEN")
    a = _AUTHORITY.fullmatch(authority)
    host = port = None
    if a and a.group(1):
        try:
            host = "[" + ipaddress.IPv6Address(a.group(1)).compressed + "]"
        except ValueError:
            host = None
        port = a.group(2)
    elif a:
        host, port = a.group(3).lower(), a.group(4)
    if not host or (port and not 0 < int(port) < 65536):
        raise ValueError(f"{url!r}: {authority!r} is not a host with an optional port")
    return Origin(scheme, host, int(port) if port else {"http": 80, "https": 443}[scheme]), rest


class ModelURL:
    """http[s]://host:port[/prefix]/v1/models/{model}, split into its parts
    (split_url's rules).

    The model may be written with '/' or '%2F' between its components; paths
    built from it encode it as one segment (the daemon accepts both)."""

    def __init__(self, url):
        if not isinstance(url, str):
            url = os.fspath(url)
        origin, rest = split_url(url)
        path, _, tail = rest.partition("?")
        path, hash_, frag = path.partition("#")
        at = path.find(_MODELS)
        model = path[at + len(_MODELS):].strip("/") if at >= 0 else ""
        if at < 0 or not model:
            raise ValueError(f"{url!r} does not name a model: expected "
                             "http://HOST:PORT/v1/models/MODEL")
        if tail or hash_ or "?" in rest:
            raise ValueError(f"{url!r}: a model URL has no query or fragment")
        self.url = url
        self.origin = origin
        self.prefix = path[:at]
        self.model = urllib.parse.unquote(model)
        self.base = f"{self.prefix}{_MODELS}{urllib.parse.quote(self.model, safe='')}"

    def path(self, *segments, query=None):
        """The path of an endpoint below the model, each segment encoded."""
        p = self.base + "".join("/" + urllib.parse.quote(s, safe="") for s in segments)
        if query:
            p += "?" + urllib.parse.urlencode(query, quote_via=urllib.parse.quote, safe=":,-")
        return p


def _is_loopback(host):
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def env_token_for(origin):
    """$TENSORD_TOKEN when it may go to origin (an Origin, or a URL read
    with split_url): the origin of $TENSORD_URL (the daemon the token was
    given for) or a loopback address. Elsewhere, over plain http above all,
    a token read from the environment would leak to whatever host a URL
    names: only token= sends it there."""
    token = os.environ.get("TENSORD_TOKEN")
    if not token:
        return None, False
    if not isinstance(origin, Origin):
        origin = split_url(origin)[0]
    try:
        given_for = split_url(os.environ.get("TENSORD_URL", ""))[0]
    except ValueError:
        given_for = None  # none, or one no origin can be read from: loopback only
    if _is_loopback(origin.host) or origin == given_for:
        return token, False
    return None, True


# ---------------------------------------------------------------------------
# Errors


def _error_from(status, reason, body, what, withheld=False):
    """A RemoteError (or the safetensors-like error the code maps to) for a
    status >= 400, from the daemon's JSON error document."""
    code, message = None, None
    try:
        doc = json.loads(body)
        code, message = doc["error"]["code"], doc["error"]["message"]
        if not isinstance(code, str) or not isinstance(message, str):
            code, message = None, None
    except (ValueError, KeyError, TypeError, RecursionError):
        pass
    if message is None:
        message = body[:300].decode("utf-8", "replace").strip() or reason
    text = f"{what}: {status} {code or ''}: {message}".replace(" : ", ": ")
    if status == 401 and withheld:
        text += (" ($TENSORD_TOKEN is sent only to the origin of $TENSORD_URL and to loopback "
                 "addresses: pass token= to send it to this one)")
    if status == 404 and code == "model_not_found":
        return _errors.ModelNotFound(status, code, message, text)
    if status == 404 and code == "tensor_not_found":
        return _errors.TensorNotFound(status, code, message, text)
    return _errors.RemoteError(status, code, message, text)


def is_decimal(v):
    """Whether header value v is ASCII digits (str.isdigit alone also takes
    the '²' a Latin-1 header can hold, which int() refuses)."""
    return v.isascii() and v.isdigit()


def _retry_after(resp, attempt):
    """Seconds a 503 asks to wait (delta-seconds or an HTTP date); a short
    backoff when it does not say."""
    v = (resp.headers.get("Retry-After") or "").strip()
    if is_decimal(v):
        return float(v)
    if v:
        try:
            when = email.utils.parsedate_to_datetime(v)
            return max(0.0, when.timestamp() - time.time())
        except (TypeError, ValueError, IndexError, OverflowError):
            pass
    return 0.2 * (2 ** attempt)


def _timed_out(e, deadline):
    """Whether e is a socket timing out, which under a deadline means the
    deadline passed (every timeout is set to what is left of it)."""
    if deadline.at is None or isinstance(e, urllib3.exceptions.NewConnectionError):
        return False
    return isinstance(e, (TimeoutError, socket.timeout, urllib3.exceptions.TimeoutError))


class Session:
    """A pool of keep-alive connections to one daemon (thread-safe).

    origin: an Origin (ModelURL's), whose host and port are what the pool
    connects to: the very parse the token decision read. token: sent as a
    bearer token; None reads $TENSORD_TOKEN, which goes only where
    env_token_for allows."""

    def __init__(self, origin, token=None, connections=8, verify=True):
        if not isinstance(origin, Origin):
            origin = split_url(origin)[0]
        withheld = False
        if token is None:
            token, withheld = env_token_for(origin)
        self.withheld = withheld
        self.headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        kw = {}
        pool = _Pool
        if origin.scheme == "https":
            pool = _HTTPSPool
            if verify is False:
                kw["cert_reqs"] = "CERT_NONE"
            elif isinstance(verify, str):
                kw["ca_certs"] = verify
        # Retries are this class's (open): urllib3's would sleep whatever
        # Retry-After says and retry past the call's deadline.
        self.pool = pool(origin.host, origin.port, maxsize=max(1, connections), block=True,
                         retries=False, **kw)
        self.origin = origin

    def close(self):
        self.pool.close()

    def _urlopen(self, method, path, h, body, deadline):
        left = deadline.remaining()
        with deadline.bind():
            return self.pool.urlopen(method, path, body=body, headers=h, preload_content=False,
                                     decode_content=False, redirect=False, retries=False,
                                     timeout=urllib3.Timeout(connect=left, read=left))

    def open(self, method, path, deadline, headers=None, body=None, what=None):
        """Sends a request; returns the urllib3 response with its body unread.
        Retries a refused connection and a 503 (after its Retry-After) while
        the deadline allows. Raises RemoteError (and its kinds) for statuses
        >= 400, RemoteConnectionError when the daemon cannot be reached,
        DeadlineExceeded when the deadline passes."""
        what = what or f"{method} {path}"
        h = dict(self.headers)
        if headers:
            h.update(headers)
        if body is not None and not isinstance(body, (bytes, bytearray)):
            body = json.dumps(body, separators=(",", ":")).encode()
            h.setdefault("Content-Type", "application/json")
        refused = statuses = 0
        while True:
            try:
                resp = self._urlopen(method, path, h, body, deadline)
            except _errors.DeadlineExceeded:
                raise deadline.exceeded(what) from None
            except (urllib3.exceptions.HTTPError, OSError) as e:
                if deadline.expired():
                    raise deadline.exceeded(what) from None
                if isinstance(e, urllib3.exceptions.NewConnectionError) and \
                        refused < _CONNECT_RETRIES:
                    deadline.sleep(0.1 * (2 ** refused))
                    refused += 1
                    continue
                if _timed_out(e, deadline):
                    raise deadline.exceeded(what) from None
                reason = getattr(e, "reason", None) or e
                raise _errors.RemoteConnectionError(
                    f"{what}: cannot reach tensord at {self.origin}: {reason}") from None
            if resp.status < 400:
                return resp
            data, _ = read_capped(resp, MAX_ERROR_BODY, deadline, what)
            err = _error_from(resp.status, resp.reason, data, what, self.withheld)
            if resp.status == 503 and statuses < _STATUS_RETRIES:
                wait = _retry_after(resp, statuses)
                left = deadline.remaining()
                if wait <= MAX_RETRY_AFTER and (left is None or wait < left):
                    deadline.sleep(wait)
                    statuses += 1
                    continue
                err.args = (f"{err.args[0]} (it asked to retry after {wait:g} s, past this "
                            "call's deadline)",)
            raise err

    def json(self, path, deadline, what=None):
        """GET path as JSON, at most MAX_DOCUMENT_BYTES of it."""
        resp = self.open("GET", path, deadline, what=what)
        data, over = read_capped(resp, MAX_DOCUMENT_BYTES, deadline, what)
        if over:
            raise _errors.BadAnswer(f"{what}: the answer is larger than {MAX_DOCUMENT_BYTES} "
                                    "bytes (tensord._http.MAX_DOCUMENT_BYTES)")
        if resp.status != 200:
            raise _errors.BadAnswer(f"{what}: expected 200, got {resp.status}")
        try:
            return json.loads(data)
        except (ValueError, RecursionError) as e:
            raise _errors.BadAnswer(f"{what}: the answer is not JSON ({e})") from None


# ---------------------------------------------------------------------------
# Reading bodies


def _raw(resp):
    """The http.client response under urllib3's (reads into buffers without
    a copy, and raises socket errors as they are)."""
    raw = getattr(resp, "_fp", None)
    return raw if raw is not None and hasattr(raw, "readinto") else resp


class _Reading:
    """Turns what reading a body can raise into the client's errors."""

    def __init__(self, deadline, what):
        self.deadline, self.what = deadline, what

    def __enter__(self):
        self.bound = self.deadline.bind()
        self.bound.__enter__()
        return self

    def __exit__(self, kind, exc, tb):
        self.bound.__exit__(kind, exc, tb)
        if exc is None or isinstance(exc, _errors.SafetensorError):
            if isinstance(exc, _errors.DeadlineExceeded):
                raise self.deadline.exceeded(self.what) from None
            return False
        if isinstance(exc, (OSError, http.client.HTTPException, ssl.SSLError,
                            urllib3.exceptions.HTTPError)):
            if self.deadline.expired() or _timed_out(exc, self.deadline):
                raise self.deadline.exceeded(self.what) from None
            raise _errors.RemoteConnectionError(f"{self.what}: the answer broke off ({exc})") \
                from None
        return False


def read_capped(resp, cap, deadline, what):
    """(body, over): resp's body (a bytearray) when it holds at most cap
    bytes; else its first bytes and over=True, and the connection is
    dropped, not drained."""
    raw = _raw(resp)
    length = resp.headers.get("Content-Length", "")
    buf = bytearray()
    if is_decimal(length) and int(length) > cap:
        abandon(resp)
        return buf, True
    try:
        with _Reading(deadline, what):
            while len(buf) <= cap:
                chunk = raw.read(min(1 << 16, cap + 1 - len(buf)))
                if not chunk:
                    break
                deadline.received(len(chunk))
                buf += chunk
    except BaseException:
        abandon(resp)
        raise
    if len(buf) > cap:
        abandon(resp)
        del buf[4096:]  # enough to quote, without a copy of the rest
        return buf, True
    finish(resp, deadline)
    return buf, False


_CONTENT_RANGE = re.compile(r"bytes (\d{1,20})-(\d{1,20})/(\d{1,20})$")


def content_range(resp, what="answer"):
    """(first, last, size) of a 206 answer."""
    v = resp.headers.get("Content-Range", "")
    m = _CONTENT_RANGE.match(v)
    first, last, size = (int(x) for x in m.groups()) if m else (1, 0, 0)
    if not m or first > last or last >= size:
        raise _errors.BadAnswer(f"{what}: unexpected Content-Range {v!r}")
    return first, last, size


def read_into(resp, view, deadline, what="answer", progress=None, counter=None):
    """Fills the writable memoryview `view` (bytes) from resp's body; raises
    RemoteConnectionError when the body ends first or the connection fails,
    DeadlineExceeded when the deadline passes. counter[0] grows by every
    byte stored, as it is stored; progress(n) is called as bytes arrive, at
    most every 1 MiB."""
    reader = _raw(resp).readinto
    got, n, pending = 0, len(view), 0
    try:
        with _Reading(deadline, what):
            while got < n:
                # A piece at a time: one readinto blocks until it is full,
                # and the default deadline grows only as pieces arrive.
                k = reader(view[got:got + _PIECE])
                if not k:
                    raise _errors.RemoteConnectionError(
                        f"{what}: the answer ended after {got} of {n} bytes")
                got += k
                deadline.received(k)
                if counter is not None:
                    counter[0] += k
                pending += k
                if progress is not None and (pending >= (1 << 20) or got == n):
                    progress(pending)
                    pending = 0
    finally:
        if progress is not None and pending and got < n:
            progress(pending)


def finish(resp, deadline):
    """Returns the connection to the pool once the body is read whole; a
    body with more left than a few bytes of padding is dropped with its
    connection (a server that sends more than it was asked for is not
    read to its end)."""
    raw = _raw(resp)
    if hasattr(raw, "isclosed") and not raw.isclosed():
        try:
            with deadline.bind():
                raw.read(_DRAIN)
        except Exception:
            pass
        if not raw.isclosed():
            abandon(resp)
            return
    resp.release_conn()


def abandon(resp):
    """Drops a response read only in part: its connection cannot be reused."""
    try:
        resp.close()
    finally:
        resp.release_conn()
