"""Partitions on two devices of the double (CUDA_DOUBLE_DEVICES=2) against
independent references, over random models and splits of a fixed seed
(tests/integration/splitprop.py, as test_gpu_split_property.py does on the
host): rank r on cuda:(r % 2), so that a device holds several ranks; every
rank's device memory holds numpy.array_split's part of each tensor a rule
cuts and the whole of every other, and the bytes POST /fetch sends; a split
some tensor cannot take is refused, naming one. Nothing is left alive in the
daemon or the workers."""
import json
import os

import numpy as np

import splitprop
from conftest import CudaDaemon, worker_env

TWO = {"CUDA_DOUBLE_DEVICES": "2"}


def test_every_rank_of_random_splits_on_two_devices(workdir):
    root = os.path.join(workdir, "models")
    rng = np.random.default_rng(20261131)
    models = {f"rm{i}": splitprop.write_model(root, f"rm{i}", rng) for i in range(2)}
    d = CudaDaemon(root, workdir, TWO, ["--staging-buffers", "3", "--staging-buffer-bytes",
                                        "64K", "--watch", "false"])
    d.start()
    checked = refused = 0
    for model, tensors in models.items():
        path = f"/v1/models/{model}/gpu"
        for _ in range(5):
            split = splitprop.random_split(rng)
            ranks, bad = splitprop.expected(tensors, split)
            world = split["world"]
            devices = [f"cuda:{r % 2}" for r in range(world)]
            r = d.request("POST", path, body=json.dumps(
                {"devices": devices, "split": split}).encode())
            if bad:
                err = r.json()["error"]
                assert r.status == 400 and err["code"] == "bad_split", (split, r.body)
                assert any(f'"{n}"' in err["message"] for n in bad), (split, bad, err)
                refused += 1
                continue
            assert r.status == 202, (split, r.body)
            d.wait(model, lambda s: len(s.get("instances", [])) == world and all(
                i["state"] == "ready" for i in s["instances"]))
            env = worker_env(workdir, TWO, python=True)
            got = splitprop.opened(d.sock, [[model, dev, k] for k, dev in enumerate(devices)], env)
            splitprop.check_ranks(d, model, split, ranks, got)
            checked += world
            assert d.request("DELETE", path).status == 200
    assert checked >= 12 and refused >= 1, (checked, refused)
    d.finish()
