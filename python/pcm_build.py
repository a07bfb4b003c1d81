"""Builds the wheel of PCM's Python package: ``pcm/`` with the libpcm.so of one MPI runtime
inside (libpcm links that runtime's MPI library, so a wheel serves one runtime, named in
its local version: ``0.1.0+mpich``, ``0.1.0+openmpi``).

A PEP 517 build backend with no dependencies (pyproject.toml names it), so that
``pip install python/`` works offline, and a command that python/build.sh runs::

    python3 python/pcm_build.py --libpcm TARGET/release/libpcm.so --out DIR

prints the path of the wheel it wrote. libpcm.so comes from ``--libpcm``, else the
config setting ``libpcm`` (``pip install --config-settings libpcm=PATH python/``), else
``$PCM_LIBRARY``, else ``$CARGO_TARGET_DIR/release/libpcm.so`` (``target/`` when unset).
It is built by ``cargo build --release -p pcm-capi``; its debug sections are left out of
the wheel when ``strip`` is there.
"""

import base64
import hashlib
import io
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DISTRIBUTION = "mpi_ios_pcm"
VERSION = "0.1.0"
SUMMARY = "PCM for mpi4py programs: checkpoint and migrate the ranks of an iterative MPI job (MPI/IOS)"


def _libpcm(config_settings=None, given=None):
    path = given or (config_settings or {}).get("libpcm") or os.environ.get("PCM_LIBRARY")
    if not path:
        target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
        path = os.path.join(target, "release", "libpcm.so")
    if not os.path.isfile(path):
        raise RuntimeError(
            "pcm_build: %s is missing: build it with `cargo build --release -p pcm-capi` "
            "after `source scripts/setup.sh` (python/build.sh does both)" % path
        )
    return path


def runtime_of(libpcm):
    """The MPI runtime libpcm.so is linked to, from the MPI library it names."""
    with open(libpcm, "rb") as f:
        data = f.read()
    if b"libmpi.so.12" in data:
        return "mpich"
    if b"libmpi.so.40" in data:
        return "openmpi"
    return "unknown"


def _platform_tag():
    return sysconfig.get_platform().replace("-", "_").replace(".", "_")


def _metadata(runtime):
    lines = [
        "Metadata-Version: 2.1",
        "Name: mpi-ios-pcm",
        "Version: %s+%s" % (VERSION, runtime),
        "Summary: %s" % SUMMARY,
        "License: MIT OR Apache-2.0",
        "Requires-Python: >=3.8",
        "Requires-Dist: numpy",
        "",
        "PCM's Python interface: ctypes over libpcm (pcm.h), built for %s. It needs mpi4py "
        "built against the same MPI library (pip install --no-binary mpi4py mpi4py with that "
        "runtime's mpicc as MPICC); see docs/instrumenting-python.md." % runtime,
        "",
    ]
    return "\n".join(lines)


def _stripped(libpcm, workdir):
    """A copy of libpcm without its debug sections, or libpcm itself without strip."""
    strip = shutil.which("strip")
    if strip is None:
        return libpcm
    copy = os.path.join(workdir, "libpcm.so")
    result = subprocess.run([strip, "--strip-debug", "-o", copy, libpcm], capture_output=True)
    return copy if result.returncode == 0 else libpcm


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def build(wheel_directory, libpcm):
    """Writes the wheel into wheel_directory and returns its file name."""
    runtime = runtime_of(libpcm)
    tag = "py3-none-" + _platform_tag()
    name = "%s-%s+%s-%s.whl" % (DISTRIBUTION, VERSION, runtime, tag)
    dist_info = "%s-%s+%s.dist-info" % (DISTRIBUTION, VERSION, runtime)
    with tempfile.TemporaryDirectory() as workdir:
        files = []
        package = os.path.join(HERE, "pcm")
        for entry in sorted(os.listdir(package)):
            if entry.endswith(".py") or entry == "py.typed":
                with open(os.path.join(package, entry), "rb") as f:
                    files.append(("pcm/" + entry, f.read(), 0o644))
        with open(_stripped(libpcm, workdir), "rb") as f:
            files.append(("pcm/libpcm.so", f.read(), 0o755))
        files.append((dist_info + "/METADATA", _metadata(runtime).encode(), 0o644))
        wheel = "Wheel-Version: 1.0\nGenerator: pcm_build\nRoot-Is-Purelib: false\nTag: %s\n" % tag
        files.append((dist_info + "/WHEEL", wheel.encode(), 0o644))
        files.append((dist_info + "/top_level.txt", b"pcm\n", 0o644))
        record = [_record_line(path, data) for path, data, _ in files]
        record.append(dist_info + "/RECORD,,")
        files.append((dist_info + "/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
        os.makedirs(wheel_directory, exist_ok=True)
        path = os.path.join(wheel_directory, name)
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            for member, data, mode in files:
                info = zipfile.ZipInfo(member, date_time=(2026, 1, 1, 0, 0, 0))
                info.external_attr = (0o100000 | mode) << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, data)
        with open(path + ".part", "wb") as f:
            f.write(buffer.getvalue())
        os.replace(path + ".part", path)
    return name


# PEP 517 hooks.
def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return build(wheel_directory, _libpcm(config_settings))


def main(argv):
    import argparse

    parser = argparse.ArgumentParser(description="Builds the wheel of PCM's Python package.")
    parser.add_argument("--libpcm", help="libpcm.so to put in the wheel")
    parser.add_argument("--out", required=True, help="directory for the wheel")
    args = parser.parse_args(argv)
    try:
        name = build(args.out, _libpcm(given=args.libpcm))
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    print(os.path.join(os.path.abspath(args.out), name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
