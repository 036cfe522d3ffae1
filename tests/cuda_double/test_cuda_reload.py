"""Reloads on a GPU that holds one copy of the model and not two (the
double's device: 100 MiB, the model 60 MiB). A reload never takes the model
out of service: with a lease held the new generation waits for it (GET says
so) while opens go on succeeding on the old one, and finishes by itself when
the lease ends; six reloads in a row without leases each end ready on the
new generation while a worker opens the model over and over and never sees
a refusal (the client library waits through "reloading"). No CUDA error is
returned (in particular no CUDA_ERROR_OUT_OF_MEMORY: the old memory is
released before the new is allocated), and nothing is left alive."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

from conftest import CudaDaemon, c_holder, read_report, assert_clean, worker_env, PYPATH  # noqa: F401
import tdutil
from tdutil import gen_models

MB = 1 << 20
ENV = {"CUDA_DOUBLE_MEM_MB": "100"}
ARGS = ["--staging-buffers", "3", "--staging-buffer-bytes", "4M", "--watch", "false"]


def write_big(root, seed):
    """big: 60 MiB of F32; returns the bytes' first 64 for checks."""
    data = np.random.default_rng(seed).integers(0, 2**31, 15 * MB, dtype=np.uint32)
    tmp = os.path.join(root, "big.safetensors.tmp")
    gen_models.write_safetensors(tmp, [("w", "F32", (3840, 4096), data.tobytes())], mtime=None)
    os.replace(tmp, os.path.join(root, "big.safetensors"))
    return data.tobytes()[:64]


def start_daemon(workdir):
    root = os.path.join(workdir, "models")
    os.makedirs(root)
    first = write_big(root, 1)
    d = CudaDaemon(root, workdir, ENV, ARGS)
    d.start()
    s = d.preload("big")
    assert s["state"] == "ready", s
    return d, root, first


def reload(d):
    d.proc.send_signal(signal.SIGHUP)


# Opens and closes the model until told to stop (a line on stdin), counting
# refusals; prints {"opens", "refused", "generations"}.
OPENER = r"""
import json, select, sys, tensord
c = tensord.connect(sys.argv[1])
opens, refused, gens = 0, [], set()
while not select.select([sys.stdin], [], [], 0)[0]:
    try:
        m = c.open("big")
        gens.add(m.generation)
        m.close()
        opens += 1
    except Exception as e:
        refused.append(str(e))
print(json.dumps({"opens": opens, "refused": refused[:5], "generations": sorted(gens)}))
"""


def test_reload_waits_for_the_lease_then_finishes(workdir):
    d, root, first = start_daemon(workdir)
    g0 = d.gpu("big")["generation"]
    holder = c_holder(d, "big")
    write_big(root, 2)
    reload(d)
    s = d.wait("big", lambda s: s.get("reload", {}).get("state") == "waiting")
    assert s["state"] == "ready" and s["generation"] == g0, s
    r = s["reload"]
    assert r["reason"] == "waiting for 1 lease" and r["bytes_needed"] == 60 * MB, r
    assert r["bytes_available"] < r["bytes_needed"], r
    # opens still succeed, on the generation that serves
    out = subprocess.run([sys.executable, "-c",
                          "import sys, tensord; print(tensord.connect(sys.argv[1]).open('big')"
                          ".generation)", d.sock], capture_output=True, text=True,
                         env=worker_env(d.work, python=True), timeout=60)
    assert out.returncode == 0 and int(out.stdout) == g0, out
    holder.communicate("\n", timeout=60)
    assert holder.returncode == 0
    s = d.wait("big", lambda s: s["generation"] > g0 and s["state"] == "ready")
    assert "reload" not in s, s
    rep = d.finish()
    assert not rep["errors"], rep["errors"]


def test_six_reloads_in_a_row_without_leases(workdir):
    d, root, _ = start_daemon(workdir)
    opener = subprocess.Popen([sys.executable, "-c", OPENER, d.sock], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=worker_env(d.work, python=True))
    gens = [d.gpu("big")["generation"]]
    for i in range(6):
        write_big(root, 10 + i)
        reload(d)
        s = d.wait("big", lambda s: s["generation"] > gens[-1] and s["state"] == "ready",
                   timeout=120)
        gens.append(s["generation"])
    out, err = opener.communicate("\n", timeout=120)
    assert opener.returncode == 0, err[-3000:]
    res = json.loads(out)
    assert res["refused"] == [] and res["opens"] > 0, res
    assert_clean(read_report(d.work, opener.pid), (), err[-2000:])
    rep = d.finish()
    assert not rep["errors"], rep["errors"]  # no CUDA_ERROR_OUT_OF_MEMORY, nor anything else
