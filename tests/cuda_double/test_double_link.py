"""The double's link model (CUDA_DOUBLE_LINK_GBPS) and its device memory
pool, driven directly through the driver API from Python (as
test_double_rules.py does) and through the daemon.

Timing is asserted one way only: a copy of N bytes never completes sooner
than N/R after it was queued (the model guarantees that on any machine).
Where a check needs the test itself to act before a copy is due (ask
cuEventQuery, refill or free a buffer), the copies are made to take a few
hundred milliseconds and the check says what it saw if the test was late."""
import json
import os
import subprocess
import sys

import pytest

from conftest import assert_clean, ask, c_client, expected, read_report, worker_env

NOT_READY, ILLEGAL_ADDRESS, DEVICE_UNAVAILABLE = 600, 700, 46

# The driver as tensord calls it (cuGetProcAddress), with helpers: one
# context current, device memory of `size` bytes mapped read-write, pinned
# buffers, streams, events.
DRIVER = r"""
import ctypes, hashlib, json, os, sys, threading, time
cu = ctypes.CDLL("libcuda.so.1")
vp, u64, sz = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
def fn(name, *argtypes):
    p = ctypes.c_void_p()
    assert cu.cuGetProcAddress_v2(name.encode(), ctypes.byref(p), 12000, 0, None) == 0 and p.value, name
    return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(p.value)
class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]
class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("handleTypes", ctypes.c_int), ("loc", Loc),
                ("win32", vp), ("comp", ctypes.c_ubyte), ("rdma", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]
class Acc(ctypes.Structure):
    _fields_ = [("loc", Loc), ("flags", ctypes.c_int)]
init = fn("cuInit", ctypes.c_uint)
retain = fn("cuDevicePrimaryCtxRetain", ctypes.POINTER(vp), ctypes.c_int)
release = fn("cuDevicePrimaryCtxRelease", ctypes.c_int)
setcur = fn("cuCtxSetCurrent", vp)
gran = fn("cuMemGetAllocationGranularity", ctypes.POINTER(sz), ctypes.POINTER(Prop), ctypes.c_int)
create = fn("cuMemCreate", ctypes.POINTER(u64), sz, ctypes.POINTER(Prop), ctypes.c_ulonglong)
mrelease = fn("cuMemRelease", u64)
reserve = fn("cuMemAddressReserve", ctypes.POINTER(u64), sz, sz, u64, ctypes.c_ulonglong)
afree = fn("cuMemAddressFree", u64, sz)
mmap_ = fn("cuMemMap", u64, sz, sz, u64, ctypes.c_ulonglong)
unmap = fn("cuMemUnmap", u64, sz)
access = fn("cuMemSetAccess", u64, sz, ctypes.POINTER(Acc), sz)
export = fn("cuMemExportToShareableHandle", vp, u64, ctypes.c_int, ctypes.c_ulonglong)
mimport = fn("cuMemImportFromShareableHandle", ctypes.POINTER(u64), vp, ctypes.c_int)
hostalloc = fn("cuMemHostAlloc", ctypes.POINTER(vp), sz, ctypes.c_uint)
freehost = fn("cuMemFreeHost", vp)
stream_create = fn("cuStreamCreate", ctypes.POINTER(vp), ctypes.c_uint)
stream_destroy = fn("cuStreamDestroy", vp)
stream_sync = fn("cuStreamSynchronize", vp)
event_create = fn("cuEventCreate", ctypes.POINTER(vp), ctypes.c_uint)
event_record = fn("cuEventRecord", vp, vp)
event_sync = fn("cuEventSynchronize", vp)
event_query = fn("cuEventQuery", vp)
event_destroy = fn("cuEventDestroy", vp)
htod = fn("cuMemcpyHtoDAsync", u64, vp, sz, vp)
htod_sync = fn("cuMemcpyHtoD", u64, vp, sz)
dtoh = fn("cuMemcpyDtoH", vp, u64, sz)
meminfo = fn("cuMemGetInfo", ctypes.POINTER(sz), ctypes.POINTER(sz))
def ck(r, what="call"):
    assert r == 0, (what, r)
ck(init(0))
ctx = vp()
ck(retain(ctypes.byref(ctx), 0)); ck(setcur(ctx))
prop = Prop(type=1, handleTypes=1, loc=Loc(type=1, id=0))
g = sz(); ck(gran(ctypes.byref(g), ctypes.byref(prop), 0)); G = g.value
def device_alloc(size, flags=3):
    h, va = u64(), u64()
    ck(create(ctypes.byref(h), size, ctypes.byref(prop), 0), "cuMemCreate")
    ck(reserve(ctypes.byref(va), size, G, 0, 0)); ck(mmap_(va.value, size, 0, h.value, 0))
    ck(access(va.value, size, ctypes.byref(Acc(loc=Loc(type=1, id=0), flags=flags)), 1))
    return h.value, va.value
def device_free(h, va, size):
    ck(unmap(va, size)); ck(afree(va, size)); ck(mrelease(h))
def exported(h):
    fd = ctypes.c_int(-1); ck(export(ctypes.byref(fd), h, 1, 0)); return fd.value
def pinned(size):
    p = vp(); ck(hostalloc(ctypes.byref(p), size, 0)); return p.value
def stream():
    s = vp(); ck(stream_create(ctypes.byref(s), 1)); return s.value
def event():
    e = vp(); ck(event_create(ctypes.byref(e), 2)); return e.value
def read(va, n):
    b = ctypes.create_string_buffer(n); ck(dtoh(b, va, n), "cuMemcpyDtoH"); return b.raw
def sha(b):
    return hashlib.sha256(b).hexdigest()
def done():
    ck(setcur(None)); ck(release(0))
def waiting_in_sync(n):  # until n threads sleep in a wait for a copy (the double counts them)
    deadline = time.monotonic() + 10
    while cu.cuda_double_link_waiting() < n:
        assert time.monotonic() < deadline, "no thread waits for the copy"
        time.sleep(0.001)
R = float(os.environ.get("CUDA_DOUBLE_LINK_GBPS") or 0) * 1e9  # bytes per second
OUT = {}
"""


def run(workdir, body, env, timeout=60):
    """Runs DRIVER + body in a Python process on the double; returns its OUT
    (printed as JSON) and the double's report."""
    script = DRIVER + body + "\nprint(json.dumps(OUT))\n"
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=worker_env(workdir, env, python=True))
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err[-4000:]
    return json.loads(out.splitlines()[-1]), read_report(workdir, p.pid), err


ASYNC = r"""
N = 16 << 20
h, va = device_alloc(2 * N)
a, b, c = pinned(N), pinned(N), pinned(N)
A0, A1, B, C = (os.urandom(N) for _ in range(4))
ctypes.memmove(a, A0, N); ctypes.memmove(b, B, N); ctypes.memmove(c, C, N)
s1, s2 = stream(), stream()
e1, e2, e3 = event(), event(), event()
t0 = time.monotonic()
ck(htod(va, a, N, s1)); ck(event_record(e1, s1))
ck(htod(va + N, b, N, s2)); ck(event_record(e2, s2))
OUT["query"] = event_query(e1)
OUT["query_at"] = time.monotonic() - t0
ctypes.memmove(a, A1, N)  # refilled before its copy was waited for
OUT["refilled_at"] = time.monotonic() - t0
ck(event_sync(e2)); OUT["second_done_at"] = time.monotonic() - t0
ck(event_sync(e1)); OUT["first_done_at"] = time.monotonic() - t0
OUT["query_after"] = event_query(e1)
back = read(va, 2 * N)
OUT["first"] = {sha(A0): "A0", sha(A1): "A1"}.get(sha(back[:N]), "other")
OUT["second_exact"] = back[N:] == B
# One stream's copies land in the order they were queued.
ck(htod(va, b, N, s1)); ck(htod(va, c, N, s1)); ck(event_record(e3, s1)); ck(event_sync(e3))
OUT["ordered"] = read(va, N) == C
for e in (e1, e2, e3): ck(event_destroy(e))
for s in (s1, s2): ck(stream_destroy(s))
for p in (a, b, c): ck(freehost(p))
device_free(h, va, 2 * N)
done()
"""


def test_link_copies_run_on_the_engine_at_the_modelled_rate(workdir):
    """16 MiB on each of two streams at 0.1 GB/s: cuEventQuery says
    NOT_READY until a copy's transfer ends; the second stream's copy shares
    the link, so it cannot end sooner than both transfers (32 MiB / R); the
    bytes land when the transfer ends, so a buffer refilled before the wait
    lands as the refill; one stream's copies keep their order."""
    rate = 0.2
    out, rep, err = run(workdir, ASYNC, {"CUDA_DOUBLE_LINK_GBPS": str(rate)})
    one = (16 << 20) / (rate * 1e9)
    assert out["query_at"] < one, f"the test queried {out['query_at']:.3f}s after queueing"
    assert out["query"] == NOT_READY, out
    assert out["query_after"] == 0
    assert out["first_done_at"] >= one, out
    assert out["second_done_at"] >= 2 * one, out  # one link for both streams
    assert out["second_exact"] and out["ordered"], out
    assert out["refilled_at"] < one, f"the test refilled {out['refilled_at']:.3f}s after queueing"
    assert out["first"] == "A1", out
    assert_clean(rep, (), err[-2000:])
    link = rep["link"]
    assert link["gbps"] == rate and link["copies"] == 4 and link["bytes"] == 4 * (16 << 20), link
    assert link["engine_cpu_seconds"] > 0


UNLOCKED = r"""
N = 16 << 20
h, va = device_alloc(N)
small_h, small_va = device_alloc(G)
a = pinned(N)
s = stream(); e = event()
t0 = time.monotonic()
ck(htod(va, a, N, s)); ck(event_record(e, s))
got = {}
def wait():
    got["r"] = event_sync(e)
    got["at"] = time.monotonic() - t0
w = threading.Thread(target=wait); w.start()
waiting_in_sync(1)
free, total = sz(), sz()
ck(meminfo(ctypes.byref(free), ctypes.byref(total)))
s2 = stream(); ck(stream_destroy(s2))
read(small_va, G)  # a synchronous copy; the non-blocking stream is not waited for
OUT["others_done_at"] = time.monotonic() - t0
OUT["waiter_still_waiting"] = w.is_alive()
w.join()
OUT["waiter"] = got
if os.environ.get("CUDA_DOUBLE_VANISH_AT"):
    s3 = stream(); e3 = event()
    ck(htod(va, a, N, s3)); ck(event_record(e3, s3))   # copy 2: queued, due in N/R
    t1 = time.monotonic()
    def wait3():
        got["vanish_r"] = event_sync(e3)
        got["vanish_at"] = time.monotonic() - t1
    w = threading.Thread(target=wait3); w.start()
    waiting_in_sync(1)
    OUT["lost"] = htod(va, a, 4096, s3)                # copy 3: the device is lost
    w.join()
    OUT["vanish"] = got
    event_destroy(e3); stream_destroy(s3)
# Released even on a lost device (each says it is lost).
event_destroy(e); stream_destroy(s); freehost(a)
for hh, vv, n in ((h, va, N), (small_h, small_va, G)):
    unmap(vv, n); afree(vv, n); mrelease(hh)
done()
"""


def test_waiting_holds_no_lock_and_a_lost_device_wakes_waiters(workdir):
    """While one thread waits in cuEventSynchronize for a copy due in about
    a third of a second, another thread's calls (cuMemGetInfo, a stream made
    and destroyed, a synchronous copy) return at once; when the device is
    lost, a thread waiting for a queued copy returns the loss at once."""
    rate = 0.05
    out, rep, err = run(workdir, UNLOCKED, {"CUDA_DOUBLE_LINK_GBPS": str(rate),
                                           "CUDA_DOUBLE_VANISH_AT": "3"})
    due = (16 << 20) / (rate * 1e9)
    assert out["waiter"]["r"] == 0 and out["waiter"]["at"] >= due, out
    assert out["others_done_at"] < due and out["waiter_still_waiting"], out
    assert out["lost"] == DEVICE_UNAVAILABLE
    assert out["vanish"]["vanish_r"] == DEVICE_UNAVAILABLE, out
    assert out["vanish"]["vanish_at"] < due, out  # woken by the loss, not the copy's end
    assert rep["injected"] and rep["violations"] == [], rep


FAULTS = r"""
N = 4 << 20
h, va = device_alloc(N)
s1, s2 = stream(), stream()
e1, e2, e3, e4 = event(), event(), event(), event()
a = pinned(N)
# FAIL_COPY_ASYNC_AT=2: the second copy fails on the device.
ck(htod(va, a, 4096, s1)); ck(event_record(e1, s1))
ck(htod(va, a, 4096, s1)); ck(event_record(e2, s1))
ck(htod(va, a, 4096, s2)); ck(event_record(e3, s2))  # due after the failing one
ck(event_sync(e3))
OUT["before_failure"] = event_sync(e1)   # position 1: not the failed copy's error
OUT["failure"] = event_sync(e2)
OUT["reported_once"] = event_sync(e2)
# The source freed before its copy ran, then the destination unmapped.
t0 = time.monotonic()
ck(htod(va, a, N, s1)); ck(event_record(e4, s1))
ck(freehost(a))
OUT["freed_at"] = time.monotonic() - t0
OUT["freed_source"] = event_sync(e4)
b = pinned(N)
t0 = time.monotonic()
ck(htod(va, b, N, s2))
ck(unmap(va, N))
OUT["unmapped_at"] = time.monotonic() - t0
OUT["unmapped_destination"] = stream_sync(s2)
ck(afree(va, N)); ck(mrelease(h)); ck(freehost(b))
for e in (e1, e2, e3, e4): ck(event_destroy(e))
for s in (s1, s2): ck(stream_destroy(s))
done()
"""


def test_link_faults_and_violations(workdir):
    """With a link: an injected device-side failure is reported by the wait
    for its own position only, once; freeing a copy's source or unmapping
    its destination before it ran is a violation twice (at the free, and
    when the engine reaches the copy), and the wait reports
    CUDA_ERROR_ILLEGAL_ADDRESS. The engine never touches freed memory (the
    double runs under ASan)."""
    rate = 0.02
    out, rep, err = run(workdir, FAULTS, {"CUDA_DOUBLE_LINK_GBPS": str(rate),
                                         "CUDA_DOUBLE_FAIL_COPY_ASYNC_AT": "2"})
    due = (4 << 20) / (rate * 1e9)
    assert (out["before_failure"], out["failure"], out["reported_once"]) == (0, ILLEGAL_ADDRESS, 0)
    assert out["freed_at"] < due and out["unmapped_at"] < due, out
    assert out["freed_source"] == ILLEGAL_ADDRESS and out["unmapped_destination"] == ILLEGAL_ADDRESS
    v = "\n".join(rep["violations"])
    assert "freed while a queued copy still reads it" in v
    assert "the source" in v and "was freed before the queued copy ran" in v
    assert "unmapped while a queued copy still writes it" in v
    assert "the destination" in v and "unmapped or freed before the queued copy ran" in v
    assert len(rep["violations"]) == 4, rep["violations"]
    assert rep["injected"] and all(x == 0 for x in rep["live"].values()), rep


# A process holding an exported allocation the way a worker can: imported
# through the double, only its descriptor, or only a mapping of it (the
# descriptor closed). Prints the bytes' hash, then again after a line on
# stdin, then lets go.
HOLDER = r"""
import ctypes, hashlib, os, sys
fd, size, how = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
if how == "import":
    exec(open(sys.argv[4]).read())
    hh = u64(); ck(mimport(ctypes.byref(hh), fd, 1)); os.close(fd)
    va = u64(); ck(reserve(ctypes.byref(va), size, G, 0, 0)); ck(mmap_(va.value, size, 0, hh.value, 0))
    ck(access(va.value, size, ctypes.byref(Acc(loc=Loc(type=1, id=0), flags=1)), 1))
    look = lambda: ctypes.string_at(va.value, size)
elif how == "fd":
    look = lambda: os.pread(fd, size, 0)
else:
    p = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
    os.close(fd)
    look = lambda: ctypes.string_at(p, size)
print(hashlib.sha256(look()).hexdigest(), flush=True)
sys.stdin.readline()
print(hashlib.sha256(look()).hexdigest(), flush=True)
if how == "import":
    ck(unmap(va.value, size)); ck(afree(va.value, size)); ck(mrelease(hh.value)); done()
"""

POOL = r"""
size = 2 * G
how, holder, driver = sys.argv[1:4]
first = os.urandom(size)
x_h, x_va = device_alloc(size)
ck(htod_sync(x_va, first, size))
fd = exported(x_h)
x_ino = os.fstat(fd).st_ino
env = dict(os.environ)
if how != "import":
    env.pop("LD_PRELOAD", None)  # a plain process, no driver at all
p = subprocess.Popen([sys.executable, "-c", open(holder).read(), str(fd), str(size), how, driver],
                     pass_fds=(fd,), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
OUT["held"] = p.stdout.readline().strip() == sha(first)
os.close(fd)
device_free(x_h, x_va, size)                  # released here; the other process still has it
y_h, y_va = device_alloc(size)
y_fd = exported(y_h)
OUT["reused_while_held"] = os.fstat(y_fd).st_ino == x_ino
os.close(y_fd)
ck(htod_sync(y_va, os.urandom(size), size))   # whatever memory y is, new bytes in it
p.stdin.write("\n"); p.stdin.flush()
OUT["holder_kept_its_bytes"] = p.stdout.readline().strip() == sha(first)
OUT["holder_exit"] = p.wait()
z_h, z_va = device_alloc(size)                # nobody holds x now (and y is in use)
z_fd = exported(z_h)
OUT["reused_after"] = os.fstat(z_fd).st_ino == x_ino
OUT["holder_pid"] = p.pid
os.close(z_fd)
device_free(y_h, y_va, size)
device_free(z_h, z_va, size)
done()
"""


@pytest.mark.parametrize("how", ["import", "fd", "map"])
def test_pool_never_reuses_memory_another_process_holds(workdir, how, tmp_path):
    """Memory released while another process holds it (imported through the
    double, as a bare descriptor, or as a mapping whose descriptor was
    closed) is not handed out again: the next allocation is fresh memory,
    and the holder still reads its bytes. Once the holder lets go, the next
    allocation of that size reuses it."""
    holder, driver = tmp_path / "holder.py", tmp_path / "driver.py"
    holder.write_text(HOLDER)
    driver.write_text(DRIVER)
    body = "import subprocess\nsys.argv[1:] = " + repr([how, str(holder), str(driver)]) + POOL
    out, rep, err = run(workdir, body, {"CUDA_DOUBLE_LINK_GBPS": "2"})
    assert out["held"] and out["holder_exit"] == 0, out
    assert out["reused_while_held"] is False and out["holder_kept_its_bytes"] is True, out
    assert out["reused_after"] is True, out
    assert_clean(rep, (), err[-2000:])
    assert rep["pool"]["reused"] == 1 and rep["pool"]["held_elsewhere"] >= 1, rep["pool"]
    if how == "import":
        assert_clean(read_report(workdir, out["holder_pid"]))


def test_daemon_reuses_pooled_memory_only_when_no_worker_maps_it(start):
    """Through the daemon, with a link: a worker maps a model's memory and
    ends its lease (so the daemon releases it on evict) but keeps the
    mapping; a preload of another model of the same size gets fresh memory
    and the worker still reads the first model's bytes. Once it unmaps, the
    next preload reuses released memory. Every preload's bytes are exact."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    d = start(env={"CUDA_DOUBLE_LINK_GBPS": "1"})

    def ready(model):
        s = d.preload(model)
        assert s["state"] == "ready", s
        out = c_client(d, model)
        assert out.returncode == 0 and "checksum: ok" in out.stdout, out

    def inode(model):
        ans, fds, conn = ask(d.sock, {"op": "open", "model": model})
        try:
            assert ans["ok"] and len(fds) == 1, ans
            return os.fstat(fds[0]).st_ino
        finally:
            for fd in fds:
                os.close(fd)
            conn.close()

    ready("cm-two")
    ans, fds, conn = ask(d.sock, {"op": "open", "model": "cm-two"})
    assert ans["ok"] and len(fds) == 1, ans
    size = ans["allocations"][0]["alloc_size"]
    two_ino = os.fstat(fds[0]).st_ino
    p = libc.mmap(None, size, 1, 1, fds[0], 0)  # PROT_READ, MAP_SHARED
    assert p not in (None, ctypes.c_void_p(-1).value)
    os.close(fds[0])
    conn.close()  # the lease ends; only the mapping holds the memory
    d.wait("cm-two", lambda s: s["leases"] == 0)
    two = ctypes.string_at(p, size)
    w = expected(d.root, "cm-two")
    assert d.evict("cm-two").status in (200, 202)
    d.wait("cm-two", lambda s: s["state"] == "none")
    ready("cm-other")  # same sizes, other bytes
    assert inode("cm-other") != two_ino
    assert ctypes.string_at(p, size) == two
    assert expected(d.root, "cm-other") != w
    libc.munmap(p, size)
    ready("cm-reload")
    assert inode("cm-reload") == two_ino  # free again, now that nobody maps it
    rep = d.finish()
    pool = rep["pool"]
    assert pool["fresh"] == 2 and pool["reused"] == 1 and pool["held_elsewhere"] >= 1, pool
    assert rep["link"]["copies"] > 0
