"""Partitions on the host backend against independent references, over random
models and random splits (a fixed seed; splitprop.py makes both): every rank
of every split a model can take, each on its own instance of the one host
device, holds exactly numpy.array_split's part of each tensor a rule cuts
and the whole of every other, its part as the open answer describes it, and
the bytes POST /fetch sends for that rank; a split some tensor cannot take
is refused, naming one. A 64 KiB staging ring makes the big tensor cross
chunks at rows that are not chunk-aligned."""
import json
import os

import numpy as np
import pytest

import splitprop
import tdutil
from gpuhost import wait_state, worker_env

SPLITS_PER_MODEL = 6


@pytest.fixture(scope="module")
def pd(tmp_path_factory):
    base = tmp_path_factory.mktemp("split-property")
    os.chmod(base, 0o755)
    root = os.path.join(base, "models")
    rng = np.random.default_rng(20261129)
    models = {f"rm{i}": splitprop.write_model(root, f"rm{i}", rng) for i in range(4)}
    d = tdutil.Daemon(root, str(base), ["--staging-buffers", "3", "--staging-buffer-bytes", "64K",
                                        "--watch", "false"])
    d.start()
    d.sock = os.path.join(base, "tensord.sock")
    d.models, d.rng = models, rng
    yield d
    d.stop_checked()


def test_every_rank_of_random_splits(pd):
    d, checked, refused = pd, 0, 0
    # big's columns cut in three: strided runs of 84 and 80 bytes every 244,
    # which the 64 KiB chunks cut in the middle of a run
    strided = {"world": 3, "rules": [{"match": "big", "dim": -1}]}
    for model, tensors in d.models.items():
        path = f"/v1/models/{model}/gpu"
        for k in range(SPLITS_PER_MODEL + 1):
            split = strided if k == 0 else splitprop.random_split(d.rng)
            ranks, bad = splitprop.expected(tensors, split)
            world = split["world"]
            r = d.request("POST", path, body=json.dumps(
                {"devices": ["host"] * world, "split": split}).encode())
            if bad:
                assert r.status == 400, (split, bad, r.body)
                err = r.json()["error"]
                assert err["code"] == "bad_split", (split, err)
                assert any(f'"{n}"' in err["message"] for n in bad), (split, bad, err)
                # nothing of it stays (a rank it started drains while its load stops)
                wait_state(d, model, lambda s: s["state"] == "none")
                refused += 1
                continue
            assert r.status == 202, (split, r.body)
            wait_state(d, model, lambda s: len(s.get("instances", [])) == world and all(
                i["state"] == "ready" for i in s["instances"]))
            got = splitprop.opened(d.sock, [[model, "host", k] for k in range(world)],
                                   worker_env())
            splitprop.check_ranks(d, model, split, ranks, got)
            checked += world
            assert d.request("DELETE", path).status == 200
    assert checked >= 10 and refused >= 1, (checked, refused)
