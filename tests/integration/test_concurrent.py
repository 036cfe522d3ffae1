"""Many clients at once (also what `make tsan-test` runs against the TSan daemon)."""
import http.client
import threading

import numpy as np
import pytest

from tdutil import MANIFEST, all_tensors, expected_slice, random_index, render_index, \
    slice_query, tensor_url

pytestmark = pytest.mark.concurrent

THREADS = 8
PER_THREAD = 40


def worker(port, seed, errors):
    rng = np.random.default_rng(seed)
    tensors = sorted(all_tensors())
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        for _ in range(PER_THREAD):
            model, name = tensors[int(rng.integers(len(tensors)))]
            t = MANIFEST[model][name]
            kind = int(rng.integers(4))
            headers = {}
            if kind == 1 and t.shape and "F4" != t.dtype and not t.dtype.startswith("F6"):
                idx = random_index(rng, t.shape)
                url = tensor_url(model, name, slice_query(render_index(idx)))
                want = expected_slice(t.dtype, t.shape, t.data, idx)[0]
                status = 200
            elif kind == 2 and len(t.data) > 4:
                a = int(rng.integers(len(t.data) - 1))
                b = int(rng.integers(a, len(t.data)))
                headers = {"Range": f"bytes={a}-{b}"}
                url, want, status = tensor_url(model, name), t.data[a:b + 1], 206
            elif kind == 3:
                url, want, status = f"/v1/models/{model.replace('/', '%2F')}", None, 200
            else:
                url, want, status = tensor_url(model, name), t.data, 200
            conn.request("GET", url, headers=headers)
            r = conn.getresponse()
            body = r.read()
            if r.status != status or (want is not None and body != want):
                errors.append(f"GET {url} {headers}: {r.status}, {len(body)} bytes "
                              f"(wanted {status}, {None if want is None else len(want)} bytes)")
                return
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(f"thread {seed}: {e!r}")
    finally:
        conn.close()


def test_parallel_clients(daemon):
    errors = []
    threads = [threading.Thread(target=worker, args=(daemon.port, 500 + i, errors))
               for i in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(300)
    assert not errors, "\n".join(errors[:10])


def test_parallel_big_bodies_and_listing(daemon):
    """Multipart ranges, npy and listings from several threads at once."""
    errors = []
    shard = "model-00003-of-00003.safetensors"
    blob = MANIFEST.models["sharded"].files[shard]

    def run(i):
        conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=60)
        try:
            for j in range(30):
                if (i + j) % 3 == 0:
                    conn.request("GET", f"/v1/models/sharded/files/{shard}")
                    r = conn.getresponse()
                    body = r.read()
                    ok = r.status == 200 and body == blob
                elif (i + j) % 3 == 1:
                    conn.request("GET", f"/v1/models/sharded/files/{shard}",
                                 headers={"Range": "bytes=0-7,100-199,-16"})
                    r = conn.getresponse()
                    body = r.read()
                    ok = r.status == 206 and len(body) > 8 + 100 + 16
                else:
                    conn.request("GET", "/v1/models")
                    r = conn.getresponse()
                    body = r.read()
                    ok = r.status == 200
                if not ok:
                    errors.append(f"thread {i} request {j}: {r.status}")
                    return
        except Exception as e:  # noqa: BLE001
            errors.append(f"thread {i}: {e!r}")
        finally:
            conn.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(300)
    assert not errors, "\n".join(errors[:10])
