"""The command line of tensord's HTTP API: `python -m tensord` and the
installed `tensord-http`.

    tensord-http ls
    tensord-http info MODEL
    tensord-http header MODEL [--file FILE]
    tensord-http get MODEL TENSOR [--slice SPEC] [-o FILE]
    tensord-http fetch MODEL [--tensor NAME[:SLICE]]... [--world N --rank R
                              --rule GLOB=DIM...] -o FILE
    tensord-http download MODEL DIR

The daemon is --url (default $TENSORD_URL, else http://127.0.0.1:8077);
the token --token (default $TENSORD_TOKEN, sent where the client's rules
let it go: client/python/README.md "Tokens"). Transfers show a progress
bar on a terminal. Exit status, as every tensord command: 0 done; 1 done,
and something checked is bad (a downloaded file whose SHA-256 is not the
daemon's); 2 could not do what was asked (a usage error, a model or tensor
that does not exist, a daemon that cannot be reached or refuses).
"""
import argparse
import json
import os
import sys
import urllib.parse

from . import _local
from ._deadline import Deadline
from ._errors import SafetensorError
from ._http import Session, read_capped
from ._transfer import EXIT_BAD, EXIT_FAILED, EXIT_OK, Bar, Failure, download_file, stream_to

DEFAULT_URL = "http://127.0.0.1:8077"
PRINT_MAX = 64 << 20  # the largest tensor printed (larger ones: -o FILE)


class Daemon:
    """The daemon named by --url: a Session and the paths below its prefix."""

    def __init__(self, url, token, timeout):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
            raise Failure(f"--url {url!r} is not an http:// or https:// URL of a daemon "
                          f"(like {DEFAULT_URL})")
        self.prefix = parts.path.rstrip("/")
        self.session = Session(f"{parts.scheme}://{parts.netloc}", token=token)
        self.timeout = timeout

    def path(self, *segments, query=None):
        p = self.prefix + "".join("/" + urllib.parse.quote(s, safe="") for s in segments)
        return p + ("?" + urllib.parse.urlencode(query) if query else "")

    def deadline(self, what):
        return Deadline(self.timeout, what)

    def json(self, *segments):
        what = "GET " + "/".join(segments)
        return self.session.json(self.path(*segments), self.deadline(what), what)

    def open(self, method, path, what, body=None, headers=None):
        """(the response, its body unread; the deadline to read it by)."""
        deadline = self.deadline(what)
        return self.session.open(method, path, deadline, headers=headers, body=body,
                                 what=what), deadline


def size_text(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def table(rows, out):
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")


# ---- commands ---------------------------------------------------------------------


def cmd_ls(d, args, out):
    doc = d.json("v1", "models")
    if args.json:
        json.dump(doc, out, indent=2)
        out.write("\n")
        return EXIT_OK
    rows = [("NAME", "STATE", "TENSORS", "SIZE", "FILES", "HASHED", "GPU")]
    for m in doc.get("models", []):
        h = m.get("hashes", {})
        rows.append((m["name"], m["state"], m.get("tensors", 0), size_text(m.get("bytes", 0)),
                     m.get("files", 0), f"{h.get('known', 0)}/{h.get('files', 0)}",
                     m.get("gpu", {}).get("state", "-")))
    table(rows, out)
    return EXIT_OK


def cmd_info(d, args, out):
    doc = d.json("v1", "models", args.model)
    if args.json:
        json.dump(doc, out, indent=2)
        out.write("\n")
        return EXIT_OK
    out.write(f"model {doc['name']}: {doc['state']}, {doc.get('tensor_count', 0)} tensors, "
              f"{size_text(doc.get('bytes', 0))}\n")
    if doc.get("error"):
        out.write(f"error: {doc['error'].get('code')}: {doc['error'].get('message')}\n")
    rows = [("FILE", "SIZE", "SHA256")]
    rows += [(f["name"], f["size"], f.get("sha256") or "(not hashed yet)")
             for f in doc.get("files", [])]
    table(rows, out)
    for name, meta in (doc.get("metadata") or {}).items():
        out.write(f"metadata of {name}: {json.dumps(meta)}\n")
    tensors = doc.get("tensors") or {}
    if tensors:
        rows = [("TENSOR", "DTYPE", "SHAPE", "BYTES", "FILE")]
        rows += [(n, t["dtype"], "[" + ", ".join(map(str, t["shape"])) + "]",
                  t.get("nbytes", t["data_offsets"][1] - t["data_offsets"][0]), t["file"])
                 for n, t in tensors.items()]
        table(rows, out)
    return EXIT_OK


def cmd_header(d, args, out):
    doc = d.json("v1", "models", args.model, *(["files", args.file] if args.file else []),
                 "header")
    json.dump(doc, out, indent=2, ensure_ascii=False)
    out.write("\n")
    return EXIT_OK


def output_format(args):
    if args.format:
        return args.format
    name = args.output or ""
    return "npy" if name.endswith(".npy") else "safetensors" \
        if name.endswith(".safetensors") else "raw"


def cmd_get(d, args, out):
    query = {"format": output_format(args) if args.output else "safetensors"}
    if args.slice is not None:
        query["slice"] = args.slice
    path = d.path("v1", "models", args.model, "tensors", args.tensor, query=query)
    what = f"tensor {args.tensor!r} of model {args.model!r}"
    resp, deadline = d.open("GET", path, what)
    if args.output:
        stream_to(resp, deadline, args.output, what, args.progress)
        return EXIT_OK
    # printed: read as a safetensors file, every dtype as the client gives it
    data, over = read_capped(resp, PRINT_MAX, deadline, what)
    if over:
        raise Failure(f"{what} is larger than {size_text(PRINT_MAX)}: too large to print; "
                      "write it to a file with -o FILE.npy (or .safetensors, or raw bytes)")
    import numpy as np
    (name, array), = _local.load(bytes(data), "numpy").items()
    out.write(f"{args.tensor}: {resp.headers.get('X-Tensor-Dtype', '?')} "
              f"{list(array.shape)}\n")
    with np.printoptions(threshold=200, edgeitems=4):
        out.write(repr(array) + "\n")
    return EXIT_OK


def fetch_request(args):
    items = []
    for t in args.tensor or []:
        name, sep, spec = t.partition(":") if args.slice_separator else (t, "", "")
        items.append({"name": name, "slice": spec} if sep else name)
    body = {}
    if items:
        body["tensors"] = items
    if args.world is not None or args.rank is not None or args.rule:
        if args.world is None or args.rank is None:
            raise Failure("--world and --rank go together")
        rules = []
        for r in args.rule or []:
            glob, sep, dim = r.rpartition("=")
            try:
                rules.append({"match": glob, "dim": int(dim)})
            except ValueError:
                sep = ""
            if not sep or not glob:
                raise Failure(f"--rule {r!r} is not GLOB=DIM (e.g. '*.q_proj.weight=0')")
        body["split"] = {"world": args.world, "rank": args.rank, "rules": rules}
    return body


def cmd_fetch(d, args, out):
    body = fetch_request(args)
    what = f"fetch of model {args.model!r}"
    resp, deadline = d.open("POST", d.path("v1", "models", args.model, "fetch"), what,
                            body=body)
    stream_to(resp, deadline, args.output, what, args.progress)
    return EXIT_OK


_HEX = frozenset("0123456789abcdef")


def check_file_entry(f, model):
    """A file of the description, before any byte is written for it: a
    plain name (a model's files are in its directory, so no '/', no '..':
    a hostile server cannot make the download write outside DIR), a size,
    and a SHA-256 that is one or not known yet."""
    name = f.get("name") if isinstance(f, dict) else None
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or \
            "\\" in name or "\0" in name or name.endswith((".part", ".part.etag")):
        raise Failure(f"the daemon's description of {model!r} names a file {name!r} that is "
                      "not a plain file name: refused")
    if type(f.get("size")) is not int or f["size"] < 0:
        raise Failure(f"the daemon's description gives {name!r} no size")
    sha = f.get("sha256")
    if sha is not None and (not isinstance(sha, str) or len(sha) != 64 or set(sha) - _HEX):
        raise Failure(f"the daemon's description gives {name!r} a malformed sha256")


def cmd_download(d, args, out):
    doc = d.json("v1", "models", args.model)
    if doc.get("state") != "ready":
        err = doc.get("error") or {}
        raise Failure(f"model {args.model!r} is invalid: {err.get('message', '')}")
    files = doc.get("files")
    if not isinstance(files, list):
        raise Failure(f"the description of {args.model!r} has no list of files")
    for f in files:
        check_file_entry(f, args.model)
    os.makedirs(args.dir, exist_ok=True)
    total = sum(f["size"] for f in files)
    bar = Bar(total, f"{args.model}", args.progress)
    status = EXIT_OK
    try:
        for f in files:
            verdict = download_file(d, args.model, f, args.dir, bar, args.hash_wait)
            out.write(f"{verdict:<11}{f['name']}\n")
            out.flush()
            if verdict == "MISMATCH":
                status = EXIT_BAD
    finally:
        bar.close()
    return status


# ---- the command line -------------------------------------------------------------


def parser():
    top = argparse.ArgumentParser(
        prog="tensord-http", description="The HTTP API of a tensord daemon from the command "
        "line: list models, read their descriptions and headers, get tensors and slices, "
        "fetch tensor-parallel parts, download a model's files.",
        epilog="Exit status: 0 done; 1 something checked is bad (a downloaded file whose "
        "SHA-256 is not the daemon's); 2 could not do what was asked (usage, no such model "
        "or tensor, the daemon unreachable or refusing).")
    top.add_argument("--url", default=os.environ.get("TENSORD_URL") or DEFAULT_URL,
                     help="the daemon (default: $TENSORD_URL, else %(default)s)")
    top.add_argument("--token", help="bearer token (default: $TENSORD_TOKEN, sent only to "
                     "$TENSORD_URL's origin and loopback)")
    top.add_argument("--timeout", type=float, default=None,
                     help="seconds for each request (default: the client's, about a minute "
                     "without progress)")
    bars = top.add_mutually_exclusive_group()
    bars.add_argument("--progress", dest="progress", action="store_true", default=None,
                      help="show progress bars (default: when stderr is a terminal)")
    bars.add_argument("--no-progress", dest="progress", action="store_false")
    top.add_argument("--version", action="version", version="tensord-http 0.1.0")
    sub = top.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("ls", help="the models and their state",
                       description="Lists the daemon's models: state, tensors, size, files, "
                       "how many are hashed, GPU state.")
    p.add_argument("--json", action="store_true", help="the daemon's JSON as it is")
    p.set_defaults(run=cmd_ls)

    p = sub.add_parser("info", help="one model: files, hashes, metadata, tensors",
                       description="Prints one model's files (size, SHA-256), metadata and "
                       "tensors (dtype, shape, bytes, file).")
    p.add_argument("model")
    p.add_argument("--json", action="store_true", help="the daemon's JSON as it is")
    p.set_defaults(run=cmd_info)

    p = sub.add_parser("header", help="the merged header, or one file's",
                       description="Prints the model's merged header (every shard), or with "
                       "--file the header of one of its safetensors files as stored.")
    p.add_argument("model")
    p.add_argument("--file", help="one safetensors file of the model")
    p.set_defaults(run=cmd_header)

    p = sub.add_parser("get", help="a tensor or a slice: printed, or written to a file",
                       description="Gets a tensor, or a slice of it cut by the daemon. Without "
                       "-o it is printed; with -o FILE it is written as .npy (FILE.npy), "
                       "safetensors (FILE.safetensors) or raw bytes (anything else; '-' is "
                       "standard output).")
    p.add_argument("model")
    p.add_argument("tensor")
    p.add_argument("--slice", help="NumPy basic indexing per dimension, comma-separated "
                   "(0:2,::-1,5)")
    p.add_argument("-o", "--output", help="the file to write")
    p.add_argument("--format", choices=["raw", "npy", "safetensors"],
                   help="the file's format (default: by -o's suffix)")
    p.set_defaults(run=cmd_get)

    p = sub.add_parser("fetch", help="many tensors, or a tensor-parallel rank, as one "
                       "safetensors file",
                       description="One POST .../fetch: the tensors asked for (every tensor "
                       "without --tensor), sliced, and cut for tensor parallelism with "
                       "--world, --rank and --rule, written as one safetensors file.")
    p.add_argument("model")
    p.add_argument("--tensor", action="append", metavar="NAME[:SLICE]",
                   help="a tensor (repeat it); NAME:SLICE with --slice-separator")
    p.add_argument("--slice-separator", action="store_true",
                   help="read --tensor as NAME:SLICE (names holding ':' cannot be sliced so)")
    p.add_argument("--world", type=int, help="tensor-parallel ranks")
    p.add_argument("--rank", type=int, help="this rank (0 <= R < world)")
    p.add_argument("--rule", action="append", metavar="GLOB=DIM",
                   help="cut the tensors GLOB matches along DIM (repeat it; first match wins)")
    p.add_argument("-o", "--output", required=True, help="the safetensors file to write")
    p.set_defaults(run=cmd_fetch)

    p = sub.add_parser("download", help="every file of a model into a directory, resumable, "
                       "SHA-256 checked",
                       description="Downloads each file of the model into DIR. A file already "
                       "there with the daemon's SHA-256 is kept; a partial one (NAME.part) is "
                       "resumed where it stopped when the daemon still has the same file; each "
                       "file is checked against the daemon's SHA-256 before it takes its name.")
    p.add_argument("model")
    p.add_argument("dir")
    p.add_argument("--hash-wait", type=float, default=120,
                   help="seconds to wait for the daemon to hash a file it has not hashed yet "
                   "(default %(default)s)")
    p.set_defaults(run=cmd_download)
    return top


def main(argv=None, out=None):
    out = out or sys.stdout
    args = parser().parse_args(argv)
    try:
        d = Daemon(args.url, args.token, args.timeout)
        return args.run(d, args, out)
    except Failure as e:
        print(f"tensord-http: {e}", file=sys.stderr)
        return e.status
    except SafetensorError as e:
        # the daemon's refusal (its code and message), a connection that
        # failed, a deadline: what the client says
        print(f"tensord-http: {e}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as e:
        print(f"tensord-http: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}",
              file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("tensord-http: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
