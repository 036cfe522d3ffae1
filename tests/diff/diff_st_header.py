#!/usr/bin/python3
"""Differential test of st_header_parse over generated headers.

Generates valid safetensors headers (random names with escapes and non-ASCII,
every dtype, shapes, metadata, whitespace, key orders) and mutations of them
(bytes and tokens changed, inserted, dropped: bad numbers, escapes,
surrogates, duplicate keys, trailing commas, deep nesting ...), then checks
each one two ways:

  1. against the reference: the parser as it was when it built a jansson tree
     (core/st_header.c at REFERENCE, taken from git), built into the same
     driver; the status, the whole message and every parsed field must match;
  2. against Python's json module (with jansson's limits added: no \\u0000,
     no lone surrogates, integers within int64, no real overflow): whether the
     text is JSON must agree, and for a valid header the names, dtypes,
     shapes, offsets and metadata must be what Python decodes.

Prints "N passed, N failed" (cases). Usage:
  diff_st_header.py [--cases N] [--seed S] [--no-reference] [--sanitize] [--keep DIR]
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The last commit whose st_header.c parsed through a jansson tree.
REFERENCE = "2df49af"

DTYPES = {"BOOL": 8, "U8": 8, "I8": 8, "U16": 16, "I16": 16, "F16": 16, "BF16": 16, "U32": 32,
          "I32": 32, "F32": 32, "U64": 64, "I64": 64, "F64": 64, "C64": 64, "F8_E4M3": 8,
          "F8_E5M2": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F8_E8M0": 8, "F6_E2M3": 6,
          "F6_E3M2": 6, "F4": 4}
NAME_CHARS = "abcdwxyz._-0123456789/" + "éü" + "日本" + "\U0001F600" + " \"\\\t\n\x01\x7f"
BAD_NUMBERS = ["01", "-0", "-0.0", "1.0", "1e3", "1E+2", "2e-1", "-1", "9223372036854775807",
               "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
               "18446744073709551615", "123456789012345678901234567890", "1e400", "-1e400",
               "1e-400", "NaN", "Infinity", "-Infinity", "-", "1.", ".5", "1e", "1e+", "0x10",
               "+1", "00", "0e", "-a", "1.5", "0.0", "true", "null", "\"1\"", "[1]", "{}",
               "4611686018427387904", "4294967296"]
STRING_JUNK = ["\\u0000", "\\ud800", "\\udc00", "\\ud800\\u0041", "\\ud800\\ud800",
               "\\uD83D\\uDE00", "\\uD83D", "\\x", "\\u12G4", "\\u12", "\x01", "\n", "\t",
               "\\", "\\\"", "\\/", "\\u00e9", "\\U0041", "\x7f", "\u00a0", "\\ud800\\n",
               "\\udbff\\udfff", "\\uDC00\\uD800"]
INSERTS = ([c for c in "{}[]:,\"\\ -0123456789eE.+tfnul\t\n\r"] +
           ["\x00", "\x0b", "\x0c", "\x7f", "\u00a0", "\U0001F600", "é", "\ufeff", "//", "/*"])
RAW_INSERTS = [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\x80", b"\xf4\x90\x80\x80"]


def jstr(s, rnd, escape_rate):
    out = ['"']
    for ch in s:
        o = ord(ch)
        short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r",
                 "\t": "\\t"}
        if ch in short and (o < 0x20 or ch in '"\\' or rnd.random() < 0.7):
            out.append(short[ch])
        elif o < 0x20 or rnd.random() < escape_rate:
            fmt = rnd.choice(["\\u%04x", "\\u%04X"])
            if o > 0xFFFF:
                v = o - 0x10000
                out.append(fmt % (0xD800 + (v >> 10)) + fmt % (0xDC00 + (v & 0x3FF)))
            else:
                out.append(fmt % o)
        elif ch == "/" and rnd.random() < 0.3:
            out.append("\\/")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def rand_name(rnd):
    r = rnd.random()
    if r < 0.05:
        return ""
    if r < 0.1:
        return rnd.choice(["__metadata", "__metadata__x", "_metadata__", "dtype", "shape"])
    if r < 0.15:
        return "n" * rnd.randint(60, 200) + rnd.choice(["", "é", "\U0001F600"])
    if r < 0.6:
        return "model.layers.%d.%s" % (rnd.randint(0, 99), rnd.choice(["w", "b", "mlp.weight"]))
    return "".join(rnd.choice(NAME_CHARS) for _ in range(rnd.randint(1, 12)))


class Gen:
    """A random valid header (as JSON text) and its data length."""

    def __init__(self, rnd):
        self.rnd = rnd

    def ws(self):
        r = self.rnd.random()
        if r < self.ws_rate:
            return "".join(self.rnd.choice(" \t\n\r") for _ in range(self.rnd.randint(1, 3)))
        return ""

    def header(self, n_max=6):
        rnd = self.rnd
        self.ws_rate = rnd.choice([0, 0, 0.1, 0.5])
        esc = rnd.choice([0, 0, 0.05, 0.3])
        n = rnd.randint(0, n_max)
        names = []
        while len(names) < n:
            nm = rand_name(rnd)
            if nm not in names:
                names.append(nm)
        tensors = []
        for nm in names:
            dt = rnd.choice(list(DTYPES))
            ndim = rnd.choice([0, 1, 1, 2, 2, 3, 4])
            shape = [rnd.choice([0, 1, 2, 3, 4, 5, 8, 16]) for _ in range(ndim)]
            count = 1
            for d in shape:
                count *= d
            if count * DTYPES[dt] % 8 and rnd.random() < 0.9:
                shape = shape + [8]
                count *= 8
            tensors.append([nm, dt, shape, count * DTYPES[dt] // 8])
        order = list(range(n))
        rnd.shuffle(order)
        off = 0
        spans = {}
        for i in order:
            spans[i] = (off, off + tensors[i][3])
            off += tensors[i][3]
        entries = []
        for i, (nm, dt, shape, _) in enumerate(tensors):
            fields = [("dtype", jstr(dt, rnd, esc)),
                      ("shape", "[" + ",".join(self.ws() + str(d) + self.ws() for d in shape) + "]"),
                      ("data_offsets", "[%s%d%s,%s%d%s]" % (self.ws(), spans[i][0], self.ws(),
                                                            self.ws(), spans[i][1], self.ws()))]
            if rnd.random() < 0.7:
                rnd.shuffle(fields)
            body = ",".join(self.ws() + jstr(k, rnd, esc) + self.ws() + ":" + self.ws() + v +
                            self.ws() for k, v in fields)
            entries.append(jstr(nm, rnd, esc) + self.ws() + ":" + self.ws() + "{" + body + "}")
        if rnd.random() < 0.5:
            kv = []
            keys = set()
            for _ in range(rnd.randint(0, 4)):
                k = rand_name(rnd)
                if k in keys:
                    continue
                keys.add(k)
                kv.append(jstr(k, rnd, esc) + self.ws() + ":" + self.ws() +
                          jstr(rand_name(rnd), rnd, esc))
            entries.insert(rnd.randint(0, len(entries)),
                           jstr("__metadata__", rnd, esc) + ":{" + ",".join(kv) + "}")
        text = self.ws() + "{" + ",".join(self.ws() + e + self.ws() for e in entries) + "}" + \
            self.ws()
        if rnd.random() < 0.05:
            text += " " * rnd.randint(1, 8)
        data_len = off
        if rnd.random() < 0.03:
            data_len += rnd.choice([-1, 1]) if off else 1
        return text, data_len


def mutate(text, rnd):
    """One random change to a header's text (str; bytes for raw inserts)."""
    kind = rnd.randrange(16)
    n = len(text)
    at = rnd.randint(0, n)
    if kind == 0 and n:
        return text[:at] + text[at + 1:]
    if kind == 1:
        return text[:at] + rnd.choice(INSERTS) + text[at:]
    if kind == 2:
        # Replace a number (a run of digits) with a bad or edge one.
        digits = [i for i, c in enumerate(text) if c.isdigit() and (i == 0 or not text[i - 1].isdigit())]
        if digits:
            i = rnd.choice(digits)
            j = i
            while j < n and text[j].isdigit():
                j += 1
            return text[:i] + rnd.choice(BAD_NUMBERS) + text[j:]
    if kind == 3:
        # Something odd inside a string.
        quotes = [i for i, c in enumerate(text) if c == '"']
        if quotes:
            i = rnd.choice(quotes) + 1
            return text[:i] + rnd.choice(STRING_JUNK) + text[i:]
    if kind == 4:
        # A trailing comma.
        closers = [i for i, c in enumerate(text) if c in "}]"]
        if closers:
            i = rnd.choice(closers)
            return text[:i] + "," + text[i:]
    if kind == 5:
        # Duplicate a tensor entry or a field (a duplicate key, or a second copy).
        i = text.find('{', 1)
        if i > 0:
            j = text.find('}', i)
            k = text.rfind(',', 0, i)
            start = k + 1 if k > 0 else 1
            if j > 0:
                return text[:j + 1] + "," + text[start:j + 1] + text[j + 1:]
    if kind == 6:
        # An extra field in a tensor entry, or a duplicated known one.
        i = text.find('"dtype"')
        if i > 0:
            extra = rnd.choice(['"extra":1,', '"dtype":"F32",', '"shape":[1],', '"x":{"a":1,"a":2},',
                                '"y":[[[1]]],', '"data_offsets":[0,0],', '"z":{"k":"\\u0000"},',
                                '"Dtype":"U8",', '"ext\\u0072a":null,'])
            return text[:i] + extra + text[i:]
    if kind == 7:
        # A different value for a field.
        for key in ('"dtype"', '"shape"', '"data_offsets"', '"__metadata__"'):
            i = text.find(key)
            if i > 0 and rnd.random() < 0.5:
                i = text.find(":", i) + 1
                j = i
                depth = 0
                while j < n:
                    c = text[j]
                    if c in "[{":
                        depth += 1
                    elif c in "]}":
                        if depth == 0:
                            break
                        depth -= 1
                    elif c == "," and depth == 0:
                        break
                    elif c == '"':
                        j += 1
                        while j < n and text[j] != '"':
                            j += 2 if text[j] == "\\" else 1
                    j += 1
                v = rnd.choice(['"f32"', '"F32 "', '""', '8', 'null', 'true', '[]', '[1,2]', '{}',
                                '{"a":"b"}', '"x"', '[0,1,2]', '[0]', '[-1]', '[1.5]', '"F8"',
                                '[' + ",".join(["1"] * rnd.choice([64, 65, 70])) + ']',
                                '[[[[[[[[[1]]]]]]]]]', '[[[[[[1]]]]]]', '{"k":1}', '{"k":"v","k":"w"}',
                                '"' + "q" * 50 + '"', '-0', '1e5', '"\\u00e9\\n"'])
                return text[:i] + v + text[j:]
    if kind == 8 and n:
        return text[:at]
    if kind == 9:
        i, j = sorted((rnd.randint(0, n), rnd.randint(0, n)))
        return text[:j] + text[i:j] + text[j:]
    if kind == 10 and n > 1:
        i = rnd.randrange(n - 1)
        return text[:i] + text[i + 1] + text[i] + text[i + 2:]
    if kind == 11:
        return text + rnd.choice(["x", "{}", "}", " ", "\n", "\x0c", "\x00", ",", '"', "1"])
    if kind == 12:
        ws = rnd.choice(["\x0b", "\x0c", "\u00a0", "\u2028", "\ufeff", "\r\n", "\n\n"])
        return text[:at] + ws + text[at:]
    if kind == 13:
        # A raw byte sequence that is not UTF-8 (checked before the JSON).
        b = text.encode("utf-8", "surrogatepass")
        at = rnd.randint(0, len(b))
        return b[:at] + rnd.choice(RAW_INSERTS) + b[at:]
    if kind == 14:
        # Swap the case of a literal or a hex digit.
        i = rnd.randint(0, n)
        return text[:i] + text[i:i + 1].swapcase() + text[i + 1:]
    if kind == 15:
        # A negative zero or a deep value in __metadata__ or a tensor.
        return text.replace("[0,", rnd.choice(["[-0,", "[ -0 ,", "[0 ,"]), 1)
    return text


def to_bytes(t):
    return t if isinstance(t, bytes) else t.encode("utf-8", "surrogatepass")


def cases(rnd, count):
    g = Gen(rnd)
    for i in range(count):
        big = i % 500 == 0
        text, data_len = g.header(n_max=3000 if big else 6)
        if rnd.random() < 0.7 and not big:
            for _ in range(rnd.choice([1, 1, 1, 2, 3])):
                if isinstance(text, bytes):
                    break
                text = mutate(text, rnd)
        yield to_bytes(text), data_len


# ---- Python's json with jansson's limits ----

class NotJson(Exception):
    pass


def check_str(s):
    for ch in s:
        if ch == "\x00" or 0xD800 <= ord(ch) <= 0xDFFF:
            raise NotJson()
    return s


def pairs_hook(ps):
    keys = [check_str(k) for k, _ in ps]
    if len(set(keys)) != len(keys):
        raise NotJson()
    return ("obj", ps)


def parse_int(s):
    v = int(s)
    if not -(1 << 63) <= v < (1 << 63):
        raise NotJson()
    return v


def parse_float(s):
    v = float(s)
    if v in (float("inf"), float("-inf")):
        raise NotJson()
    return ("real", v)


def no_constant(s):
    raise NotJson()


def walk_strings(v):
    if isinstance(v, str):
        check_str(v)
    elif isinstance(v, tuple) and v[0] == "obj":
        for _, x in v[1]:
            walk_strings(x)
    elif isinstance(v, list):
        for x in v:
            walk_strings(x)


def py_json(b):
    """The decoded value, or None when jansson would refuse the text."""
    try:
        s = b.decode("utf-8")
        v = json.loads(s, object_pairs_hook=pairs_hook, parse_int=parse_int,
                       parse_float=parse_float, parse_constant=no_constant)
        walk_strings(v)
        return v
    except (NotJson, ValueError, RecursionError):
        return None


def parse_dump(hexdump):
    """The driver's dump back as {tensors, meta, has_meta} (names may hold newlines)."""
    d = bytes.fromhex(hexdump)
    head, _, d = d.partition(b"\n")
    out = {"tensors": {}, "meta": [], "has_meta": head.split(b" ")[3] == b"1"}

    def field(d):
        n, _, rest = d.partition(b":")
        n = int(n)
        return rest[:n].decode("utf-8"), rest[n:]

    while d:
        kind, d = d[:2], d[2:]
        if kind == b"m ":
            k, d = field(d)
            v, d = field(d[1:])
            out["meta"].append((k, v))
        else:
            name, d = field(d)
            line, _, d = d[1:].partition(b"\n")
            dt, ndim, shape, nelems, b, e = line.decode().split(" ")
            out["tensors"][name] = (dt, [int(x) for x in shape[1:-1].split(",") if x],
                                    [int(b), int(e)])
        if d.startswith(b"\n"):
            d = d[1:]
    return out


def py_expect(v):
    """What a valid header's dump should hold, from Python's decoding."""
    exp = {"tensors": {}, "meta": [], "has_meta": False}
    for k, x in v[1]:
        if k == "__metadata__":
            exp["has_meta"] = True
            exp["meta"] = [(a, b) for a, b in x[1]]
        else:
            f = dict(x[1])
            exp["tensors"][k] = (f["dtype"], f["shape"], f["data_offsets"])
    return exp


# ---- drivers ----

def build(out_dir, use_reference, sanitize):
    driver = os.path.join(ROOT, "tests", "diff", "st_header_driver.c")
    lib = os.path.join(ROOT, "build", "libtensord-core.a")
    flags = ["-O1", "-g", "-D_GNU_SOURCE"] + ["-I" + os.path.join(ROOT, "core", d)
                                              for d in ("base", "format")]
    if sanitize:
        # The library built with the same sanitizers, by the Makefile.
        san = "address,undefined"
        lib = os.path.join(ROOT, "build", "san-address-undefined", "libtensord-core.a")
        subprocess.run(["make", "-s", "-C", ROOT, "SANITIZER=" + san, os.path.relpath(lib, ROOT)],
                       check=True)
        flags += ["-fsanitize=" + san, "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]
    else:
        subprocess.run(["make", "-s", "-C", ROOT, "build/libtensord-core.a"], check=True)
    libs = ["-ljansson", "-lm", "-lpthread", "-ldl"]
    new = os.path.join(out_dir, "driver_new")
    subprocess.run(["cc"] + flags + ["-o", new, driver, lib] + libs, check=True)
    if not use_reference:
        return new, None
    p = subprocess.run(["git", "-C", ROOT, "show", REFERENCE + ":core/st_header.c"],
                       capture_output=True)
    if p.returncode != 0:
        print("  reference %s not in this checkout (shallow clone?): Python check only"
              % REFERENCE)
        return new, None
    src = os.path.join(out_dir, "st_header_ref.c")
    with open(src, "wb") as f:
        f.write(p.stdout)
    # The reference is compiled against its own st_header.h and st_error.h (the
    # API has changed since: st_header_read_fd's keep_max, the raw field at the
    # struct's end, which the driver never reads; errors returned as -errno), found
    # before core/'s folders on the include path (taken from core/, where they
    # were at that commit). Its error setter, st_error_set, is gone from
    # core: the reference's st_error.c comes along, and its st_status_name
    # (renamed, so as not to meet the library's) names the reference's codes for
    # the driver: the enum has grown codes between them since.
    ref_inc = os.path.join(out_dir, "ref_include")
    os.makedirs(ref_inc, exist_ok=True)
    for name in ("st_header.h", "st_error.h", "st_error.c"):
        p = subprocess.run(["git", "-C", ROOT, "show", REFERENCE + ":core/" + name],
                           capture_output=True, check=True)
        with open(os.path.join(ref_inc, name), "wb") as f:
            f.write(p.stdout)
    objs = []
    for name, extra in ((src, []),
                        (os.path.join(ref_inc, "st_error.c"),
                         ["-Dst_status_name=st_status_name_reference"])):
        obj = os.path.join(out_dir, os.path.basename(name)[:-2] + "_ref.o")
        subprocess.run(["cc", "-I" + ref_inc] + flags + extra + ["-c", "-o", obj, name],
                       check=True)
        objs.append(obj)
    ref = os.path.join(out_dir, "driver_ref")
    # The reference's objects come first, so the library's st_header.o is never
    # pulled in.
    subprocess.run(["cc"] + flags + ["-Dst_status_name=st_status_name_reference", "-o", ref,
                                     driver] + objs + [lib] + libs, check=True)
    return new, ref


def run_driver(binary, records_path):
    with open(records_path, "rb") as f:
        p = subprocess.run([binary], stdin=f, capture_output=True, check=True)
    return p.stdout.decode().split("\n")[:-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-reference", action="store_true")
    ap.add_argument("--sanitize", action="store_true", help="build both drivers with ASan+UBSan")
    ap.add_argument("--keep", help="write each failing case to this directory")
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    passed = failed = py_checked = py_valid = 0
    stats = {}
    with tempfile.TemporaryDirectory() as tmp:
        new, ref = build(tmp, not args.no_reference, args.sanitize)
        records = os.path.join(tmp, "records")
        inputs = []
        with open(records, "wb") as f:
            for b, data_len in cases(rnd, args.cases):
                data_len = max(data_len, 0)
                inputs.append((b, data_len))
                f.write(struct.pack("<QQ", len(b), data_len) + b)
        out_new = run_driver(new, records)
        out_ref = run_driver(ref, records) if ref else None
    for i, (b, data_len) in enumerate(inputs):
        code, msg_hex, dump_hex = out_new[i].split(" ")
        stats[code] = stats.get(code, 0) + 1
        problems = []
        if out_ref is not None and out_ref[i] != out_new[i]:
            rcode, rmsg, rdump = out_ref[i].split(" ")
            problems.append("reference: %s %r, new: %s %r%s" % (
                rcode, bytes.fromhex(rmsg).decode(errors="replace"), code,
                bytes.fromhex(msg_hex).decode(errors="replace"),
                "" if rdump == dump_hex else " (parsed headers differ)"))
        msg = bytes.fromhex(msg_hex).decode(errors="replace")
        prepass = code in ("invalid_utf8", "invalid_header_start", "nesting_too_deep") or \
            b"\x00" in b
        if not prepass:
            v = py_json(b)
            py_checked += 1
            py_valid += v is not None
            is_json = code not in ("invalid_json", "duplicate_key") or "negative number" in msg
            if (v is not None) != is_json:
                problems.append("Python's json %s it, the parser says %s: %s" % (
                    "accepts" if v is not None else "refuses", code, msg))
            elif code == "ok":
                got = parse_dump(dump_hex)
                exp = py_expect(v)
                if got != exp:
                    problems.append("parsed %r, Python decodes %r" % (got, exp))
        if problems:
            failed += 1
            if failed <= 20:
                print("  case %d (%d bytes, data %d): %r" % (i, len(b), data_len, b[:300]))
                for p in problems:
                    print("    " + p[:600])
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
                with open(os.path.join(args.keep, "case-%d" % i), "wb") as f:
                    f.write(struct.pack("<Q", len(b)) + b + b"\0" * data_len)
        else:
            passed += 1
    print("  %d cases checked against Python's json too (%d of them JSON)" % (py_checked, py_valid))
    print("  statuses: " + ", ".join("%s %d" % kv for kv in sorted(stats.items(), key=lambda kv: -kv[1])))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
