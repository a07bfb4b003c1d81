#!/usr/bin/env bash
# Installs PCM's C interface under a prefix (default /usr/local):
#   PREFIX/lib/libpcm.so, PREFIX/lib/libpcm.a, PREFIX/include/pcm.h,
#   PREFIX/lib/pkgconfig/pcm.pc
# and, when the runtime has a Fortran compiler wrapper (Open MPI's mpif90), the Fortran
# module: PREFIX/include/pcm.mod, PREFIX/lib/libpcmf.a, PREFIX/lib/pkgconfig/pcm-fortran.pc
# (mpif90 app.f90 $(pkg-config --cflags --libs pcm-fortran)).
# after building it for the runtime scripts/setup.sh selects (MPI_IOS_RUNTIME). Then
#   PKG_CONFIG_PATH=PREFIX/lib/pkgconfig mpicc app.c $(pkg-config --cflags --libs pcm)
# builds a PCM program anywhere, with that runtime's mpicc.
#
# usage: scripts/install.sh [--prefix DIR] [--from TARGET_PROFILE_DIR]
#   --from DIR  install the libraries already built in DIR (e.g. target/release) instead
#               of building them first
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=/usr/local
from=""
while [ $# -gt 0 ]; do
    case "$1" in
    --prefix) prefix="${2:?--prefix needs a directory}"; shift 2 ;;
    --prefix=*) prefix="${1#--prefix=}"; shift ;;
    --from) from="${2:?--from needs a directory}"; shift 2 ;;
    --from=*) from="${1#--from=}"; shift ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ -z "$from" ]; then
    source scripts/setup.sh
    cargo build --release --quiet -p pcm-capi
    from="$CARGO_TARGET_DIR/release"
fi
for f in libpcm.so libpcm.a; do
    if [ ! -f "$from/$f" ]; then
        echo "install.sh: $from/$f is missing (cargo build --release -p pcm-capi)" >&2
        exit 1
    fi
done
runtime="$(cat "$from/../.mpi-runtime" 2>/dev/null || echo unknown)"
mkdir -p "$prefix/lib/pkgconfig" "$prefix/include"
prefix="$(cd "$prefix" && pwd)"
install -m 0755 "$from/libpcm.so" "$prefix/lib/libpcm.so"
install -m 0644 "$from/libpcm.a" "$prefix/lib/libpcm.a"
install -m 0644 pcm/capi/include/pcm.h "$prefix/include/pcm.h"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" -e "s|@RUNTIME@|$runtime|" \
    pcm/capi/pcm.pc.in >"$prefix/lib/pkgconfig/pcm.pc"
mpif90=""
case "$runtime" in
openmpi) command -v mpif90.openmpi >/dev/null 2>&1 && mpif90=mpif90.openmpi ;;
esac
if [ -n "$mpif90" ]; then
    # The module and its wrappers, compiled by the runtime's Fortran compiler: a .mod file
    # is only readable by the compiler (and version) that wrote it.
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    "$mpif90" -O2 -c -J"$work" -o "$work/pcm.o" pcm/capi/fortran/pcm.f90
    install -m 0644 "$work/pcm.mod" "$prefix/include/pcm.mod"
    rm -f "$prefix/lib/libpcmf.a"
    ar rcs "$prefix/lib/libpcmf.a" "$work/pcm.o"
    sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" -e "s|@RUNTIME@|$runtime|" \
        pcm/capi/pcm-fortran.pc.in >"$prefix/lib/pkgconfig/pcm-fortran.pc"
    echo "installed the Fortran module ($mpif90)" >&2
else
    echo "install.sh: no Fortran module: $runtime has no Fortran compiler wrapper here" >&2
fi
echo "installed libpcm ($runtime) under $prefix" >&2
