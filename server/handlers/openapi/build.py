#!/usr/bin/python3
"""Builds the OpenAPI 3.1 description served at /v1/openapi.json:
`build.py OUT.c VERSION base.json PATHS.json...` merges the paths of each
API family's file (v1.json, hub.json, s3.json) into base.json (info,
components), adds to every path that has a GET the HEAD the daemon answers
for it (the same statuses, no body), and compiles the result into C as the
table `openapi_assets` (server/handlers/ui.h's struct ui_asset, written by
ui/embed.py). tests/unit/test_openapi.c checks every path and method
against the daemon's route table; tests/integration/test_openapi.py
validates the document and sends every request it describes."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ui"))

import embed  # noqa: E402

METHODS = ("get", "head", "post", "put", "delete", "options", "patch", "trace")


def head_of(get):
    """The HEAD of a GET: its tags, parameters and statuses, no content."""
    return {"tags": get.get("tags", []), "summary": "as GET, without the body",
            "operationId": get["operationId"] + "Head",
            **({"security": get["security"]} if "security" in get else {}),
            **({"parameters": get["parameters"]} if "parameters" in get else {}),
            "responses": {code: {"description": "as GET, without the body"}
                          for code in get["responses"]}}


def build(version, base_path, parts):
    with open(base_path) as f:
        doc = json.load(f)
    doc["info"]["version"] = version
    doc["paths"] = {}
    for part in parts:
        with open(part) as f:
            paths = json.load(f)["paths"]
        for path, item in paths.items():
            if path in doc["paths"]:
                sys.exit(f"build.py: {part}: {path} is described twice")
            if "get" in item and "head" not in item:
                item["head"] = head_of(item["get"])
            doc["paths"][path] = item
    return doc


def main():
    if len(sys.argv) < 5:
        sys.exit("usage: build.py OUT.c VERSION base.json PATHS.json...")
    out, version, base, parts = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    doc = build(version, base, parts)
    data = (json.dumps(doc, separators=(",", ":"), ensure_ascii=False) + "\n").encode()
    embed.write_table(out, "openapi_assets", [("openapi.json", "application/json", data)],
                      "server/handlers/openapi/build.py from server/handlers/openapi/")


if __name__ == "__main__":
    main()
