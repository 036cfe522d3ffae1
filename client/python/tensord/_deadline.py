"""The deadline of one call of the remote API.

`timeout` bounds a whole call (safe_open(), get_tensor(), a slice,
load_file()...): connecting, sending, waiting for the answer, retries and
their Retry-After waits, and reading every byte. A socket's own timeout only
bounds each recv, which a server that trickles one byte at a time never
trips; so every socket the client opens is made a _DeadlineSocket
(_http.py), whose every recv, recv_into and send first sets the socket's
timeout to what is left of the deadline of the call running on that thread
(`Deadline.bind`), and fails once nothing is left. The body bytes a call
keeps are counted (`received`, by the readers in _http.py), since the
default deadline grows with them: never what the client reads and throws
away (interim 100 answers, headers, chunk extensions, trailers), which a
server could send without end to hold the call forever. TLS reads
are bounded the same way: Python's ssl module applies a socket's timeout
as a deadline across the reads of one record.
"""
import contextlib
import threading
import time

from ._errors import DeadlineExceeded

# timeout=None: this much, plus 1 s per DEFAULT_RATE body bytes received. A
# fixed default would fail the load of a big model on a slow link, and one grown
# by the size the server announces would let the server choose it; this one
# ends a call that a server stalls or trickles, and lets any load go on that
# moves DEFAULT_RATE bytes per second.
DEFAULT_TIMEOUT = 60.0
DEFAULT_RATE = 1 << 20

_local = threading.local()


def current():
    """The deadline bound to this thread, or None."""
    return getattr(_local, "deadline", None)


class Deadline:
    """When a call must be over. `timeout`: seconds (a number), None (the
    default: DEFAULT_TIMEOUT, pushed back by `received`) or math.inf (no
    deadline). Shared by the threads of one call."""

    def __init__(self, timeout, what):
        self.what = what
        self.auto = timeout is None
        seconds = DEFAULT_TIMEOUT if timeout is None else float(timeout)
        if not seconds > 0:
            raise ValueError(f"timeout must be a positive number of seconds or None, not "
                             f"{timeout!r}")
        self.seconds = seconds
        self.at = time.monotonic() + seconds if seconds != float("inf") else None
        self.lock = threading.Lock()

    def received(self, nbytes):
        """nbytes of a body arrived for the call: with the default timeout,
        the deadline moves 1 s later per DEFAULT_RATE of them."""
        if self.auto and self.at is not None and nbytes:
            with self.lock:
                self.at += nbytes / DEFAULT_RATE

    def remaining(self):
        """Seconds left (None: no deadline); raises DeadlineExceeded when
        none are."""
        if self.at is None:
            return None
        left = self.at - time.monotonic()
        if left <= 0:
            raise self.exceeded()
        return left

    def expired(self):
        return self.at is not None and time.monotonic() >= self.at

    def exceeded(self, doing=None):
        doing = f" ({doing})" if doing else ""
        limit = f"its deadline of {self.seconds:.3g} s" if not self.auto else \
            f"its default deadline ({DEFAULT_TIMEOUT:g} s, plus 1 s per MiB received)"
        return DeadlineExceeded(f"{self.what}: not done within {limit}{doing}; pass a larger "
                                "timeout= (in seconds, math.inf for none)")

    def sleep(self, seconds):
        """Sleeps, never past the deadline (raises DeadlineExceeded when the
        sleep would end after it)."""
        left = self.remaining()
        if left is not None and seconds >= left:
            raise self.exceeded(f"the daemon asked to retry after {seconds:g} s")
        time.sleep(seconds)

    @contextlib.contextmanager
    def bind(self):
        """Makes this the deadline of every socket operation of this thread
        inside the block."""
        prev = getattr(_local, "deadline", None)
        _local.deadline = self
        try:
            yield self
        finally:
            _local.deadline = prev


def socket_timeout():
    """The timeout to set before one blocking socket operation: what is left
    of the bound deadline (raises DeadlineExceeded when nothing is). False
    when no deadline is bound (the socket keeps its own timeout)."""
    dl = current()
    if dl is None:
        return False
    return dl.remaining()
