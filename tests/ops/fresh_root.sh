#!/bin/bash
# The README's first five minutes on a clean Debian 12: a minbase root made
# with debootstrap (what a container starts from), `apt-get install make`
# (the README's first step on a bare system), then, in a chroot:
#   1. `make run PORT=18477` with the network: it installs what building and
#      running need, builds, and serves; the packages it added are counted
#      and none may be a test or benchmark tool or start a service;
#   2. the tour (tests/ops/tour.py) in a network namespace of its own, where
#      `make run` serves on the README's port 8077 and every tour line runs
#      as written.
# By hand, as root, on a machine that reaches the Debian archive (a few
# minutes, about 1 GB under $FRESH_ROOT):
#   tests/ops/fresh_root.sh            # FRESH_ROOT=/var/tmp/tensord-fresh-root
# KEEP=1 keeps the root afterwards. Not part of `make test` (too slow).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
R=${FRESH_ROOT:-/var/tmp/tensord-fresh-root}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
[ "$(id -u)" = 0 ] || { echo "fresh_root.sh: run as root" >&2; exit 2; }
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap

mounted=
cleanup() {
    for m in $mounted; do umount -l "$R$m" 2>/dev/null || true; done
    # Never remove a tree that still has the host's /dev or /proc in it.
    if grep -q " $R/" /proc/mounts; then echo "fresh_root.sh: $R still has mounts" >&2; return; fi
    [ -n "${KEEP:-}" ] || rm -rf "$R" "$R".*
}
trap cleanup EXIT
bind() { mkdir -p "$R$1"; mount --bind "$1" "$R$1"; mounted="$1 $mounted"; }

rm -rf "$R"
echo "== debootstrap --variant=minbase bookworm $R"
debootstrap --variant=minbase bookworm "$R" "$MIRROR" > "$R.debootstrap.log" 2>&1 ||
    { tail -20 "$R.debootstrap.log"; exit 1; }
cp /etc/resolv.conf "$R/etc/resolv.conf"
bind /proc; bind /dev; bind /dev/pts; bind /sys
in_root() { chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
              LANG=C.UTF-8 "$@"; }
in_root apt-get update -qq
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make \
    > /dev/null

# The sources as git has them (plus uncommitted edits), nothing built.
mkdir -p "$R/src/tensord"
(cd "$REPO" && git ls-files -z --cached --others --exclude-standard |
     tar --null -T - -cf -) | tar -C "$R/src/tensord" -xf -

packages() { in_root dpkg-query -W -f='${Package} ${Installed-Size}\n' | sort; }
services() { ls "$R/etc/init.d" "$R/lib/systemd/system" 2>/dev/null | grep -v ':$' | sort -u; }
packages > "$R.before"
services > "$R.services-before"

echo "== make run PORT=18477 (installs, builds, serves)"
# Its own process group (setsid), ended as one below.
setsid chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    sh -c 'cd /src/tensord && exec make run PORT=18477' > "$R.make-run.log" 2>&1 &
runpid=$!
ok=
for _ in $(seq 900); do
    if curl -sf localhost:18477/readyz > /dev/null; then ok=1; break; fi
    kill -0 $runpid 2>/dev/null || break
    sleep 1
done
curl -s localhost:18477/v1/models | head -c 200 || true; echo
kill -TERM -- "-$runpid" 2>/dev/null || true
wait $runpid || true
[ -n "$ok" ] || { tail -40 "$R.make-run.log"; echo "make run did not serve"; exit 1; }
packages > "$R.after"

added=$(comm -13 <(cut -d' ' -f1 "$R.before") <(cut -d' ' -f1 "$R.after"))
n=$(echo "$added" | wc -w)
kib=$(join <(echo "$added" | tr ' ' '\n' | sort) "$R.after" | awk '{s += $2} END {print s}')
echo "== make run installed $n packages, $((kib / 1024)) MiB installed size"
bad=$(echo "$added" | tr ' ' '\n' |
      grep -E '^(clang|python3-torch|nginx|prometheus|wrk|aria2|systemd|python3-pytest|git)$' || true)
[ -z "$bad" ] || { echo "make run installed test or bench packages: $bad"; exit 1; }
new_services=$(comm -13 "$R.services-before" <(services) | tr '\n' ' ')
echo "init scripts and systemd units make run added: ${new_services:-none}"
[ -z "$new_services" ] || { echo "make run installed a service"; exit 1; }

echo "== the tour, as written, in a network namespace of its own"
unshare --fork --kill-child --mount --net bash -c "
    ip link set lo up
    mount -t tmpfs -o mode=755 tmpfs '$R/run'
    chroot '$R' /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        python3 /src/tensord/tests/ops/tour.py --in-namespace"
