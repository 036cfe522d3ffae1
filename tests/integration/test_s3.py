"""The read-only S3 API, read by the clients fleets use: boto3
(list_buckets, list_objects_v2 with prefix, delimiter and pagination,
head_object, ranged get_object, presigned URLs, wrong credentials refused)
and the Run:ai Model Streamer (runai-model-streamer-s3) loading a sharded
model, compared byte for byte with the files on disk (the safetensors
package reads them)."""
import datetime
import hashlib
import os
import shutil
import tempfile
import time
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

import pytest

import hubrepos
import tdutil

boto3 = pytest.importorskip("boto3")
botocore = pytest.importorskip("botocore")
from botocore.config import Config  # noqa: E402

AK, SK = "tensordtestkey", "s3cr3t/with+odd=chars"
NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
ODD = "odd/a&b<c> sp+%.txt"  # a key that needs escaping in XML and in URLs


@pytest.fixture(scope="module")
def repos():
    base = tempfile.mkdtemp(prefix="tensord-s3-")
    root = os.path.join(base, "models")
    files = hubrepos.make_repos(root, big_bytes=1 << 20)
    os.makedirs(os.path.join(root, "single", "odd"), exist_ok=True)
    with open(os.path.join(root, "single", ODD), "wb") as f:
        f.write(b"odd\n")
    files["single"][ODD] = b"odd\n"
    yield base, root, files
    shutil.rmtree(base, ignore_errors=True)


def start(base, root, *args):
    work = tempfile.mkdtemp(dir=base)
    d = tdutil.Daemon(root, work, list(args)).start()
    d.wait_hashed()
    return d


@pytest.fixture(scope="module")
def anon(repos):
    d = start(repos[0], repos[1])
    yield d
    d.stop_checked()


@pytest.fixture(scope="module")
def signed(repos):
    secret = os.path.join(repos[0], "s3.secret")
    with open(secret, "w") as f:
        f.write(SK + "\n")
    access = os.path.join(repos[0], "signed-access.log")
    d = start(repos[0], repos[1], "--s3-access-key", AK, "--s3-secret-key-file", secret,
              "--access-log", access)
    d.access_log = access
    yield d
    d.stop_checked()


def client(d, key=AK, secret=SK, **cfg):
    return boto3.client("s3", endpoint_url=f"http://127.0.0.1:{d.port}/s3",
                        aws_access_key_id=key, aws_secret_access_key=secret,
                        region_name="us-east-1",
                        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                                      **cfg))


def all_keys(files, repo):
    return sorted(files[repo])


def test_buckets_and_objects(anon, repos):
    files = repos[2]
    s3 = client(anon)
    names = [b["Name"] for b in s3.list_buckets()["Buckets"]]
    assert names == sorted(r.replace("/", "--") for r in hubrepos.REPOS)
    for repo, content in files.items():
        bucket = repo.replace("/", "--")
        s3.head_bucket(Bucket=bucket)
        keys = [o["Key"] for p in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket)
                for o in p.get("Contents", [])]
        assert keys == all_keys(files, repo)
        for key, data in content.items():
            h = s3.head_object(Bucket=bucket, Key=key)
            assert h["ContentLength"] == len(data)
            assert h["ETag"] == '"%s"' % hashlib.sha256(data).hexdigest()
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == data


def test_prefix_delimiter_and_pages(anon, repos):
    files = repos[2]
    s3 = client(anon)
    r = s3.list_objects_v2(Bucket="org--sd", Delimiter="/")
    assert [o["Key"] for o in r["Contents"]] == ["model_index.json"]
    assert [p["Prefix"] for p in r["CommonPrefixes"]] == \
        ["scheduler/", "text_encoder/", "unet/", "vae/"]
    assert r["KeyCount"] == 5 and not r["IsTruncated"]
    r = s3.list_objects_v2(Bucket="org--sd", Prefix="unet/")
    assert [o["Key"] for o in r["Contents"]] == \
        ["unet/config.json", "unet/diffusion_pytorch_model.safetensors"]
    # Pages of every size, with and without a delimiter, add up to the whole.
    for size in (1, 2, 3, 1000):
        for delim in (None, "/"):
            args = {"Bucket": "org--sd", "PaginationConfig": {"PageSize": size}}
            if delim:
                args["Delimiter"] = delim
            got, prefixes = [], []
            for p in s3.get_paginator("list_objects_v2").paginate(**args):
                assert p["KeyCount"] <= size
                got += [o["Key"] for o in p.get("Contents", [])]
                prefixes += [c["Prefix"] for c in p.get("CommonPrefixes", [])]
            if delim:
                assert got == ["model_index.json"] and len(prefixes) == 4
            else:
                assert got == all_keys(files, "org/sd")
    r = s3.list_objects_v2(Bucket="org--sd", StartAfter="text_encoder/model.safetensors")
    assert [o["Key"] for o in r["Contents"]] == [k for k in all_keys(files, "org/sd")
                                                 if k > "text_encoder/model.safetensors"]
    # max-keys=0: nothing, and not truncated (as AWS answers): a truncated
    # page would need a token to go on from, and it has no key to give one.
    r = s3.list_objects_v2(Bucket="org--sd", MaxKeys=0)
    assert r["KeyCount"] == 0 and not r["IsTruncated"] and "NextContinuationToken" not in r
    r = s3.list_objects(Bucket="org--sd", MaxKeys=0)
    assert "Contents" not in r and not r["IsTruncated"] and "NextMarker" not in r
    # Version 1 (marker) too.
    r = s3.list_objects(Bucket="org--deep", MaxKeys=2)
    assert [o["Key"] for o in r["Contents"]] == all_keys(files, "org/deep")[:2]


def test_odd_keys_escaped(anon):
    s3 = client(anon)
    r = s3.list_objects_v2(Bucket="single", Prefix="odd/")
    assert [o["Key"] for o in r["Contents"]] == [ODD]
    assert s3.get_object(Bucket="single", Key=ODD)["Body"].read() == b"odd\n"
    # Without encoding-type=url the XML itself escapes the name.
    raw = anon.get("/s3/single?list-type=2&prefix=odd%2F")
    assert raw.status == 200 and raw.ctype == "application/xml"
    keys = [k.text for k in ET.fromstring(raw.body).iter(NS + "Key")]
    assert keys == [ODD]


def test_names_xml_cannot_carry(tmp_path):
    """U+FFFE and U+FFFF are valid UTF-8 in a file name but no XML Char: a
    listing holding one was a document no XML parser reads (expat: "not
    well-formed"), for every key of the bucket. They are written as U+FFFD;
    encoding-type=url gives them exactly."""
    names = ["a\ufffe.txt", "b\uffff.txt"]
    repo = tmp_path / "models" / "nc"
    repo.mkdir(parents=True)
    for n in names + ["plain.txt"]:
        (repo / n).write_bytes(b"x")
    d = tdutil.Daemon(str(tmp_path / "models"), str(tmp_path)).start()
    try:
        d.wait_hashed()
        raw = d.get("/s3/nc?list-type=2")
        assert raw.status == 200
        keys = [k.text for k in ET.fromstring(raw.body).iter(NS + "Key")]
        assert keys == ["a\ufffd.txt", "b\ufffd.txt", "plain.txt"]
        raw = d.get("/s3/nc?list-type=2&encoding-type=url")
        keys = [urllib.parse.unquote(k.text) for k in ET.fromstring(raw.body).iter(NS + "Key")]
        assert keys == names + ["plain.txt"]
    finally:
        d.stop_checked()


def test_bucket_names_are_listed_once(tmp_path):
    """"org/m" is the bucket "org--m", which is also the name of a repo
    "org--m": that one is the bucket, and ListBuckets names it once (it
    listed the name twice, the second time for a repo it does not reach)."""
    for repo, data in (("org/m", b"nested"), ("org--m", b"flat")):
        (tmp_path / "models" / repo).mkdir(parents=True)
        (tmp_path / "models" / repo / "f.txt").write_bytes(data)
    d = tdutil.Daemon(str(tmp_path / "models"), str(tmp_path)).start()
    try:
        d.wait_hashed()
        s3 = client(d)
        assert [b["Name"] for b in s3.list_buckets()["Buckets"]] == ["org--m"]
        assert s3.get_object(Bucket="org--m", Key="f.txt")["Body"].read() == b"flat"
    finally:
        d.stop_checked()


def test_ranges(anon, repos):
    data = repos[2]["org/sharded"]["big.bin"]
    s3 = client(anon)
    g = s3.get_object(Bucket="org--sharded", Key="big.bin", Range="bytes=100-1099")
    assert g["Body"].read() == data[100:1100]
    assert g["ContentRange"] == f"bytes 100-1099/{len(data)}"
    g = s3.get_object(Bucket="org--sharded", Key="big.bin", Range="bytes=-10")
    assert g["Body"].read() == data[-10:]
    with pytest.raises(botocore.exceptions.ClientError) as e:
        s3.get_object(Bucket="org--sharded", Key="big.bin", Range=f"bytes={len(data)}-")
    assert e.value.response["Error"]["Code"] == "InvalidRange"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416


def test_errors(anon):
    s3 = client(anon)
    for call, code in ((lambda: s3.get_object(Bucket="nosuch", Key="a"), "NoSuchBucket"),
                       (lambda: s3.get_object(Bucket="single", Key="nosuch"), "NoSuchKey"),
                       (lambda: s3.list_objects_v2(Bucket="nosuch"), "NoSuchBucket")):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            call()
        assert e.value.response["Error"]["Code"] == code
    r = anon.request("PUT", "/s3/single/new", body=b"x")
    assert r.status == 405 and b"<Code>MethodNotAllowed</Code>" in r.body
    r = anon.get("/s3/single?list-type=2&max-keys=x")
    assert r.status == 400 and b"<Code>InvalidArgument</Code>" in r.body
    r = anon.get("/s3/single?list-type=2&continuation-token=zz")
    assert r.status == 400


def test_front_errors_are_s3_errors(anon):
    """Errors the daemon's front answers on S3 paths (a failed precondition,
    a malformed key, a Host refused without tokens) are S3's XML, so boto3
    raises a ClientError with S3's code, as against AWS."""
    s3 = client(anon)
    etag = s3.head_object(Bucket="single", Key="config.json")["ETag"]
    assert s3.get_object(Bucket="single", Key="config.json", IfMatch=etag)["ETag"] == etag
    for kw in ({"IfMatch": '"not-it"'}, {"IfUnmodifiedSince": datetime.datetime(2000, 1, 1)}):
        with pytest.raises(botocore.exceptions.ClientError) as e:
            s3.get_object(Bucket="single", Key="config.json", **kw)
        assert e.value.response["Error"]["Code"] == "PreconditionFailed", kw
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    r = anon.get("/s3/single/a%00b")
    assert r.status == 400 and b"<Code>InvalidURI</Code>" in r.body
    assert r.header("Content-Type") == "application/xml"
    r = anon.get("/s3/%2e%2e/x")
    assert r.status == 400 and b"<Code>InvalidURI</Code>" in r.body
    r = anon.get("/s3/single/config.json", headers={"Host": "rebound.example"})
    assert r.status == 403 and b"<Code>AccessDenied</Code>" in r.body


def test_signatures_checked(signed, repos):
    data = repos[2]["single"]["config.json"]
    s3 = client(signed)
    assert s3.get_object(Bucket="single", Key="config.json")["Body"].read() == data
    assert [b["Name"] for b in s3.list_buckets()["Buckets"]]
    refused = {"wrong secret": (client(signed, secret="nope"), "SignatureDoesNotMatch"),
               "wrong key": (client(signed, key="AKNOPE"), "InvalidAccessKeyId"),
               "anonymous": (client(signed, signature_version=botocore.UNSIGNED), "AccessDenied")}
    for what, (c, code) in refused.items():
        with pytest.raises(botocore.exceptions.ClientError) as e:
            c.get_object(Bucket="single", Key="config.json")
        assert e.value.response["Error"]["Code"] == code, what
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403, what
        with pytest.raises(botocore.exceptions.ClientError) as e:
            c.list_objects_v2(Bucket="single")
        assert e.value.response["Error"]["Code"] == code, what
    # Presigned URLs: good, tampered, expired; signature version 2 (boto3's
    # default for presigning) is not accepted, and the answer says what to
    # ask the SDK for instead.
    v2 = s3.generate_presigned_url("get_object",
                                   Params={"Bucket": "single", "Key": "config.json"})
    assert "AWSAccessKeyId=" in v2 and "X-Amz-" not in v2
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(v2)
    body = e.value.read()
    assert e.value.code == 400 and b"<Code>InvalidRequest</Code>" in body, body
    assert b"signature version 2 is not supported" in body
    assert b"signature_version=&quot;s3v4&quot;" in body  # XML-escaped
    v2_header = urllib.request.Request(
        f"http://127.0.0.1:{signed.port}/s3/single/config.json",
        headers={"Authorization": f"AWS {AK}:frJIUN8DYpKDtOLCwo//yllqDzg=",
                 "Date": "Tue, 27 Mar 2007 19:36:42 +0000"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(v2_header)
    assert e.value.code == 400 and b"signature version 2 is not supported" in e.value.read()
    s3 = client(signed, signature_version="s3v4")
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "single", "Key": "config.json"},
                                    ExpiresIn=60)
    assert urllib.request.urlopen(url).read() == data
    # A presigned URL reads the object until it expires: its signature is
    # a credential, kept out of the access log like a token.
    signature = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)["X-Amz-Signature"][0]
    logged, until = "", time.monotonic() + 5  # the line is written as the answer ends
    while "X-Amz-Signature=" not in logged and time.monotonic() < until:
        time.sleep(0.05)
        with open(signed.access_log) as f:
            logged = f.read()
    assert "X-Amz-Signature=***" in logged and signature not in logged
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url.replace("config.json", "README.md"))
    assert e.value.code == 403 and b"SignatureDoesNotMatch" in e.value.read()
    url = s3.generate_presigned_url("get_object", Params={"Bucket": "single", "Key": "config.json"},
                                    ExpiresIn=1)
    time.sleep(2.1)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url)
    assert e.value.code == 403 and b"expired" in e.value.read()
    # The secret never reaches the log.
    assert SK not in signed.log_tail(1 << 20)


def test_no_anonymous_s3_behind_tokens(repos, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("read " + "r" * 32 + "\n")
    d = tdutil.Daemon(repos[1], str(tmp_path), ["--auth-token-file", str(tokens)],
                      probe_headers={"Authorization": "Bearer " + "r" * 32}).start()
    try:
        r = d.get("/s3/single/config.json")
        assert r.status == 403 and b"<Code>AccessDenied</Code>" in r.body
    finally:
        d.stop_checked()


@pytest.mark.parametrize("mode", ["anonymous", "signed"])
def test_runai_streamer_loads_a_sharded_model(mode, repos, monkeypatch, request):
    """The streamer's native S3 client (AWS CRT: absolute-form request
    targets, SigV4 over range and content-type) loads both shards."""
    pytest.importorskip("runai_model_streamer_s3")
    d = request.getfixturevalue("anon" if mode == "anonymous" else "signed")
    import safetensors.torch
    import torch
    from runai_model_streamer import SafetensorsStreamer, list_safetensors
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{d.port}/s3")
    monkeypatch.setenv("RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING", "0")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AK)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SK)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    urls = list_safetensors("s3://org--sharded/")
    assert sorted(urls) == ["s3://org--sharded/model-00001-of-00002.safetensors",
                            "s3://org--sharded/model-00002-of-00002.safetensors"]
    want = {}
    for u in urls:
        want.update(safetensors.torch.load(repos[2]["org/sharded"][u.split("/")[-1]]))
    got = {}
    with SafetensorsStreamer() as s:
        s.stream_files(urls)
        for name, t in s.get_tensors():
            got[name] = t.clone()
    assert sorted(got) == sorted(want)
    for name, a in want.items():
        t = got[name]
        assert t.dtype == a.dtype and t.shape == a.shape, name
        # Bit for bit: compared as integers of the same width.
        ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        assert torch.equal(t.contiguous().view(ints), a.contiguous().view(ints)), name


def test_etags_wait_for_hashes(tmp_path):
    """Right after start-up nothing is hashed: an object's ETag waits for
    its file (hashed first, unpaced); with hash_wait 0 the answer is 503
    SlowDown with Retry-After, never a guessed ETag."""
    root = tmp_path / "models"
    files = hubrepos.make_repos(str(root), big_bytes=32 << 20)
    big = files["org/sharded"]["big.bin"]
    slow = ["--hash-max-bytes-per-second", "64K", "--hash-threads", "1"]
    d = tdutil.Daemon(str(root), str(tmp_path), slow).start()
    try:
        h = client(d).head_object(Bucket="org--sharded", Key="big.bin")
        assert h["ETag"] == '"%s"' % hashlib.sha256(big).hexdigest()
    finally:
        d.stop_checked()
    shutil.rmtree(d.state_dir)
    d = tdutil.Daemon(str(root), str(tmp_path), ["--hash-wait", "0"] + slow).start()
    try:
        r = d.get("/s3/org--sharded/big.bin")
        assert r.status == 503 and b"<Code>SlowDown</Code>" in r.body, r
        assert int(r.header("Retry-After")) >= 1
        r = d.get("/s3/org--sharded?list-type=2")
        assert r.status == 503 and b"<Code>SlowDown</Code>" in r.body, r
    finally:
        d.stop_checked()
