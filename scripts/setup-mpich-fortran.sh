#!/usr/bin/env bash
# Fortran for the MPICH runtime: `mpif90` (and `mpifort`) in MPICH's prefix, which
# scripts/setup.sh runs (usage: setup-mpich-fortran.sh MPICH_PREFIX). Installs only what is
# missing; once installed it starts no program to check (setup.sh is sourced often).
#
# The MPICH wheel from the Python package index has no Fortran bindings. Intel MPI's wheels
# there (impi-rt, impi-devel) have them, for gfortran too: Intel MPI is MPICH-derived and
# keeps MPICH's binary interface (libmpi.so.12), so its Fortran layer, libmpifort.so.12, runs
# on MPICH's own libmpi. From the two wheels this takes libmpifort, mpif.h and the `mpi`
# module built for this gfortran (no `mpi_f08`: Intel ships that for its own compilers
# only), and builds scripts/mpich-fortran-glue.c, the few symbols libmpifort expects from
# Intel's libmpi and MPICH's lacks, as libmpifort_glue.so. A program built with this mpif90
# runs on MPICH 5.0.2 (launcher, libmpi, PCM's MPICH behaviour) like a C program; only the
# translation of Fortran calls to C calls is Intel's. Download about 132 MB (the runtime
# wheel holds all of Intel MPI), kept: about 7 MB.
set -euo pipefail
prefix="${1:?usage: setup-mpich-fortran.sh MPICH_PREFIX}"
root="$(cd "$(dirname "$0")/.." && pwd)"
IMPI_VERSION=2021.19.0
fc="${MPICH_FC:-gfortran}"
wrapper="$prefix/bin/mpif90"
# Written last into the wrapper: names what it was built from, so that another Intel MPI
# version, another compiler or an interrupted install is redone.
fc_major="$("$fc" -dumpversion 2>/dev/null | cut -d. -f1)" || fc_major=""
built="# built from: Intel MPI $IMPI_VERSION, $fc $fc_major"
if [ -n "$fc_major" ] && grep -qxF "$built" "$wrapper" 2>/dev/null &&
    [ -f "$prefix/lib/libmpifort_glue.so" ]; then
    exit 0
fi
if [ -z "$fc_major" ]; then
    echo "setup-mpich-fortran: no Fortran compiler ($fc): install gfortran" >&2
    exit 1
fi

# One installer at a time (shells sourcing setup.sh at once); the others wait for it.
exec 9>"$prefix/.fortran.lock"
flock 9
if grep -qxF "$built" "$wrapper" 2>/dev/null && [ -f "$prefix/lib/libmpifort_glue.so" ]; then
    exit 0
fi
echo "setup: installing Fortran bindings for MPICH (Intel MPI $IMPI_VERSION's, for $fc $fc_major)" >&2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$prefix/bin/pip" download --quiet --disable-pip-version-check --no-deps -d "$work" \
    "impi-rt==$IMPI_VERSION" "impi-devel==$IMPI_VERSION"
# The files wanted, out of the wheels (zip files); the module directory is the newest one
# built for a gfortran no newer than ours (a .mod file is read by the compiler that wrote
# it, or a later one).
"$prefix/bin/python3" - "$work" "$prefix" "$fc_major" <<'EOF'
import glob, os, re, shutil, sys, zipfile

work, prefix, fc_major = sys.argv[1], sys.argv[2], int(sys.argv[3])
def wheel(name):
    (path,) = glob.glob(os.path.join(work, name + "-*.whl"))
    return zipfile.ZipFile(path)
def copy(zf, member, dest):
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with zf.open(member) as src, open(dest + ".part", "wb") as out:
        shutil.copyfileobj(src, out)
    os.replace(dest + ".part", dest)

rt, devel = wheel("impi_rt"), wheel("impi_devel")
data = lambda zf: next(n for n in zf.namelist() if ".data/data/" in n).split(".data/data/")[0] + ".data/data/"
copy(rt, data(rt) + "lib/libmpifort.so.12.0.0", os.path.join(prefix, "lib/libmpifort.so.12"))
base = data(devel) + "include/"
for header in ("mpif.h", "mpiof.h"):
    copy(devel, base + header, os.path.join(prefix, "include", header))
versions = {}
for name in devel.namelist():
    m = re.fullmatch(re.escape(base) + r"mpi/gfortran/([0-9.]+)/([a-z_0-9]+\.mod)", name)
    if m:
        versions.setdefault(m.group(1), []).append(name)
usable = [v for v in versions if int(v.split(".")[0]) <= fc_major]
if not usable:
    sys.exit(f"setup-mpich-fortran: Intel MPI has no mpi module for gfortran {fc_major} or older")
chosen = max(usable, key=lambda v: [int(p) for p in v.split(".")])
moddir = os.path.join(prefix, "include", "fortran")
shutil.rmtree(moddir, ignore_errors=True)
for name in versions[chosen]:
    copy(devel, name, os.path.join(moddir, os.path.basename(name)))
license = next(n for n in devel.namelist() if n.endswith(".dist-info/LICENSE.txt"))
copy(devel, license, os.path.join(prefix, "share", "intel-mpi-LICENSE.txt"))
print(f"setup: Intel MPI's mpi module for gfortran {chosen}", file=sys.stderr)
EOF
ln -sfn libmpifort.so.12 "$prefix/lib/libmpifort.so"
"$prefix/bin/mpicc" -O2 -Wall -fPIC -shared -o "$prefix/lib/libmpifort_glue.so.part" \
    "$root/scripts/mpich-fortran-glue.c"
mv "$prefix/lib/libmpifort_glue.so.part" "$prefix/lib/libmpifort_glue.so"

# The wrapper: compiles with the module and mpif.h; links libmpifort, the glue (kept even
# where the linker drops libraries nothing names: only libmpifort names it) and MPICH's
# libmpi, with an rpath to them. -fallow-argument-mismatch as Intel's own mpif90 gives
# gfortran: the mpi module declares no interfaces for buffer arguments, and gfortran 10 and
# later reject one routine called with two buffer types in a file.
for name in mpif90 mpifort; do
    cat >"$prefix/bin/$name.part" <<EOF
#!/bin/sh
# mpif90 for MPICH from the Python package index, written by scripts/setup-mpich-fortran.sh:
# $fc with Intel MPI's mpi module and Fortran bindings (libmpifort), which run on this
# MPICH's libmpi through libmpifort_glue. \`$name -show\` prints the command.
prefix="\$(cd "\$(dirname "\$0")/.." && pwd)"
compile="-fallow-argument-mismatch -I\$prefix/include/fortran -I\$prefix/include"
link="-L\$prefix/lib -Wl,-rpath,\$prefix/lib -Wl,--no-as-needed -lmpifort -lmpifort_glue -lmpi -Wl,--as-needed"
for arg in "\$@"; do
    case "\$arg" in -c | -S | -E | -M | -MM | -fsyntax-only) link="" ;; esac
done
if [ "\${1:-}" = -show ]; then
    shift
    echo ${MPICH_FC:-gfortran} \$compile "\$@" \$link
    exit 0
fi
exec ${MPICH_FC:-gfortran} \$compile "\$@" \$link
$built
EOF
    chmod 755 "$prefix/bin/$name.part"
    mv "$prefix/bin/$name.part" "$prefix/bin/$name"
done
