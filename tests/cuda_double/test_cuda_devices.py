"""Devices: MIG instances named as nvidia-smi -L names them, a device that
cannot be opened keeping its ordinal's slot, two devices and the client's
context push/pop, read-only mappings that fault on write."""
import subprocess
import sys

from conftest import (c_client, end_worker, expected, py_worker, read_line, read_report,
                      assert_clean, worker_env)


def devices(d):
    return d.json("/v1/models")["gpu"]["devices"]


def test_mig_uuids(start):
    d = start(env={"CUDA_DOUBLE_MIG": "1", "CUDA_DOUBLE_DEVICES": "2"})
    devs = devices(d)
    uuids = [x["uuid"] for x in devs]
    assert all(u.startswith("MIG-") for u in uuids) and len(set(uuids)) == 2, devs
    s = d.preload("cm-small", uuids[1])
    assert s["state"] == "ready" and s["device"] == "cuda:1" and s["device_uuid"] == uuids[1], s
    # The worker finds the instance by the same MIG- UUID.
    w = py_worker(d, "cm-small", mode="once", env={"CUDA_DOUBLE_MIG": "1",
                                                   "CUDA_DOUBLE_DEVICES": "2"})
    snap = end_worker(w, d.work)[0]
    assert snap["uuid"] == uuids[1] and snap["index"] == 1
    assert snap["tensors"] == expected(d.root, "cm-small")
    # A start-up preload may name it too.
    d.finish()
    d2 = start(env={"CUDA_DOUBLE_MIG": "1", "CUDA_DOUBLE_DEVICES": "2"},
               args=["--preload", "cm-two@" + uuids[0]])
    assert d2.gpu("cm-two")["state"] == "ready"
    d2.finish()


def test_a_model_on_the_host_and_seventeen_gpus(start):
    """A host with more than 16 GPUs: a preload to each of them and to the
    host loads (each device its own loader and staging ring), and GET and
    the metrics show every device. Loaders stopped at 17 devices (503
    too_many_devices for the 17th GPU), rings at 16 (the preload there
    failed), GET's staging_bytes listed 16 devices and the metrics 24."""
    env = {"CUDA_DOUBLE_DEVICES": "17"}
    d = start(env=env, args=["--preload", "cm-two@cuda:16"])
    names = ["host"] + [f"cuda:{i}" for i in range(17)]
    for name in names:
        r = d.post("cm-small", name)
        assert r.status == 202, (name, r.status, r.body)
    s = d.wait("cm-small", lambda s: len(s.get("instances", [])) == 18 and all(
        i["state"] in ("ready", "failed") for i in s["instances"]))
    assert {i["device"]: i["state"] for i in s["instances"]} == {n: "ready" for n in names}, s
    assert sorted(d.json("/v1/models")["gpu"]["staging_bytes"]) == sorted(names)
    prom = d.get("/metrics").body.decode()
    for name in names:  # cuda:16 also holds the start-up preload's cm-two
        n = 2 if name == "cuda:16" else 1
        assert f'tensord_gpu_device_instances{{device="{name}"}} {n}\n' in prom, (name, prom)
    out = c_client(d, "cm-small", "--device", "cuda:16", env=env)
    assert out.returncode == 0 and "checksum: ok" in out.stdout, out.stderr
    assert_clean(read_report(d.work, out.pid), (), out.stderr)
    d.finish()


def test_device_that_cannot_be_opened_keeps_its_slot(start):
    d = start(env={"CUDA_DOUBLE_DEVICES": "3", "CUDA_DOUBLE_BAD_DEVICE": "1"})
    devs = devices(d)
    assert [x["index"] for x in devs] == [0, 1, 2], devs
    assert "error" in devs[1] and "CUDA_ERROR_DEVICE_UNAVAILABLE" in devs[1]["error"]
    assert "error" not in devs[0] and "error" not in devs[2]
    r = d.post("cm-small", "cuda:1")
    assert r.status == 503 and "cannot be used" in r.json()["error"]["message"], r.body
    s = d.preload("cm-small", "cuda:2")
    assert s["state"] == "ready" and s["device_index"] == 2 and s["device_uuid"] == devs[2]["uuid"]
    w = py_worker(d, "cm-small", mode="once",
                  env={"CUDA_DOUBLE_DEVICES": "3", "CUDA_DOUBLE_BAD_DEVICE": "1"})
    snap = end_worker(w, d.work, allow_errors=["CUDA_DOUBLE_BAD_DEVICE", "DEVICE_UNAVAILABLE"])
    assert snap[0]["index"] == 2 and snap[0]["tensors"] == expected(d.root, "cm-small")
    d.finish(allow_errors=["DEVICE_UNAVAILABLE"])


# A worker with its own current context (device 1's, as PyTorch would have
# after torch.cuda.set_device(1)) opens models on both devices: after every
# call of the library its current context is still device 1's.
CTX_WORKER = r"""
import ctypes, json, sys
import tensord
sock, model, _mode, model2 = sys.argv[1:5]
cu = ctypes.CDLL("libcuda.so.1")
def fn(name, *argtypes):
    p = ctypes.c_void_p()
    assert cu.cuGetProcAddress_v2(name.encode(), ctypes.byref(p), 12000, 0, None) == 0 and p.value
    return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(p.value)
vp = ctypes.c_void_p
init = fn("cuInit", ctypes.c_uint)
retain = fn("cuDevicePrimaryCtxRetain", ctypes.POINTER(vp), ctypes.c_int)
release = fn("cuDevicePrimaryCtxRelease", ctypes.c_int)
setcur = fn("cuCtxSetCurrent", vp)
getcur = fn("cuCtxGetCurrent", ctypes.POINTER(vp))
assert init(0) == 0
mine = vp()
assert retain(ctypes.byref(mine), 1) == 0 and setcur(mine) == 0
def current():
    c = vp()
    assert getcur(ctypes.byref(c)) == 0
    return c.value
seen = []
c = tensord.connect(sock)
m = c.open(model); seen.append(current())
m2 = c.open(model2); seen.append(current())
ok = m.verify() and m2.verify(); seen.append(current())
b = m.read(next(iter(m))); seen.append(current())
m.close(); m2.close(); seen.append(current())
c.close()
print(json.dumps({"same": all(s == mine.value for s in seen), "devices": [m.device, m2.device]}))
assert setcur(None) == 0 and release(1) == 0
"""


def test_two_devices_and_the_callers_context(start):
    env = {"CUDA_DOUBLE_DEVICES": "2"}
    d = start(env=env)
    assert d.preload("cm-small", "cuda:0")["state"] == "ready"
    assert d.preload("cm-two", "cuda:1")["state"] == "ready"
    w = py_worker(d, "cm-small", mode="x", env=env, script=CTX_WORKER, args=["cm-two"])
    out = end_worker(w, d.work)[0]
    assert out == {"same": True, "devices": ["cuda:0", "cuda:1"]}, out
    d.finish()


WRITER = r"""
import ctypes, sys
import tensord
sock, model, _mode = sys.argv[1:4]
m = tensord.connect(sock).open(model)
i = m.info(next(iter(m)))
print("mapped", flush=True)
ctypes.memset(i["device_ptr"], 0, 1)
print("wrote", flush=True)
"""


def test_readonly_mapping_faults_on_write(start):
    d = start()
    assert d.preload("cm-small")["state"] == "ready"
    w = py_worker(d, "cm-small", mode="x", script=WRITER)
    out, err = w.communicate(timeout=60)
    assert "mapped" in out and "wrote" not in out, (out, err[-2000:])
    assert w.returncode != 0 and "SEGV" in err, err[-2000:]
    d.wait("cm-small", lambda s: s["leases"] == 0)
    # A C client afterwards still reads the files' bytes: nothing was changed.
    res = c_client(d, "cm-small")
    assert res.returncode == 0 and "checksum: ok" in res.stdout
    d.finish()
