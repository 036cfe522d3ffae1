#!/bin/sh
# `make config`: decides once what the build needs to know about this
# machine and writes it as make variables to the file named by $1 (the
# Makefile's $(BUILD)/config.mk), which every later make reads instead of
# asking pkg-config and probing cuda.h again (nginx's auto/configure does
# the same into objs/ngx_auto_config.h). The Makefile passes what it
# decides from (see "Configuration" there):
#   CC, CPPFLAGS       the compiler (recorded with its version) and the
#                      user's preprocessor flags (the DLPack probe uses them)
#   PKG_MIN            lib:min:deb ... the libraries the daemon and the client
#                      need, each checked against its oldest usable version
#   TEST_PKG_MIN       the same for the tests' own libraries (jansson): one
#                      missing is recorded, and said when a test is built
#   GIVEN              1 when PKG_CFLAGS and PKG_LIBS were named on the command
#                      line (tests/gpu/run.sh's unpacked .debs): the caller
#                      vouches for the libraries, pkg-config may not see them
#   CUDA               auto, yes or no; CUDA_PROBE the Makefile's probe ("ok DIR
#                      VERSION", "old DIR VERSION" or ""), CUDA_NOT_FOUND why
#                      none will do
#   INPUTS             what the decisions were made from, recorded so that the
#                      Makefile remakes the file when one of them changes
# Fails, writing nothing, naming each library that is missing or too old
# with its Debian package.
set -u
out=$1
tmp=$out.tmp.$$
trap 'rm -f "$tmp"' EXIT

# A make variable's value: '$' and '#' escaped, so that make reads back the
# same text.
mkvalue() { printf '%s' "$1" | sed -e 's/\$/$$/g' -e 's/#/\\#/g'; }
var() { printf '%s := %s\n' "$1" "$(mkvalue "$2")" >> "$tmp"; }

# lib:min:deb ... -> "\n  lib >= min: why (Debian: deb)" for each that will not do.
check_libs() {
    bad=
    for m in $1; do
        lib=${m%%:*} rest=${m#*:}
        min=${rest%%:*} deb=${rest#*:}
        if ! pkg-config --exists "$lib"; then
            bad="$bad\n  $lib >= $min: not found (Debian: $deb)"
        elif ! pkg-config --atleast-version="$min" "$lib"; then
            bad="$bad\n  $lib >= $min: found $(pkg-config --modversion "$lib") (Debian 12 and Ubuntu 24.04 have new enough ones)"
        fi
    done
    printf '%s' "$bad"
}

# Records each library's flags (LIB_CFLAGS_name, LIB_LIBS_name) and its .pc
# file; the sums go to the variables named $2 and $3.
record_libs() {
    cflags= libs=
    for m in $1; do
        lib=${m%%:*}
        c=$(pkg-config --cflags "$lib") l=$(pkg-config --libs "$lib")
        var "LIB_CFLAGS_$lib" "$c"
        var "LIB_LIBS_$lib" "$l"
        cflags="$cflags $c" libs="$libs $l"
        files="$files $(pkg-config --variable=pcfiledir "$lib")/$lib.pc"
    done
    var "$2" "$(echo $cflags)"
    var "$3" "$(echo $libs)"
}

: > "$tmp"
cc_path=$(command -v "${CC%% *}" 2>/dev/null) || {
    echo "tensord: the C compiler \"$CC\" is missing (Debian: apt-get install build-essential, or make deps-run)" >&2
    exit 1
}
files=$(readlink -f "$cc_path")
{
    echo "# The build's configuration, written by \`make config\` (mk/configure.sh);"
    echo "# the Makefile remakes it when one of CONFIG_INPUTS or CONFIG_FILES changes."
} >> "$tmp"
var CONFIG_INPUTS "$INPUTS"
var CONFIG_CC "$CC: $("$cc_path" --version 2>/dev/null | head -n 1)"

bad=
if [ "${GIVEN:-}" != 1 ]; then
    command -v pkg-config >/dev/null || {
        echo "tensord: pkg-config is missing (Debian: apt-get install pkg-config build-essential, or make deps-run)" >&2
        exit 1
    }
    bad=$(check_libs "$PKG_MIN")
    echo '#include <dlpack/dlpack.h>' | $CC $CPPFLAGS -E -x c - >/dev/null 2>&1 ||
        bad="$bad\n  dlpack/dlpack.h (DLPack 0.6 or newer, for the client library): not found (Debian: libdlpack-dev)"
    if [ -n "$bad" ]; then
        printf "tensord needs:$bad\n(make deps-run installs them on Debian; PKG_CONFIG_PATH finds others)\n" >&2
        exit 1
    fi
    record_libs "$PKG_MIN" PKG_CFLAGS PKG_LIBS
fi

bad=$(command -v pkg-config >/dev/null && check_libs "$TEST_PKG_MIN")
if [ -z "$bad" ] && command -v pkg-config >/dev/null; then
    record_libs "$TEST_PKG_MIN" TEST_CFLAGS TEST_LIBS
    var TEST_LIBS_MISSING ""
else
    var TEST_LIBS_MISSING "the tests need:${bad:-\n  pkg-config}\n(make deps-test installs them on Debian; PKG_CONFIG_PATH finds others)"
fi

set -- $CUDA_PROBE
case "$CUDA:${1:-}" in
yes:ok | auto:ok) with_cuda=1 ;;
yes:*)
    echo "tensord: CUDA=yes but $CUDA_NOT_FOUND" >&2
    exit 1 ;;
*) with_cuda=0 ;;
esac
var WITH_CUDA "$with_cuda"
var CUDA_INC "$([ "$with_cuda" = 1 ] && echo "$2")"
var CUDA_HEADER_VERSION "$([ "$with_cuda" = 1 ] && echo "$3")"
[ "$with_cuda" = 1 ] && files="$files $2/cuda.h"

var CONFIG_FILES "$(echo $files)"
mv "$tmp" "$out"
