#!/bin/sh
# The images' HEALTHCHECK: GET /healthz where tensord really listens. The
# daemon is PID 1 (exec-form ENTRYPOINT); its own arguments, replayed into
# `tensord --print-config`, give the effective listen address and whether it
# serves TLS, whatever came from the config file or the command line.
# TENSORD_PID and TENSORD_BIN are for tests/ops/test_dockerfiles.py.
set -eu
pid=${TENSORD_PID:-1}
bin=${TENSORD_BIN:-/usr/local/bin/tensord}
conf=$(xargs -0 sh -c 'bin=$1; shift 2; exec "$bin" "$@" --print-config' sh "$bin" \
       < "/proc/$pid/cmdline")
value() { printf '%s\n' "$conf" | sed -n "s/^$1 = \"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p"; }
listen=$(value listen)
port=${listen##*:}
host=${listen%:*}
# An address of every interface is reached on loopback.
case $host in
  0.0.0.0) host=127.0.0.1 ;;
  "[::]") host="[::1]" ;;
esac
scheme=http
# -k: the certificate names the service, not the loopback address probed here.
insecure=
if [ -n "$(value tls_cert)" ]; then scheme=https; insecure=-k; fi
exec curl -fsS $insecure --max-time 2 -o /dev/null "$scheme://$host:$port/healthz"
