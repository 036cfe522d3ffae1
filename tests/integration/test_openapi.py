"""The OpenAPI description (issue 34, item 3): /v1/openapi.json validates
against the OpenAPI 3.1 schema (openapi-spec-validator, from the package
index), and every operation it describes, sent to a daemon serving the
demo models with the examples it gives, answers one of the statuses it
lists, with a body its schema accepts (openapi-schema-validator, OAS 3.1
dialect). tests/unit/test_openapi.c checks the same document against the
route table."""
import json
import os
import shutil
import subprocess
import tempfile
import urllib.parse

import pytest

import gen_models
import tdutil

spec_validator = pytest.importorskip("openapi_spec_validator")
schema_validator = pytest.importorskip("openapi_schema_validator")

ORDER = ("get", "head", "post", "delete")  # a preload before its evict
BODIES = {  # what each POST sends
    "fetch": ("application/json", json.dumps({"tensors": ["embed.weight"]})),
    "preload": ("application/json", json.dumps({"device": "host"})),
    "hubPathsInfo": ("application/x-www-form-urlencoded", "paths=config.json&expand=true"),
}


@pytest.fixture(scope="module")
def daemon():
    base = tempfile.mkdtemp(prefix="tensord-openapi-")
    root = os.path.join(base, "models")
    gen_models.make_demo_models(root)
    os.makedirs(os.path.join(base, "work"))
    d = tdutil.Daemon(root, os.path.join(base, "work"), []).start()
    d.wait_hashed(60)
    yield d
    d.stop_checked()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def doc(daemon):
    r = daemon.get("/v1/openapi.json")
    assert r.status == 200 and r.header("Content-Type") == "application/json"
    return json.loads(r.body)


def test_document_is_valid_openapi_3_1(doc):
    spec_validator.validate(doc)  # raises with the first error
    assert doc["openapi"].startswith("3.1")
    version = subprocess.run([tdutil.tensord_bin(), "--version"], capture_output=True,
                             text=True, check=True).stdout.split()[-1]
    assert doc["info"]["version"] == version


def resolve(doc, obj):
    while "$ref" in obj:
        node = doc
        for part in obj["$ref"].lstrip("#/").split("/"):
            node = node[part]
        obj = node
    return obj


def operations(doc):
    for path, item in doc["paths"].items():
        for method in ORDER:
            if method in item:
                yield path, method


def request_of(doc, path, method):
    item = doc["paths"][path]
    op = item[method]
    params = [resolve(doc, p) for p in item.get("parameters", []) + op.get("parameters", [])]
    url = path
    query = []
    for p in params:
        if p["in"] == "path":
            url = url.replace("{%s}" % p["name"], urllib.parse.quote(p["example"], safe=""))
        elif p["in"] == "query" and p.get("required"):
            query.append((p["name"], p["example"]))
    if query:
        url += "?" + urllib.parse.urlencode(query)
    # tokens are off: any token is the admin's (whoami-v2 answers 200)
    headers, body = {"Authorization": "Bearer any-token-0123456789"}, None
    if method == "post":
        ctype, body = BODIES.get(op["operationId"], ("application/json", "{}"))
        headers["Content-Type"] = ctype
    return url, headers, body


def test_every_operation_answers_as_described(daemon, doc):
    checked = 0
    for path, method in operations(doc):
        op = doc["paths"][path][method]
        url, headers, body = request_of(doc, path, method)
        r = daemon.request(method.upper(), url, headers, body.encode() if body else None)
        where = f"{method.upper()} {url}"
        assert str(r.status) in op["responses"], f"{where}: {r.status} not in " \
                                                 f"{sorted(op['responses'])}: {r.body[:300]!r}"
        if method == "head":
            assert r.body == b"", where
            checked += 1
            continue
        described = resolve(doc, op["responses"][str(r.status)])
        ctype = (r.header("Content-Type") or "").split(";")[0]
        media = described.get("content", {}).get(ctype)
        if r.body and described.get("content"):
            assert media is not None, f"{where}: {ctype} is not described"
        if media and ctype == "application/json" and "schema" in media:
            # the schema with the document's components, so its $refs resolve
            schema = dict(media["schema"], components=doc["components"])
            schema_validator.validate(json.loads(r.body), schema,
                                      cls=schema_validator.OAS31Validator)
        checked += 1
    assert checked > 60
