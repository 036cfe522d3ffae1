"""Range (RFC 9110) and conditional requests on files, headers, tensors, slices, npy."""
import email.utils
import time

import pytest

from tdutil import MANIFEST, expected_slice, parse_multipart_byteranges, slice_query, tensor_url

SHARD1 = "model-00001-of-00003.safetensors"


def _expected(kind):
    info = MANIFEST.models["sharded"]
    if kind == "file":
        return info.files[SHARD1]
    if kind == "file_header":
        return info.files[SHARD1][8:8 + info.header_length[SHARD1]]
    if kind == "tensor":
        return MANIFEST["sharded"]["model.embed_tokens.weight"].data
    if kind == "slice":
        t = MANIFEST["dtype-f32"]["block.4d"]
        return expected_slice(t.dtype, t.shape, t.data, (slice(None), slice(1, 3)))[0]
    return None  # npy: compared with the full GET


TARGETS = {
    "file": f"/v1/models/sharded/files/{SHARD1}",
    "file_header": f"/v1/models/sharded/files/{SHARD1}/header",
    "tensor": tensor_url("sharded", "model.embed_tokens.weight"),
    "slice": tensor_url("dtype-f32", "block.4d", slice_query(":,1:3")),
    "npy": tensor_url("dtype-f64", "größe", "format=npy"),
}
KINDS = list(TARGETS)


@pytest.fixture(scope="module")
def full(daemon):
    """kind -> (url, full body, full GET response)."""
    out = {}
    for kind, url in TARGETS.items():
        r = daemon.get(url)
        assert r.status == 200, (kind, r)
        want = _expected(kind)
        if want is not None:
            assert r.body == want, f"{kind}: full body differs"
        assert len(r.body) > 64
        out[kind] = (url, r.body, r)
    return out


def resolve(spec, size):
    """(first, last) of a single satisfiable bytes= spec."""
    a, _, b = spec.partition("-")
    if a == "":
        n = int(b)
        return max(0, size - n), size - 1
    first = int(a)
    last = size - 1 if b == "" else min(int(b), size - 1)
    return first, last


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("spec", ["0-9", "5-", "-7", "3-99999999", "0-0", "10-10", "-99999999"])
def test_single_range(daemon, full, kind, spec):
    url, body, _ = full[kind]
    r = daemon.get(url, {"Range": "bytes=" + spec})
    first, last = resolve(spec, len(body))
    assert r.status == 206, f"Range: bytes={spec}: {r!r}"
    assert r.header("Content-Range") == f"bytes {first}-{last}/{len(body)}"
    assert r.body == body[first:last + 1]
    assert int(r.header("Content-Length")) == last - first + 1


@pytest.mark.parametrize("kind", KINDS)
def test_multiple_ranges(daemon, full, kind):
    url, body, g = full[kind]
    size = len(body)
    gap = 81  # RANGE_MERGE_GAP + 1: far enough apart to stay separate parts
    a, b = 4 + gap, 4 + gap + 10 + gap
    assert size > b + 10 + gap + 5, f"{kind}: body too small for the test"
    r = daemon.get(url, {"Range": f"bytes={a}-{a + 9},-5,0-3,{b}-{b + 9}"})
    assert r.status == 206, r
    assert r.header("Content-Range") is None, "multipart answer with a top-level Content-Range"
    parts = parse_multipart_byteranges(r.header("Content-Type"), r.body)
    want = [(0, 3), (a, a + 9), (b, b + 9), (size - 5, size - 1)]  # in body order
    assert [(p[0], p[1]) for p in parts] == want
    for first, last, psize, ptype, data in parts:
        assert psize == size
        assert data == body[first:last + 1]
        assert ptype, "part without Content-Type"
        assert ptype.split(";")[0].strip() == g.ctype
    assert int(r.header("Content-Length")) == len(r.body)


@pytest.mark.parametrize("kind", KINDS)
def test_overlapping_and_close_ranges_are_merged(daemon, full, kind):
    """Overlapping, touching and nearby ranges are sent once, as one part
    (RFC 9110 §14.6); a lone part is a plain 206, not multipart."""
    url, body, _ = full[kind]
    size = len(body)
    for spec, first, last in [("0-9,5-19", 0, 19), ("20-29,0-19", 0, 29), ("0-3,10-19,2-5", 0, 19),
                              ("0-9,40-49", 0, 49), ("-5,-3", size - 5, size - 1)]:
        r = daemon.get(url, {"Range": "bytes=" + spec})
        assert r.status == 206 and r.ctype != "multipart/byteranges", (spec, r)
        assert r.header("Content-Range") == f"bytes {first}-{last}/{size}", spec
        assert r.body == body[first:last + 1], spec


@pytest.mark.parametrize("kind", KINDS)
def test_ranges_asking_for_more_than_the_body_get_the_body(daemon, full, kind):
    """16 overlapping "0-" ranges made a 16x answer (range amplification,
    CVE-2011-3192's class): ranges adding up to more bytes than the body
    have are ignored and the body is sent once, 200."""
    url, body, _ = full[kind]
    size = len(body)
    for spec in [",".join(["0-"] * 16), f"0-{size // 2},{size // 4}-", "-1,0-" + str(size - 1),
                 ",".join(f"{i}-{i + size // 3}" for i in range(0, 8))]:
        r = daemon.get(url, {"Range": "bytes=" + spec})
        assert r.status == 200 and r.body == body, (spec, r)


@pytest.mark.parametrize("kind", ["file", "tensor"])
def test_multiple_ranges_some_unsatisfiable(daemon, full, kind):
    url, body, _ = full[kind]
    size = len(body)
    r = daemon.get(url, {"Range": f"bytes=0-3,{size + 10}-{size + 20}"})
    assert r.status == 206, r
    if r.ctype == "multipart/byteranges":
        parts = parse_multipart_byteranges(r.header("Content-Type"), r.body)
        assert [(p[0], p[1], p[4]) for p in parts] == [(0, 3, body[:4])]
    else:
        assert r.header("Content-Range") == f"bytes 0-3/{size}"
        assert r.body == body[:4]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("which", ["at_end", "past_end"])
def test_unsatisfiable_range(daemon, full, kind, which):
    url, body, _ = full[kind]
    size = len(body)
    spec = f"{size}-" if which == "at_end" else f"{size + 100}-{size + 200}"
    r = daemon.get(url, {"Range": "bytes=" + spec})
    assert r.status == 416, r
    assert r.header("Content-Range") == f"bytes */{size}"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", ["bytes=abc", "bytes=5-2", "items=0-5", "bytes=", "bytes 0-5",
                                   "bytes=1-2-3", "bytes=-", "bytes=0-1,,x"])
def test_malformed_range_is_ignored(daemon, full, kind, value):
    url, body, _ = full[kind]
    r = daemon.get(url, {"Range": value})
    assert r.status == 200, f"Range: {value}: {r!r}"
    assert r.body == body


@pytest.mark.parametrize("kind", KINDS)
def test_if_range_matching_etag(daemon, full, kind):
    """The current ETag validates If-Range when it is strong; a weak one (a
    file whose content hash is not known yet) never does (RFC 9110 §13.1.5),
    and the whole body comes back."""
    url, body, g = full[kind]
    etag = g.header("ETag")
    assert etag
    r = daemon.get(url, {"Range": "bytes=2-9", "If-Range": etag})
    if etag.startswith("W/"):
        assert r.status == 200 and r.body == body, r
    else:
        assert r.status == 206, r
        assert r.body == body[2:10]


@pytest.mark.parametrize("kind", KINDS)
def test_if_range_other_etag(daemon, full, kind):
    url, body, _ = full[kind]
    r = daemon.get(url, {"Range": "bytes=2-9", "If-Range": '"not-the-etag"'})
    assert r.status == 200, r
    assert r.body == body


@pytest.mark.parametrize("kind", KINDS)
def test_if_range_date_never_validates(daemon, full, kind):
    """An If-Range date is strong only when the server knows the
    representation changed at most once in that second (RFC 9110 §8.8.2.2,
    §13.1.5); tensord cannot know it, so the whole representation comes back
    rather than a range that might join two versions."""
    url, body, g = full[kind]
    lm = g.header("Last-Modified")
    assert lm, "no Last-Modified"
    older = email.utils.formatdate(email.utils.parsedate_to_datetime(lm).timestamp() - 3600,
                                   usegmt=True)
    for date in (lm, older):
        r = daemon.get(url, {"Range": "bytes=2-9", "If-Range": date})
        assert r.status == 200 and r.body == body, (date, r)


@pytest.mark.parametrize("kind", KINDS)
def test_if_none_match(daemon, full, kind):
    url, body, g = full[kind]
    etag = g.header("ETag")
    r = daemon.get(url, {"If-None-Match": etag})
    assert r.status == 304, r
    assert r.body == b""
    r = daemon.get(url, {"If-None-Match": f'"other", {etag}'})
    assert r.status == 304, r
    r = daemon.get(url, {"If-None-Match": "*"})
    assert r.status == 304, r
    r = daemon.get(url, {"If-None-Match": '"other"'})
    assert r.status == 200 and r.body == body


@pytest.mark.parametrize("kind", KINDS)
def test_if_none_match_weak_comparison(daemon, full, kind):
    url, _, g = full[kind]
    etag = g.header("ETag")
    weak = etag if etag.startswith("W/") else "W/" + etag
    r = daemon.get(url, {"If-None-Match": weak})
    assert r.status == 304, r


def _imsdate(ts):
    return email.utils.formatdate(ts, usegmt=True)


@pytest.mark.parametrize("kind", KINDS)
def test_if_modified_since(daemon, full, kind):
    url, body, g = full[kind]
    lm = g.header("Last-Modified")
    assert lm, "no Last-Modified"
    lm_ts = email.utils.parsedate_to_datetime(lm).timestamp()
    for ts, want in [(lm_ts, 304), (lm_ts + 86400, 304), (time.time() + 86400 * 30, 304),
                     (lm_ts - 86400, 200)]:
        r = daemon.get(url, {"If-Modified-Since": _imsdate(ts)})
        assert r.status == want, f"If-Modified-Since {_imsdate(ts)} (Last-Modified {lm}): {r!r}"
        assert r.body == (b"" if want == 304 else body)


@pytest.mark.parametrize("kind", KINDS)
def test_if_none_match_wins_over_if_modified_since(daemon, full, kind):
    url, body, g = full[kind]
    lm = g.header("Last-Modified")
    r = daemon.get(url, {"If-None-Match": '"other"', "If-Modified-Since": lm})
    assert r.status == 200 and r.body == body


@pytest.mark.parametrize("kind", KINDS)
def test_head_same_headers(daemon, full, kind):
    url, body, g = full[kind]
    h = daemon.head(url)
    assert h.status == 200
    assert h.body == b""
    assert int(h.header("Content-Length")) == len(body)
    for k in ("Content-Type", "ETag", "Last-Modified", "Accept-Ranges", "X-Tensor-Dtype",
              "X-Tensor-Shape"):
        assert h.header(k) == g.header(k), k
    h = daemon.head(url, {"Range": "bytes=1-4"})
    assert h.status == 206 and h.body == b""
    assert h.header("Content-Range") == f"bytes 1-4/{len(body)}"
    assert int(h.header("Content-Length")) == 4


@pytest.mark.parametrize("kind", KINDS)
def test_accept_ranges(full, kind):
    assert full[kind][2].header("Accept-Ranges") == "bytes"
