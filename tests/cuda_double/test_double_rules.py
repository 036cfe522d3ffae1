"""The double itself: each rule it enforces is really enforced, so the tests
above could fail. A script calls the double directly (through
cuGetProcAddress, as tensord does) and breaks one rule at a time; the
refusals must be the documented errors, and misuse the real driver does
not report must show up as violations in the exit report."""
import json
import subprocess
import sys

from conftest import read_report, worker_env

SCRIPT = r"""
import ctypes, json, os
cu = ctypes.CDLL("libcuda.so.1")
vp, u64, sz = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
def fn(name, *argtypes, version=12000):
    p = ctypes.c_void_p()
    assert cu.cuGetProcAddress_v2(name.encode(), ctypes.byref(p), version, 0, None) == 0 and p.value, name
    return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(p.value)
class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]
class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("handleTypes", ctypes.c_int), ("loc", Loc),
                ("win32", vp), ("comp", ctypes.c_ubyte), ("rdma", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]
class Acc(ctypes.Structure):
    _fields_ = [("loc", Loc), ("flags", ctypes.c_int)]
R = {}
init = fn("cuInit", ctypes.c_uint)
hostalloc = fn("cuMemHostAlloc", ctypes.POINTER(vp), sz, ctypes.c_uint)
R["before_init"] = hostalloc(ctypes.byref(vp()), 4096, 0)
assert init(0) == 0
retain = fn("cuDevicePrimaryCtxRetain", ctypes.POINTER(vp), ctypes.c_int)
release = fn("cuDevicePrimaryCtxRelease", ctypes.c_int)
setcur = fn("cuCtxSetCurrent", vp)
pop = fn("cuCtxPopCurrent", ctypes.POINTER(vp))
gran = fn("cuMemGetAllocationGranularity", ctypes.POINTER(sz), ctypes.POINTER(Prop), ctypes.c_int)
create = fn("cuMemCreate", ctypes.POINTER(u64), sz, ctypes.POINTER(Prop), ctypes.c_ulonglong)
mrelease = fn("cuMemRelease", u64)
reserve = fn("cuMemAddressReserve", ctypes.POINTER(u64), sz, sz, u64, ctypes.c_ulonglong)
afree = fn("cuMemAddressFree", u64, sz)
mmap_ = fn("cuMemMap", u64, sz, sz, u64, ctypes.c_ulonglong)
unmap = fn("cuMemUnmap", u64, sz)
access = fn("cuMemSetAccess", u64, sz, ctypes.POINTER(Acc), sz)
export = fn("cuMemExportToShareableHandle", vp, u64, ctypes.c_int, ctypes.c_ulonglong)
freehost = fn("cuMemFreeHost", vp)
stream_create = fn("cuStreamCreate", ctypes.POINTER(vp), ctypes.c_uint)
stream_destroy = fn("cuStreamDestroy", vp)
event_create = fn("cuEventCreate", ctypes.POINTER(vp), ctypes.c_uint)
event_record = fn("cuEventRecord", vp, vp)
event_sync = fn("cuEventSynchronize", vp)
event_destroy = fn("cuEventDestroy", vp)
htod = fn("cuMemcpyHtoDAsync", u64, vp, sz, vp)
dtoh = fn("cuMemcpyDtoH", vp, u64, sz)
malloc = fn("cuMemAlloc", ctypes.POINTER(u64), sz)
ipcget = fn("cuIpcGetMemHandle", ctypes.c_char * 64, u64)
R["proc_newer_than_driver"] = cu.cuGetProcAddress_v2(b"cuInit", ctypes.byref(vp()), 99000, 0, None)
prop = Prop(type=1, handleTypes=1, loc=Loc(type=1, id=0))
g = sz()
assert gran(ctypes.byref(g), ctypes.byref(prop), 0) == 0
G = g.value
h = u64()
# No current context on this thread yet.
R["no_context"] = hostalloc(ctypes.byref(vp()), 4096, 0)
R["pop_empty"] = pop(ctypes.byref(vp()))
R["release_not_retained"] = release(0)
ctx = vp()
assert retain(ctypes.byref(ctx), 0) == 0 and setcur(ctx) == 0
R["create_unaligned"] = create(ctypes.byref(h), G + 4096, ctypes.byref(prop), 0)
assert create(ctypes.byref(h), G, ctypes.byref(prop), 0) == 0
va = u64()
assert reserve(ctypes.byref(va), 2 * G, G, 0, 0) == 0
R["map_offset"] = mmap_(va.value, G, G, h.value, 0)
R["map_outside"] = mmap_(va.value + 2 * G, G, 0, h.value, 0)
assert mmap_(va.value, G, 0, h.value, 0) == 0
R["map_twice"] = mmap_(va.value, G, 0, h.value, 0)
host = vp()
assert hostalloc(ctypes.byref(host), 1 << 16, 0) == 0
s = vp()
assert stream_create(ctypes.byref(s), 1) == 0
R["copy_before_access"] = htod(va.value, host, 4096, s)
ro = Acc(loc=Loc(type=1, id=0), flags=1)
assert access(va.value, G, ctypes.byref(ro), 1) == 0
R["copy_into_readonly"] = htod(va.value, host, 4096, s)
rw = Acc(loc=Loc(type=1, id=0), flags=3)
R["access_partial"] = access(va.value, 2 * G, ctypes.byref(rw), 1)
assert access(va.value, G, ctypes.byref(rw), 1) == 0
R["unmap_partial"] = unmap(va.value, G // 2)
# An asynchronous copy from pinned memory runs when waited for: the bytes
# at the time of the wait land.
ctypes.memset(host, 0x11, 4096)
e = vp()
assert event_create(ctypes.byref(e), 2) == 0
never = vp()
assert event_create(ctypes.byref(never), 2) == 0
assert htod(va.value, host, 4096, s) == 0
ctypes.memset(host, 0x22, 4096)
assert event_record(e, s) == 0 and event_sync(e) == 0
back = ctypes.create_string_buffer(4096)
assert dtoh(back, va.value, 4096) == 0
R["async_bytes"] = back.raw[0]
R["sync_never_recorded"] = event_sync(never)       # success, and a violation
fd = ctypes.c_int(-1)
assert export(ctypes.byref(fd), h.value, 1, 0) == 0
R["exported_fd_is_memfd"] = os.readlink(f"/proc/self/fd/{fd.value}").startswith("/memfd:cuda-double")
os.close(fd.value)
d = u64()
assert malloc(ctypes.byref(d), 1000) == 0
R["ipc_of_vmm"] = ipcget((ctypes.c_char * 64)(), va.value)
# A copy left queued, then its source freed: a violation.
assert htod(va.value, host, 4096, s) == 0
assert freehost(host) == 0
assert stream_destroy(s) == 0
assert mrelease(h.value) == 0
R["use_after_release"] = mmap_(va.value + G, G, 0, h.value, 0)
assert unmap(va.value, G) == 0 and afree(va.value, 2 * G) == 0
assert event_destroy(e) == 0 and event_destroy(never) == 0
# Leaked on purpose: the cuMemAlloc memory, and the context's last release
# takes it along (a violation too).
assert setcur(None) == 0 and release(0) == 0
print(json.dumps(R))
"""


def test_the_double_enforces_the_rules(workdir):
    p = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         env=worker_env(workdir, python=True))
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err[-4000:]
    r = json.loads(out)
    INVALID_VALUE, NOT_INITIALIZED, INVALID_CONTEXT, INVALID_HANDLE = 1, 3, 201, 400
    assert r == {
        "before_init": NOT_INITIALIZED,
        "proc_newer_than_driver": INVALID_VALUE,
        "no_context": INVALID_CONTEXT,
        "pop_empty": INVALID_CONTEXT,
        "release_not_retained": INVALID_CONTEXT,
        "create_unaligned": INVALID_VALUE,
        "map_offset": INVALID_VALUE,
        "map_outside": INVALID_VALUE,
        "map_twice": INVALID_VALUE,
        "copy_before_access": INVALID_VALUE,
        "copy_into_readonly": INVALID_VALUE,
        "access_partial": INVALID_VALUE,
        "unmap_partial": INVALID_VALUE,
        "async_bytes": 0x22,
        "sync_never_recorded": 0,
        "exported_fd_is_memfd": True,
        "ipc_of_vmm": INVALID_VALUE,
        "use_after_release": INVALID_VALUE,
    }, r
    del INVALID_HANDLE
    rep = read_report(workdir, p.pid)
    v = "\n".join(rep["violations"])
    assert "never recorded" in v
    assert "freed while a queued copy still reads it" in v
    assert "used after cuMemRelease" in v
    assert "destroys 1 live" in v
    assert "cuMemAlloc" not in json.dumps(rep["live"]) and rep["contexts_retained"] == 0
