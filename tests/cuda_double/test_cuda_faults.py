"""Faults injected through the double: out of device memory at the Nth
allocation, a copy refused, a copy that fails on the device, a device that
vanishes mid-preload, cuInit failing with each documented error, a driver
too old, an entry point missing. Each ends as a failed preload (or, with no
usable driver, a refusal) whose reason names the call and the error, and
nothing is left alive: ASan, and the double's own count at exit."""
import pytest

from conftest import c_client, py_worker, read_line, end_worker, expected, read_report

# Copies into cm-big: ~92 chunks of 64 KiB through a ring of 3, so the 5th
# copy fails with reads and earlier copies still in flight.
FAULTS = [
    pytest.param({"CUDA_DOUBLE_OOM_AT": "2"}, [], "cm-sharded",
                 ["allocating", "cuMemCreate", "CUDA_ERROR_OUT_OF_MEMORY"], True, id="oom-vmm"),
    pytest.param({"CUDA_DOUBLE_OOM_AT": "2"}, ["--legacy-ipc", "true"], "cm-sharded",
                 ["cuMemAlloc (legacy IPC copy)", "CUDA_ERROR_OUT_OF_MEMORY"], True,
                 id="oom-legacy"),
    pytest.param({"CUDA_DOUBLE_FAIL_COPY_AT": "5"}, [], "cm-big",
                 ["cuMemcpyHtoDAsync", "CUDA_ERROR_INVALID_VALUE"], True, id="copy-refused"),
    pytest.param({"CUDA_DOUBLE_FAIL_COPY_ASYNC_AT": "5"}, [], "cm-big",
                 ["cuEventSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS"], True, id="copy-fails"),
    pytest.param({"CUDA_DOUBLE_VANISH_AT": "5"}, [], "cm-big",
                 ["CUDA_ERROR_DEVICE_UNAVAILABLE"], False, id="device-vanishes"),
]


@pytest.mark.parametrize("link", [None, "4"], ids=["deferred", "link"])
@pytest.mark.parametrize("env,args,model,words,retry_ok", FAULTS)
def test_fault_ends_as_failed_preload(start, env, args, model, words, retry_ok, link):
    d = start(env=dict(env, CUDA_DOUBLE_LINK_GBPS=link) if link else env, args=args)
    s = d.preload(model)
    assert s["state"] == "failed", s
    for w in words:
        assert w in s["reason"], (w, s["reason"])
    # Only the plan is shown: nothing was published.
    assert all("checksum" not in a and "alloc_size" not in a for a in s.get("allocations", []))
    # The failed instance kept no device memory; a retry starts afresh.
    s2 = d.preload(model)
    if retry_ok:
        assert s2["state"] == "ready", s2
        out = c_client(d, model)
        assert out.returncode == 0 and "checksum: ok" in out.stdout, out
    else:
        assert s2["state"] == "failed" and "CUDA_ERROR_DEVICE_UNAVAILABLE" in s2["reason"], s2
    injected = {"CUDA_ERROR_OUT_OF_MEMORY", "CUDA_ERROR_INVALID_VALUE",
                "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_DEVICE_UNAVAILABLE"}
    rep = d.finish(allow_errors=[w for w in words if w in injected] + ["is lost"])
    assert rep["injected"], "the fault was never injected"


# cuInit's documented errors (cuda.h), plus the two a host without a usable
# GPU gives most often.
INIT_ERRORS = ["CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_INVALID_DEVICE",
               "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
               "CUDA_ERROR_NO_DEVICE", "CUDA_ERROR_STUB_LIBRARY"]


@pytest.mark.parametrize("error", INIT_ERRORS)
def test_cuinit_error(start, error):
    d = start(env={"CUDA_DOUBLE_INIT_ERROR": error}, args=["--preload", "cm-small@cuda:0"])
    # The start-up preload ended (readyz said so) as failed, with the reason.
    s = d.gpu("cm-small")
    assert s["state"] == "failed" and "cuInit" in s["reason"] and error in s["reason"], s
    g = d.json("/v1/models")["gpu"]
    assert g["available"] is False and error in g["reason"]
    r = d.post("cm-small")
    assert r.status == 503 and r.json()["error"]["code"] == "gpu_unavailable"
    assert error in r.json()["error"]["message"]
    # Host preloads still work.
    assert d.preload("cm-two", "host")["state"] == "ready"
    rep = d.finish(allow_errors=[error])
    assert rep["inited"] == 0


def test_worker_whose_cuinit_fails_gives_the_lease_back(start):
    d = start()
    assert d.preload("cm-small")["state"] == "ready"
    out = c_client(d, "cm-small", env={"CUDA_DOUBLE_INIT_ERROR": "CUDA_ERROR_NO_DEVICE"})
    assert out.returncode != 0 and "cuInit" in out.stderr and "CUDA_ERROR_NO_DEVICE" in out.stderr
    d.wait("cm-small", lambda s: s["leases"] == 0)
    d.finish()


@pytest.mark.parametrize("env,words", [
    ({"CUDA_DOUBLE_DRIVER_VERSION": "11020"}, ["11.2", "11.3 or newer"]),
    ({"CUDA_DOUBLE_MISSING": "cuMemCreate"}, ["has no cuMemCreate"]),
], ids=["driver-too-old", "missing-entry-point"])
def test_unusable_driver(start, env, words):
    d = start(env=env, args=["--preload", "cm-small@cuda:0"])
    s = d.gpu("cm-small")
    assert s["state"] == "failed", s
    for w in words:
        assert w in s["reason"], s
    d.finish()


def test_worker_without_readonly_access_maps_readwrite(start):
    """Where the driver refuses read-only mappings the client falls back to
    read-write; the bytes are the same."""
    d = start()
    assert d.preload("cm-small")["state"] == "ready"
    w = py_worker(d, "cm-small", env={"CUDA_DOUBLE_NO_READONLY": "1"}, mode="once")
    snaps = end_worker(w, d.work, allow_errors=["read-only access"])
    assert snaps[0]["tensors"] == expected(d.root, "cm-small")
    rep = read_report(d.work, w.pid)
    assert any("read-only access" in e for e in rep["errors"])
    d.finish()


def test_startup_preload_to_a_missing_device_shows_failed(start):
    d = start(args=["--preload", "cm-small@cuda:5"])
    s = d.gpu("cm-small")
    assert s["state"] == "failed" and "no CUDA device cuda:5" in s["reason"], s
    summary = [m for m in d.json("/v1/models")["models"] if m["name"] == "cm-small"][0]["gpu"]
    assert summary == {"state": "failed", "device": "cuda:5"}, summary
    # A preload that starts replaces the record.
    assert d.preload("cm-small", "cuda:0")["state"] == "ready"
    d.finish()
