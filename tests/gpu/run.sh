#!/usr/bin/env bash
# tests/gpu/run.sh: the GPU preload and sharing check, for a machine with an
# NVIDIA GPU (`make test` runs it dry on the host backend, built from .debs).
# A check that can fail: on correctness and on the speed targets.
#
# Builds with CUDA, starts the daemon, and:
#   1. generates a sharded model (mixed dtypes, odd shapes), preloads it to
#      the GPU, opens it from two worker processes (the C client CLI, and
#      PyTorch through the Python binding), compares every tensor with what
#      the safetensors package loads from the files, evicts while both hold
#      leases (their memory must stay valid until they exit);
#   2. tensor parallelism (tests/gpu/split_check.py): a generated MLP held
#      as the two ranks of a split on the one device, each rank bound
#      zero-copy into its half of a Megatron-style split of the MLP (column-
#      then row-parallel) by a worker of its own; the halves' outputs,
#      gathered and reduced by hand, equal to the unsplit model's;
#   3. with the real model that --fetch-debs prepares (all-MiniLM-L6-v2,
#      F16, two shards), runs tests/gpu/check.py: the files through the Hub
#      endpoint, transformers' AutoModel and sentence-transformers through
#      HF_ENDPOINT against a local load (identical outputs), two workers
#      binding every parameter zero-copy with load_state_dict(assign=True),
#      an in-place write failing in its worker only, evict while leased, the
#      legacy cudaIpcMemHandle opened with cupy;
#   4. runs the preload benchmark (bench/preload.py --json): pinned copy,
#      page cache, O_DIRECT, safetensors, a copy-thread sweep, tensord's
#      first preload after a start, cold, warm and tmpfs, open p50/p99 with
#      1 and 8 workers, in one table with the ratios;
#   5. judges it all (tests/gpu/verdict.py): each check's PASS, FAIL or SKIP;
#      a HEADLINE line, the warm preload (ring already pinned, files in the
#      page cache) with its phases; one `TARGET name: value (goal) MET|SHORT`
#      line per target:
#        warm preload / pinned link                 >= 0.7
#        tmpfs preload / pinned link                >= 0.6
#        cold preload / O_DIRECT at the same depth  >= 0.9
#        first preload after a start / pinned link  >= 0.6
#        each of those four / safetensors          >= 1.0
#        open p50 and p99, 1 and 8 workers at once  < 5 ms and < 20 ms
#      and every SKIP by name (a target that cannot be measured here, e.g.
#      the link targets on the host backend; a check whose package is
#      missing). A SKIP is never a pass.
#
# Exit status:
#   0  every check ran and passed, and every target ran and is MET
#   1  a check FAILED (whatever the targets say)
#   2  it could not run: usage, missing dependencies, the build failed
#   3  every check that ran passed, and one target or more is SHORT
#   4  nothing failed or fell SHORT, but something was SKIPPED
#
# Time: about 5 minutes on a 16-core H100/H200 host with the defaults
# (docs/GPU.md "tests/gpu/run.sh" says how that is estimated); it prints
# where the time went.
#
#   tests/gpu/run.sh [--device cuda:0|GPU-UUID|host] [--size-mb N] [--bench-gib G]
#                    [--no-bench] [--debs DIR] [--keep]
#   tests/gpu/run.sh --fetch-debs [--no-model]   (where apt and pip reach their archives)
#
# --bench-gib: the benchmark's model (default 8 on a GPU, 2 on the host).
#
# Machines without a package archive: the build needs libmicrohttpd, liburing,
# OpenSSL's libcrypto, libyaml, libcurl and dlpack headers. When pkg-config does not
# find them (or TENSORD_USE_DEBS=1), the script unpacks every .deb under
# .debs/ (dpkg -x, or ar+tar where dpkg is missing) into .debs/root and builds
# and runs against that prefix: the flags come from the unpacked .pc files of
# every library the Makefile links (its PKGS), so a library added to the
# build and not to BUILD_DEBS below fails here by name. The binaries carry
# that prefix as their DT_RPATH, so they (and only they: Python, torch and
# the system's tools keep the system's libraries) load the carried
# libraries, and a check ("runtime closure", tests/gpu/debs.py) proves that
# every library they load comes from there or from the system's C library.
#
# `--fetch-debs` fills .debs/ with `apt-get download` on a machine that has
# an archive (.debs/ is git-ignored: carry it): the -dev packages of
# BUILD_DEBS and their whole runtime closure, computed from the archive by
# tests/gpu/debs.py (libcurl4 and libcurl's own libraries: libldap, librtmp,
# libssh2, libnghttp2, libpsl, libbrotli, the Kerberos libraries, ...; all
# but the C library, libc6 and what it depends on), recorded in
# .debs/closure.json. The packages are Debian 12's (glibc 2.36); they run
# on a newer glibc (Ubuntu 24.04 has 2.39), and the check says when a
# carried library needs a newer glibc than the machine has. It also
# prepares the real model of the checks (tests/gpu/prepare_model.py;
# --no-model skips it).
#
# --debs DIR uses another directory than .debs/ (make test checks the .debs
# path this way, in build/, with TENSORD_USE_DEBS=1 and --device host;
# `make test-debs-root` runs the same dry run inside a minimal Debian root
# with nothing but python3, numpy and a compiler: tests/gpu/min_root.sh).
#
# --device host runs the whole flow on the memfd backend with NumPy instead of
# PyTorch: a dry run of this script on a machine without a GPU. The checks
# and targets that need a GPU or packages the machine lacks say SKIP and why.
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
# What the build links against (their runtime closure is computed).
BUILD_DEBS="libmicrohttpd-dev liburing-dev libssl-dev libyaml-dev libcurl4-openssl-dev libdlpack-dev
zlib1g-dev"

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
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ "$FETCH" = 1 ]; then
    mkdir -p "$DEBS"
    RUNTIME=$("$PY" tests/gpu/debs.py closure --manifest "$DEBS/closure.json" $BUILD_DEBS)
    rm -f "$DEBS"/*.deb
    (cd "$DEBS" && apt-get download $BUILD_DEBS $RUNTIME)
    # The Python binding's pure-Python dependencies (client/python's
    # pyproject.toml; numpy, compiled for the machine's Python, must be
    # there already): wheels, used where the machine's Python lacks them.
    rm -rf "$DEBS/wheels"
    PYDEPS=$("$PY" - client/python/pyproject.toml <<'PYEOF'
import re, sys
deps = re.search(r"^dependencies = \[(.*?)\]", open(sys.argv[1]).read(), re.M | re.S).group(1)
print(" ".join(d for d in re.findall(r'"([^"]+)"', deps) if not d.startswith("numpy")))
PYEOF
)
    "$PY" -m pip download -q --no-deps --only-binary=:all: --dest "$DEBS/wheels" $PYDEPS ||
        echo "no wheels of $PYDEPS (pip failed): the GPU machine's Python must have them" >&2
    if [ "$MODEL_PREP" = 1 ]; then
        "$PY" "$ROOT/tests/gpu/prepare_model.py" "$DEBS/minilm"
    fi
    ls -l "$DEBS"
    echo "runtime closure: $RUNTIME"
    du -sh "$DEBS"
    exit 0
fi

say() { printf '== %s\n' "$*" >&2; }
# The checks' results, one line each, for the verdict (tests/gpu/verdict.py).
WORK=
RESULTS=
pass() { printf 'PASS %s: %s\n' "$1" "$2" | tee -a "$RESULTS"; }
fail() { printf 'FAIL %s: %s\n' "$1" "$2" | tee -a "$RESULTS" >&2; }
skip() { printf 'SKIP %s: %s\n' "$1" "$2" | tee -a "$RESULTS"; }
STATUS=      # the exit status, once decided (cannot_run, the verdict)
cannot_run() { echo "tensord GPU check: cannot run (exit 2): $*" >&2; STATUS=2; exit 2; }

# Where the time goes (printed at the end: the run must fit a GPU machine's
# budget, docs/GPU.md).
TIMES=
T_LAST=$SECONDS
took() { TIMES="${TIMES:+$TIMES, }$1 $((SECONDS - T_LAST)) s"; T_LAST=$SECONDS; }

DAEMON_PID=
HOLDERS=
cleanup() {
    local rc=$?
    if [ -n "$DAEMON_PID" ]; then kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null; fi
    for p in $HOLDERS; do kill "$p" 2>/dev/null || true; done
    if [ -n "$WORK" ]; then
        if [ "$KEEP" = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
    fi
    # A command that failed under set -e, outside any check, is a failure
    # of the check (1), never one of the statuses that mean SHORT or SKIP.
    if [ -z "$STATUS" ] && [ "$rc" != 0 ]; then
        echo "tensord GPU check: FAIL (exit 1): a step failed with status $rc" >&2
        rc=1
    fi
    exit "${STATUS:-$rc}"
}
trap cleanup EXIT

# ---- dependencies -----------------------------------------------------------
MAKE_VARS=()
P=
PKGS=$(make -s --no-print-directory print-PKGS) || cannot_run "make print-PKGS failed"
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
        cannot_run "missing build dependencies ($PKGS, dlpack) and no .deb in $DEBS;" \
             "run tests/gpu/run.sh --fetch-debs where apt works and carry .debs/"
    fi
    P="$DEBS/root"
    say "build dependencies: unpacking ${#debs[@]} packages from $DEBS into $P"
    rm -rf "$P"
    mkdir -p "$P"
    for d in "${debs[@]}"; do unpack_deb "$d" "$P"; done
    LIBDIR=$(dirname "$(find "$P" -name 'libmicrohttpd.so*' | head -n1)")
    export CPATH="$P/usr/include${CPATH:+:$CPATH}"
    export LIBRARY_PATH="$LIBDIR${LIBRARY_PATH:+:$LIBRARY_PATH}"
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
        sys.exit(f"no {pkg}.pc in the unpacked packages: add its -dev package to BUILD_DEBS "
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
) || cannot_run "the unpacked packages lack a library of the build (above)"
    # The binaries find the carried libraries by their DT_RPATH (not
    # DT_RUNPATH, which would not apply to the libraries' own dependencies:
    # libcurl's libldap, libmicrohttpd's libgnutls), not by LD_LIBRARY_PATH,
    # which would also hand Debian's libraries to Python, torch and every
    # tool this script runs.
    # Every directory of the packages that holds a shared library: Debian 12
    # still ships some in /lib (zlib1g, libcom-err2, libkeyutils1).
    RPATH=$(cd "$P" && find . -regex '\./\(usr/\)?lib\(64\)?\(/[^/]*-linux-gnu\)?/lib[^/]*\.so\.[^/]*' \
        -printf "$P/%h\n" | sed 's|/\./|/|' | sort -u | paste -sd:)
    MAKE_VARS=("PKG_CFLAGS=${PCFLAGS%%|*}" "PKG_LIBS=${PCFLAGS#*|} -Wl,--disable-new-dtags,-rpath,$RPATH")
    say "flags from $DEBS: ${MAKE_VARS[*]}"
fi

# The Python binding's dependencies that this Python lacks, from the wheels
# --fetch-debs carried (unpacked beside the packages' root).
PYDEPS_DIR="$DEBS/python"
for w in "$DEBS"/wheels/*.whl; do
    [ -e "$w" ] || continue
    mod=$(basename "$w" | cut -d- -f1 | tr '[:upper:]' '[:lower:]')
    "$PY" -c "import $mod" 2>/dev/null && continue
    say "Python: $mod from $(basename "$w")"
    "$PY" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$w" "$PYDEPS_DIR"
    case ":${PYTHONPATH:-}:" in *":$PYDEPS_DIR:"*) ;; *) export PYTHONPATH="$PYDEPS_DIR${PYTHONPATH:+:$PYTHONPATH}" ;; esac
done

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
    if [ "$CUDA_FLAG" = yes ]; then cannot_run "$msg (set CUDA_PATH or CUDA_INCLUDE)"; fi
    say "$msg: building without CUDA" ;;
*)
    msg="no cuda.h (CUDA 12.0 or newer) in \$CUDA_PATH/include, /usr/include (nvidia-cuda-dev) or the CUDA wheels (pip install nvidia-cuda-runtime-cu12)"
    if [ "$CUDA_FLAG" = yes ]; then cannot_run "$msg; set CUDA_PATH or CUDA_INCLUDE"; fi
    say "$msg: building without CUDA" ;;
esac
say "building ($BUILD, CUDA=$CUDA_FLAG)"
make -s -j"$(nproc)" BUILD="$BUILD" CUDA="$CUDA_FLAG" "${MAKE_VARS[@]}" \
    "$BUILD/tensord" "$BUILD/tensord-client" "$BUILD/libtensord-client.so" \
    "$BUILD/bench/ceil_preload" >&2 || cannot_run "the build failed"
took build

WORK=$(mktemp -d /tmp/tensord-gpu-XXXXXX)
RESULTS="$WORK/results"
: > "$RESULTS"
BENCH_JSON="$WORK/bench.json"
NO_BENCH="the preload benchmark did not run (--no-bench)"

# The verdict: what every check said, the targets from the benchmark's
# figures, the exit status. Ends the script.
finish() {
    [ -z "$DAEMON_PID" ] || { kill "$DAEMON_PID" 2>/dev/null; wait "$DAEMON_PID" 2>/dev/null || true; }
    DAEMON_PID=
    echo
    echo "time: $TIMES; total $SECONDS s"
    local rc=0
    if [ -s "$BENCH_JSON" ]; then
        "$PY" tests/gpu/verdict.py --results "$RESULTS" --bench "$BENCH_JSON" || rc=$?
    else
        "$PY" tests/gpu/verdict.py --results "$RESULTS" --no-bench "$NO_BENCH" || rc=$?
    fi
    case "$rc" in 0|1|3|4) STATUS=$rc ;; *) STATUS=1 ;; esac
    exit "$STATUS"
}

# Every library the built programs load comes from the carried packages or
# from the system's C library (tests/gpu/debs.py); only when built from them.
if [ -n "$P" ]; then
    "$PY" tests/gpu/debs.py check --root "$P" --manifest "$DEBS/closure.json" \
        "$BUILD/tensord" "$BUILD/tensord-client" "$BUILD/libtensord-client.so" \
        "$BUILD/bench/ceil_preload" >> "$RESULTS" || true
    tail -n1 "$RESULTS"
fi

# ---- model ---------------------------------------------------------------------
MODEL=gpucheck
say "generating a ${SIZE_MB} MB sharded model in $WORK/models"
"$PY" tests/gpu/make_model.py "$WORK/models/$MODEL" "$SIZE_MB"
SPLIT_MODEL=tpcheck
"$PY" tests/gpu/split_check.py make "$WORK/models/$SPLIT_MODEL"
# The real model (tests/gpu/prepare_model.py, carried in the .debs
# directory), served as a nested repo as the Hub would name it.
REAL=tensord/all-MiniLM-L6-v2
if [ -d "$DEBS/minilm" ]; then
    mkdir -p "$WORK/models/tensord"
    cp -r "$DEBS/minilm" "$WORK/models/$REAL"
fi
sync
# Drop the page cache where allowed, so the preload reads the disk.
echo 1 > /proc/sys/vm/drop_caches 2>/dev/null || true
took model

# ---- daemon --------------------------------------------------------------------
SOCK="$WORK/tensord.sock"
PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
say "starting tensord on 127.0.0.1:$PORT, leases on $SOCK"
LEGACY=()
[ "$DEVICE" = host ] || LEGACY=(--legacy-ipc true)
"$BUILD/tensord" serve --models "$WORK/models" --listen "127.0.0.1:$PORT" --ipc-socket "$SOCK" \
    --state-dir "$WORK/state" "${LEGACY[@]}" > "$WORK/tensord.log" 2>&1 &
DAEMON_PID=$!
api() { "$PY" tests/gpu/api.py "$PORT" "$@"; }
if ! api ready 20; then
    fail "daemon start" "not ready within 20 s: $(tail -n5 "$WORK/tensord.log" | tr '\n' ' ')"
    finish
fi
grep 'gpu:' "$WORK/tensord.log" >&2 || true

gpu() { api "$1" "/v1/models/$MODEL/gpu" ${2:+"$2"}; }
jget() { "$PY" -c 'import json,sys; d=json.load(sys.stdin)
for k in sys.argv[1].split("."): d = d[k] if not isinstance(d, list) else d[int(k)]
print(d)' "$1"; }

# ---- preload -------------------------------------------------------------------
say "preloading $MODEL on $DEVICE"
gpu POST "{\"device\": \"$DEVICE\"}" > "$WORK/post.json"
state=$(jget state < "$WORK/post.json" 2>/dev/null || echo error)
if [ "$state" != loading ] && [ "$state" != ready ]; then
    fail "preload" "POST answered $(head -c 300 "$WORK/post.json")"
    finish
fi
api until "/v1/models/$MODEL/gpu" 600 loading > "$WORK/state.json" || true
state=$(jget state < "$WORK/state.json" 2>/dev/null || echo unknown)
if [ "$state" != ready ]; then
    fail "preload" "ended $state: $(head -c 300 "$WORK/state.json")"
    finish
fi
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
GBPS=$("$PY" -c "print(f'{float($PRELOAD_BPS)/1e9:.2f}')")
pass "preload" "ready, $GBPS GB/s in $PRELOAD_S s (the first after a start, files dropped from the page cache where allowed: not the headline)"

# ---- worker 1: the C client ----------------------------------------------------
say "worker 1: tensord-client open (checksums over the mapped memory)"
export TENSORD_CLIENT_LIB="$ROOT/$BUILD/libtensord-client.so" PYTHONPATH="$ROOT/client/python${PYTHONPATH:+:$PYTHONPATH}"
mkfifo "$WORK/c.in"
"$BUILD/tensord-client" --socket "$SOCK" open "$MODEL" --hold < "$WORK/c.in" > "$WORK/c.out" 2>&1 &
C_PID=$!
exec 7> "$WORK/c.in"
HOLDERS="$C_PID"
for _ in $(seq 600); do grep -q '^holding' "$WORK/c.out" && break; sleep 0.1; done
C_OPEN_MS=$(sed -n 's/.* open \([0-9.]*\) ms$/\1/p' "$WORK/c.out" | head -n1)
if grep -q '^checksum: ok' "$WORK/c.out"; then
    pass "C client open" "${C_OPEN_MS:-?} ms, checksums over the mapped memory ok"
else
    fail "C client open" "$(tail -n3 "$WORK/c.out" | tr '\n' ' ')"
fi

# ---- worker 2: PyTorch (NumPy on host) through the Python binding ---------------
say "worker 2: Python binding, every tensor against the safetensors package"
mkfifo "$WORK/py.in"
"$PY" tests/gpu/worker.py "$SOCK" "$MODEL" "$WORK/models/$MODEL" "$DEVICE" < "$WORK/py.in" \
    > "$WORK/py.out" 2> "$WORK/py.err" &
PY_PID=$!
exec 8> "$WORK/py.in"
HOLDERS="$C_PID $PY_PID"
for _ in $(seq 3000); do [ -s "$WORK/py.out" ] && break; kill -0 "$PY_PID" 2>/dev/null || break; sleep 0.1; done
PY1=$(head -n1 "$WORK/py.out")
PY_OPEN_MS=$(echo "$PY1" | jget open_ms 2>/dev/null || echo 0)
PY_OK=$(echo "$PY1" | jget ok 2>/dev/null || echo 0)
PY_BAD=$(echo "$PY1" | jget bad 2>/dev/null || echo ?)
PY_KIND=$(echo "$PY1" | jget kind 2>/dev/null || echo ?)
if [ "$PY_BAD" = 0 ] && [ "$PY_OK" = "$NTENS" ]; then
    pass "Python worker open" "$(printf '%.3f' "$PY_OPEN_MS") ms, $PY_OK/$NTENS tensors ($PY_KIND) equal to the safetensors package's"
else
    fail "Python worker open" "$PY_OK equal, $PY_BAD different of $NTENS: $(tail -n5 "$WORK/py.err" | tr '\n' ' ')"
fi
LEASES=$(gpu GET | jget leases 2>/dev/null || echo "?")
if [ "$LEASES" = 2 ]; then pass "lease count" "2 leases"; else fail "lease count" "expected 2 leases, the daemon counts $LEASES"; fi

# ---- evict while leased ----------------------------------------------------------
say "evicting while both workers hold leases"
EV=$(gpu DELETE)
EV_STATE=$(echo "$EV" | jget state 2>/dev/null || echo "?")
if [ "$EV_STATE" = draining ]; then pass "evict while leased" "draining"; else fail "evict while leased" "answered $EV"; fi
if "$BUILD/tensord-client" --socket "$SOCK" open "$MODEL" > "$WORK/reopen.out" 2>&1; then
    fail "open after evict" "a new open succeeded on an evicted model"
else
    pass "open after evict" "refused: $(tail -n1 "$WORK/reopen.out")"
fi
echo 2>/dev/null >&8 || true  # worker 2 re-checks every tensor, then exits
exec 8>&-
PY_RC=0
wait "$PY_PID" || PY_RC=$?
PY2=$(sed -n 2p "$WORK/py.out")
AFTER_OK=$(echo "$PY2" | jget after_evict_ok 2>/dev/null || echo 0)
AFTER_BAD=$(echo "$PY2" | jget after_evict_bad 2>/dev/null || echo ?)
if [ "$AFTER_BAD" = 0 ] && [ "$AFTER_OK" = "$NTENS" ] && [ "$PY_RC" = 0 ]; then
    pass "memory valid after evict" "$AFTER_OK/$NTENS tensors still equal in the leasing worker"
else
    fail "memory valid after evict" "$AFTER_OK equal, $AFTER_BAD different; the worker exited $PY_RC"
fi
MID=$(gpu GET | jget state 2>/dev/null || echo "?")
echo 2>/dev/null >&7 || true  # worker 1 ends its lease
exec 7>&-
C_RC=0
wait "$C_PID" || C_RC=$?
HOLDERS=
FINAL=$(api until "/v1/models/$MODEL/gpu" 5 draining | jget state 2>/dev/null || echo "?")
if [ "$MID" = draining ] && [ "$FINAL" = none ] && [ "$C_RC" = 0 ]; then
    pass "drain" "draining with one lease left, none after the last"
else
    fail "drain" "with one lease left $MID, after the last $FINAL; the C client exited $C_RC"
fi

# ---- table -------------------------------------------------------------------------
GIB=$("$PY" -c "print(f'{$BYTES/2**30:.2f}')")
GPU_NAME=$(grep -o 'CUDA device.*' "$WORK/tensord.log" | head -n1 || true)
cat <<TABLE

tensord GPU check: device $DEVICE ($UUID) ${GPU_NAME:+- $GPU_NAME}
  model                     $MODEL: $NALLOC shards, $NTENS tensors, $GIB GiB, generation $GEN
  first preload (cold)      $GBPS GB/s ($PRELOAD_S s, $IO_MODE)
  open, C client            ${C_OPEN_MS:-?} ms
  open, Python ($PY_KIND)   $(printf '%.3f' "$PY_OPEN_MS") ms, $PY_OK/$NTENS tensors equal to safetensors
  evict while leased        $EV_STATE; memory valid in the worker: $AFTER_OK/$NTENS; one lease left: $MID; after the last: $FINAL
TABLE
took checks

# ---- tensor parallelism: two ranks on the one device, a worker each -------------------
say "tensor-parallel split of $SPLIT_MODEL: world 2 on $DEVICE, a worker per rank"
echo
"$PY" tests/gpu/split_check.py run --port "$PORT" --sock "$SOCK" --device "$DEVICE" \
    --model "$SPLIT_MODEL" --model-dir "$WORK/models/$SPLIT_MODEL" > "$WORK/split.out" 2>&1 || true
cat "$WORK/split.out"
sed -n 's/^\(PASS\|FAIL\|SKIP\) /\1 tensor-parallel\//p' "$WORK/split.out" >> "$RESULTS"
grep -q '^tensor-parallel checks:' "$WORK/split.out" ||
    fail "tensor-parallel" "tests/gpu/split_check.py ended early: $(tail -n3 "$WORK/split.out" | tr '\n' ' ')"
took "tensor parallel"

# ---- the real model: Hub clients, workers with torch, isolation, cupy ---------------
if [ -d "$WORK/models/$REAL" ]; then
    say "real-model checks on $REAL"
    echo
    # Each of its PASS/FAIL/SKIP lines is one check of the verdict.
    HF_ENDPOINT="http://127.0.0.1:$PORT" HF_HOME="$WORK/hf" HF_HUB_DISABLE_TELEMETRY=1 \
        "$PY" tests/gpu/check.py --url "http://127.0.0.1:$PORT" --sock "$SOCK" --device "$DEVICE" \
        --model-dir "$WORK/models/$REAL" --repo "$REAL" ${LEGACY:+--legacy} > "$WORK/check.out" 2>&1 || true
    cat "$WORK/check.out"
    sed -n 's/^\(PASS\|FAIL\|SKIP\) /\1 real model\//p' "$WORK/check.out" >> "$RESULTS"
    grep -q '^real-model checks:' "$WORK/check.out" ||
        fail "real model" "tests/gpu/check.py ended early: $(tail -n3 "$WORK/check.out" | tr '\n' ' ')"
else
    skip "real model" "no model in $DEBS/minilm (run --fetch-debs where the package index is reachable)"
fi
kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
DAEMON_PID=
took "real model"

# ---- the preload against the machine's limits (bench/preload.py) -----------------------
if [ "$BENCH" = 1 ]; then
    say "preload benchmark on $DEVICE"
    echo
    if "$PY" bench/preload.py --device "$DEVICE" --build "$BUILD" --json "$BENCH_JSON" \
            --size-gib "${BENCH_GIB:-$([ "$DEVICE" = host ] && echo 2 || echo 8)}"; then
        pass "preload benchmark" "every row measured"
    else
        rm -f "$BENCH_JSON"
        NO_BENCH="the preload benchmark failed"
        fail "preload benchmark" "bench/preload.py exited non-zero (its output is above)"
    fi
    took benchmark
fi
finish
