#!/bin/bash
# The .debs closure proved where nothing else helps (`make test-debs-root`):
# tests/gpu/run.sh --device host inside a minimal Debian 12 root, as on a
# GPU machine that has none of tensord's libraries.
#
#   1. `debootstrap --variant=minbase bookworm` (what a container starts
#      from), then only what run.sh itself needs: python3 and python3-numpy,
#      and make, gcc and libc6-dev (run.sh builds tensord, as it does on a
#      GPU machine); no library tensord links (libcurl4, libmicrohttpd12,
#      liburing2, libyaml-0-2, ...: checked absent), no curl, no pkg-config;
#   2. `tests/gpu/run.sh --fetch-debs --no-model` on this machine (its
#      archive is bookworm too), into the root: the build's -dev packages
#      and their runtime closure, as one carries them to a GPU machine;
#   3. the sources as git has them copied in, and, in a chroot in a network
#      namespace of its own (no network: everything must be carried),
#      `tests/gpu/run.sh --device host --size-mb 64 --bench-gib 0.25` built
#      from those packages. Its "runtime closure" check fails when a library
#      the programs load comes from anywhere but the packages or the root's
#      C library; a host can neither measure the GPU targets nor be judged
#      by them, so exit 3 (SHORT) and 4 (SKIP) pass here, as in make test.
#
# As root, on a machine that reaches the Debian archive (1.5 to 2 minutes on
# 2 cores, 1 GB under $MIN_ROOT while it runs; KEEP=1 keeps the root):
#   tests/gpu/min_root.sh            # MIN_ROOT=/var/tmp/tensord-min-root
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
R=${MIN_ROOT:-/var/tmp/tensord-min-root}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
[ "$(id -u)" = 0 ] || { echo "min_root.sh: run as root" >&2; exit 2; }
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap > /dev/null
T0=$SECONDS
step() { echo "== $* ($((SECONDS - T0)) s)"; }

mounted=
cleanup() {
    for m in $mounted; do umount -l "$R$m" 2>/dev/null || true; done
    # Never remove a tree that still has the host's /dev or /proc in it.
    if grep -q " $R/" /proc/mounts; then echo "min_root.sh: $R still has mounts" >&2; return; fi
    [ -n "${KEEP:-}" ] || rm -rf "$R" "$R".*
}
trap cleanup EXIT
bind() { mkdir -p "$R$1"; mount --bind "$1" "$R$1"; mounted="$1 $mounted"; }

rm -rf "$R"
step "debootstrap --variant=minbase bookworm $R"
debootstrap --variant=minbase bookworm "$R" "$MIRROR" > "$R.debootstrap.log" 2>&1 ||
    { tail -20 "$R.debootstrap.log"; exit 1; }
cp /etc/resolv.conf "$R/etc/resolv.conf"
bind /proc; bind /dev; bind /sys
mkdir -p "$R/dev/shm"
mount -t tmpfs -o size=2g tmpfs "$R/dev/shm"; mounted="/dev/shm $mounted"
in_root() { chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
              LANG=C.UTF-8 "$@"; }
step "apt-get install python3 python3-numpy make gcc libc6-dev"
in_root apt-get update -qq
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    python3 python3-numpy make gcc libc6-dev > "$R.apt.log" 2>&1 || { tail -20 "$R.apt.log"; exit 1; }

ours="libcurl4 libmicrohttpd12 liburing2 libyaml-0-2 libssl-dev curl pkg-config pkgconf"
installed() { # the packages of "$@" installed in the root (dpkg-query fails on unknown ones)
    { in_root dpkg-query -W -f='${Package} ${Status}\n' "$@" 2>/dev/null || true; } |
        awk '/ installed$/ {print $1}' | tr '\n' ' '
}
present=$(installed $ours)
[ -z "$present" ] || { echo "min_root.sh: the root has $present"; exit 1; }

step "tests/gpu/run.sh --fetch-debs --no-model (here, into the root)"
mkdir -p "$R/src/debs" "$R/src/tensord"
"$REPO/tests/gpu/run.sh" --fetch-debs --no-model --debs "$R/src/debs" > "$R.fetch.log" 2>&1 ||
    { tail -20 "$R.fetch.log"; exit 1; }
tail -n2 "$R.fetch.log"
# The carried packages the root already has (python3's own dependencies:
# libssl3, the Kerberos libraries, ...): the binaries load the carried
# copies all the same (run.sh's runtime closure check), so these prove
# nothing either way; the rest are missing from the root.
carried=$(sed -n 's/^runtime closure: //p' "$R.fetch.log")
also=$(installed $carried)
echo "carried packages the minimal root has anyway: ${also:-none}"

(cd "$REPO" && git ls-files -z --cached --others --exclude-standard |
     tar --null -T - -cf -) | tar -C "$R/src/tensord" -xf -

step "tests/gpu/run.sh --device host in the root, no network"
rc=0
unshare --fork --kill-child --net bash -c "
    ip link set lo up
    chroot '$R' /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        TENSORD_USE_DEBS=1 bash -c 'cd /src/tensord &&
            tests/gpu/run.sh --device host --size-mb 64 --bench-gib 0.25 --debs /src/debs'" \
    > "$R.run.log" 2>&1 || rc=$?
grep -E '^(PASS|FAIL|SKIP|TARGET|HEADLINE|time:|tensord GPU check)' "$R.run.log" || true
step "run.sh exited $rc"
case "$rc" in
0|3|4) grep -q '^PASS runtime closure' "$R.run.log" ||
           { echo "min_root.sh: no runtime closure check in the run"; exit 1; }
       echo "min_root.sh: PASS in $((SECONDS - T0)) s" ;;
*) tail -40 "$R.run.log"; echo "min_root.sh: FAIL (run.sh exit $rc)"; exit 1 ;;
esac
