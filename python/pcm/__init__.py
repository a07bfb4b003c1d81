"""PCM for mpi4py programs: checkpoint and migrate the ranks of an iterative MPI job.

The same library as C's: every call goes through ctypes to libpcm (pcm.h), the C
interface of the Rust ``pcm`` crate, so a Python rank moves, checkpoints and restarts
exactly as a C or Rust rank does (docs/instrumenting-python.md). The calls are the
paper's (El Maghraoui et al., Figure 11) in Python style: communicators are mpi4py
objects, numpy arrays go to PCM and come back without copies of their own, errors are
exceptions (:class:`PcmError`)::

    import pcm                      # first: before mpi4py starts MPI
    from mpi4py import MPI

    world = pcm.init(MPI.COMM_WORLD, "myapp")   # PCM's world: use it for everything
    rank = world.Get_rank()
    grid, start = numpy.zeros(1000), 0
    if pcm.process_status() >= 0:               # a replacement, or a restart
        start = int(pcm.load(rank, "iteration", dtype=numpy.int64)[0])
        pcm.load(rank, "grid", out=grid)
    for iteration in range(start, 1000):
        status = pcm.status(world)
        if status in (pcm.MIGRATE, pcm.CHECKPOINT):
            pcm.store(rank, "iteration", iteration)
            pcm.store(rank, "grid", grid)
        if status != pcm.CONTINUE:
            world = pcm.reconfigure(world)      # does not return on a departing rank
        ...                                     # the iteration, on world
    pcm.finalize(world)

Importing this module loads libpcm into the process's global symbol scope and then
imports ``mpi4py.MPI``, whose ``MPI_Init`` and communication calls then go through
libpcm's PMPI wrappers (MPICH's settings for a prompt departure, and the traffic
profile pcmd and the IOS agents read), as for a C program linked with ``-lpcm``.

libpcm is looked for at ``$PCM_LIBRARY``, then beside this file (the wheel that
``python/build.sh`` builds carries it).
"""

import ctypes
import os
import sys
import warnings

import numpy as _np

__all__ = [
    "PcmError",
    "init",
    "process_status",
    "status",
    "store",
    "load",
    "count",
    "reconfigure",
    "finalize",
    "migrations",
    "resizes",
    "resizing",
    "set_malleable",
    "declare_block",
    "block_range",
    "store_block",
    "last_error",
    "error_string",
    "library_path",
]

__version__ = "0.1.0"

# Return codes and answers: pcm.h's values.
SUCCESS = 0
FRESH = -1
ERR_NOT_INITIALIZED = -2
ERR_ALREADY_INITIALIZED = -3
ERR_NULL = -4
ERR_ARG = -5
ERR_COMM = -6
ERR_NOT_STORED = -7
ERR_TYPE = -8
ERR_COUNT = -9
ERR_ORDER = -10
ERR_CONFIG = -11
ERR_MPI = -12
ERR_INTERNAL = -13

CONTINUE = 0
MIGRATE = 1
RECONFIGURE = 2
CHECKPOINT = 3
RESIZE = 4

SIZE_ANY = 0
SIZE_MULTIPLE_OF = 1
SIZE_POWER_OF_TWO = 2
SIZE_SQUARE = 3

# pcm.h's element types.
CHAR = 1
INT = 2
LONG = 3
FLOAT = 4
DOUBLE = 5
BYTE = 6

_CODE_NAMES = {
    value: "PCM_" + name
    for name, value in list(globals().items())
    if name.startswith("ERR_") and isinstance(value, int)
}

# numpy element types PCM stores as themselves; any other is stored as its raw bytes
# (PCM_BYTE) and loaded back into an array of the same type.
_TYPES = {
    _np.dtype(_np.int8): CHAR,
    _np.dtype(_np.int32): INT,
    _np.dtype(_np.int64): LONG,
    _np.dtype(_np.float32): FLOAT,
    _np.dtype(_np.float64): DOUBLE,
    _np.dtype(_np.uint8): BYTE,
}


class PcmError(RuntimeError):
    """A PCM call failed: ``code`` is pcm.h's ``PCM_ERR_*`` value, ``name`` its name, and
    the message PCM's own (``PCM_Last_error``), with names and sizes."""

    def __init__(self, code, message):
        self.code = code
        self.name = _CODE_NAMES.get(code, "PCM_ERR_%d" % code)
        super().__init__("%s (%s)" % (message, self.name))


def _find_library():
    given = os.environ.get("PCM_LIBRARY")
    if given:
        return given
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libpcm.so")
    if os.path.exists(bundled):
        return bundled
    raise ImportError(
        "pcm: libpcm.so is neither beside %s nor named by PCM_LIBRARY: install the wheel "
        "that python/build.sh builds, or set PCM_LIBRARY to the libpcm.so of "
        "`cargo build --release -p pcm-capi`" % os.path.dirname(os.path.abspath(__file__))
    )


def _load_library():
    if "mpi4py.MPI" in sys.modules:
        warnings.warn(
            "pcm: mpi4py.MPI was imported before pcm: its MPI calls bypass libpcm's "
            "wrappers (no traffic profile for pcmd and the agents; on MPICH a departed "
            "process may wait for the job's end). Import pcm first.",
            RuntimeWarning,
            stacklevel=3,
        )
    path = _find_library()
    # Global: mpi4py's extension, loaded next, binds MPI_Init and the communication calls
    # to libpcm's wrappers, which forward to the MPI library's PMPI_ ones.
    return path, ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


library_path, _lib = _load_library()

from mpi4py import MPI  # noqa: E402  (after libpcm, on purpose)

_c_int, _c_long, _c_char_p, _c_void_p = ctypes.c_int, ctypes.c_long, ctypes.c_char_p, ctypes.c_void_p
_P_int, _P_long = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_long)


def _prototype(name, restype, *argtypes):
    function = getattr(_lib, name)
    function.restype = restype
    function.argtypes = list(argtypes)
    return function


_PCM_Init_f = _prototype("PCM_Init_f", _c_int, _P_int, _c_char_p)
_PCM_Process_Status = _prototype("PCM_Process_Status", _c_int)
_PCM_Status_f = _prototype("PCM_Status_f", _c_int, _c_int)
_PCM_Store = _prototype("PCM_Store", _c_int, _c_int, _c_char_p, _c_void_p, _c_int, _c_long)
_PCM_Load_checked = _prototype(
    "PCM_Load_checked", _c_int, _c_int, _c_char_p, _c_void_p, _c_int, _c_long
)
_PCM_Count = _prototype("PCM_Count", _c_int, _c_int, _c_char_p, _c_int, _P_long)
_PCM_Reconfigure_f = _prototype("PCM_Reconfigure_f", _c_int, _P_int, _c_char_p)
_PCM_Finalize_f = _prototype("PCM_Finalize_f", _c_int, _c_int)
_PCM_Error_string = _prototype("PCM_Error_string", _c_char_p, _c_int)
_PCM_Last_error = _prototype("PCM_Last_error", _c_char_p)
_PCM_Migrations = _prototype("PCM_Migrations", _c_long)
_PCM_Resizes = _prototype("PCM_Resizes", _c_long)
_PCM_Resizing = _prototype("PCM_Resizing", _c_int)
_PCM_Set_malleable = _prototype("PCM_Set_malleable", _c_int, _c_int, _c_int, _c_int, _c_int)
_PCM_Declare_block = _prototype("PCM_Declare_block", _c_int, _c_char_p, _c_int, _c_long, _c_long)
_PCM_Block_range = _prototype("PCM_Block_range", _c_int, _c_char_p, _P_long, _P_long)
_PCM_Store_block = _prototype("PCM_Store_block", _c_int, _c_char_p, _c_void_p, _c_int, _c_long)

# PCM's C calls check that a communicator is its current world by handle; these are the
# mpi4py objects handed out for it (one per handle, so `is` works too).
_worlds = {}


def _check(code):
    """``code`` if it is not an error, else raises the error with PCM's message."""
    if code < 0 and code != FRESH:
        raise PcmError(code, last_error() or error_string(code))
    return code


def _name(name):
    if not isinstance(name, str):
        raise TypeError("pcm: a state name is a str, not %s" % type(name).__name__)
    return name.encode("utf-8")


def _app(app_name):
    return None if app_name is None else _name(app_name)


def _handle(comm):
    if not isinstance(comm, MPI.Comm):
        raise TypeError("pcm: comm must be an mpi4py communicator, not %s" % type(comm).__name__)
    return comm.py2f()


def _world(handle):
    comm = _worlds.get(handle)
    if comm is None:
        comm = MPI.Intracomm.f2py(handle)
        _worlds.clear()
        _worlds[handle] = comm
    return comm


def _default_app_name():
    """The script's name without .py, in the characters pcmd accepts."""
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    stem = script[:-3] if script.endswith(".py") else script
    name = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "._-") else "-" for ch in stem)
    return name.strip("-") or "python-program"


def _contiguous(value):
    """``value`` (a numpy array, anything with the buffer protocol, or a scalar) as a
    C-contiguous array, the same memory when it already is one, and its PCM type and
    element count (PCM_BYTE and the byte count for element types PCM has no name for)."""
    array = _np.ascontiguousarray(value)
    kind = _TYPES.get(array.dtype)
    if kind is None:
        return array, BYTE, array.nbytes
    return array, kind, array.size


def _pcm_type(dtype):
    dtype = _np.dtype(dtype)
    return _TYPES.get(dtype, BYTE), dtype


def init(comm=None, app_name=None):
    """``PCM_Init``: starts PCM after MPI (mpi4py started it when this module imported it).

    ``comm`` must be ``MPI.COMM_WORLD`` (the default). Returns PCM's world, an
    ``mpi4py.MPI.Intracomm``, to use for all communication from now on: a replacement
    gets the job's world here, not its own ``COMM_WORLD``. ``app_name`` names the program
    for pcmd (letters, digits, ``.``, ``-``, ``_``); default: the script's name.
    """
    handle = ctypes.c_int(_handle(MPI.COMM_WORLD if comm is None else comm))
    name = _default_app_name() if app_name is None else app_name
    # Replacements start with this interpreter as it was named, not /proc/self/exe: in a
    # virtual environment made of symlinks that is the base interpreter, which finds
    # neither the environment's packages nor this one.
    if sys.executable and os.path.isabs(sys.executable):
        os.environ.setdefault("PCM_EXECUTABLE", sys.executable)
    _check(_PCM_Init_f(ctypes.byref(handle), _app(name)))
    return _world(handle.value)


def process_status():
    """``PCM_Process_Status``: ``FRESH`` (-1) for a process started with the job, else the
    rank whose stored state to load (a replacement, a restart, a process added by a
    resize), which may be 0: test ``>= 0``."""
    return _check(_PCM_Process_Status())


def status(comm):
    """``PCM_Status``, once per iteration on every rank, with no message in flight:
    ``CONTINUE``, ``MIGRATE``, ``RECONFIGURE``, ``CHECKPOINT`` or ``RESIZE``."""
    return _check(_PCM_Status_f(_handle(comm)))


def store(rank, name, value):
    """``PCM_Store``: PCM copies ``value`` under ``name`` for the replacement or the
    checkpoint, straight from its memory when it is C-contiguous (any other array is made
    contiguous first). ``value``: a numpy array or anything with the buffer protocol, or
    a scalar (a Python ``int`` is stored as int64, a ``float`` as float64). Storing a name
    again replaces it."""
    array, kind, count = _contiguous(value)
    _check(_PCM_Store(rank, _name(name), array.ctypes.data, kind, count))


def count(rank, name, dtype=_np.float64):
    """``PCM_Count``: how many elements of ``dtype`` are stored under ``name``."""
    kind, dtype = _pcm_type(dtype)
    stored = ctypes.c_long(0)
    _check(_PCM_Count(rank, _name(name), kind, ctypes.byref(stored)))
    if kind == BYTE and dtype.itemsize != 1:
        if stored.value % dtype.itemsize:
            raise PcmError(
                ERR_COUNT,
                "state %r holds %d bytes, not a whole number of %s" % (name, stored.value, dtype),
            )
        return stored.value // dtype.itemsize
    return stored.value


def load(rank, name, out=None, dtype=None):
    """``PCM_Load``: the array stored under ``name``, handed over once (PCM frees its
    copy; a second load of the name fails with ``PCM_ERR_NOT_STORED``).

    With ``out`` (a writable C-contiguous numpy array, or a writable buffer), PCM writes
    straight into it, after checking that the stored type and element count are
    ``out``'s, and ``out`` is returned. Without, a new one-dimensional array of ``dtype``
    (required then) and of the stored length is returned. Nothing is written when it
    fails.
    """
    if out is None:
        if dtype is None:
            raise TypeError("pcm.load: give out (an array to load into) or dtype")
        out = _np.empty(count(rank, name, dtype), dtype=dtype)
        target = out
    else:
        target = _np.asarray(out)
        if not target.flags.c_contiguous or not target.flags.writeable:
            raise ValueError(
                "pcm.load: out must be a writable C-contiguous array (PCM writes into its "
                "memory)"
            )
    kind = _TYPES.get(target.dtype)
    elements = target.size if kind is not None else target.nbytes
    _check(
        _PCM_Load_checked(
            rank, _name(name), target.ctypes.data, BYTE if kind is None else kind, elements
        )
    )
    return out


def reconfigure(comm, app_name=None):
    """``PCM_Reconfigure``, on every rank when ``status`` answered anything but
    ``CONTINUE`` (collective). Returns PCM's new world (after a checkpoint: the same).

    On a departing rank it does not return: PCM hands the state over, finalizes MPI and
    ends the process with status 0. Python's buffered ``sys.stdout`` and ``sys.stderr``
    are flushed first; ``atexit`` handlers and ``finally`` blocks do not run there.

    After ``RESIZE``, :func:`resizing` tells whether the job changed width (load the
    blocks again) or the resize was refused (nothing changed).
    """
    handle = ctypes.c_int(_handle(comm))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    _check(_PCM_Reconfigure_f(ctypes.byref(handle), _app(app_name)))
    return _world(handle.value)


def finalize(comm):
    """``PCM_Finalize`` (collective over PCM's world, which it frees). MPI stays
    initialised: mpi4py finalizes it when the interpreter exits."""
    _check(_PCM_Finalize_f(_handle(comm)))
    _worlds.clear()


def migrations():
    """Reconfigurations the job has completed (0 before ``init``)."""
    return _PCM_Migrations()


def resizes():
    """Resizes the job has completed (0 before ``init``)."""
    return _PCM_Resizes()


def resizing():
    """Whether the state stored or loaded now is a resize's (``PCM_Resizing``)."""
    return bool(_PCM_Resizing())


def set_malleable(min_ranks, max_ranks, rule=SIZE_ANY, rule_arg=0):
    """``PCM_Set_malleable``: the job may run at any width from ``min_ranks`` to
    ``max_ranks`` that ``rule`` allows (``SIZE_ANY``, ``SIZE_MULTIPLE_OF`` with
    ``rule_arg``, ``SIZE_POWER_OF_TWO``, ``SIZE_SQUARE``)."""
    _check(_PCM_Set_malleable(min_ranks, max_ranks, rule, rule_arg))


def declare_block(name, dtype, rows, row_len):
    """``PCM_Declare_block``: ``name`` is a distributed array of ``rows`` rows of
    ``row_len`` elements of ``dtype`` (one PCM has a type for), in row blocks."""
    kind = _TYPES.get(_np.dtype(dtype))
    if kind is None:
        raise TypeError("pcm.declare_block: no PCM type for %s" % _np.dtype(dtype))
    _check(_PCM_Declare_block(_name(name), kind, rows, row_len))


def block_range(name):
    """``PCM_Block_range``: ``(first_row, rows)`` of this rank's block of ``name``."""
    first, rows = ctypes.c_long(0), ctypes.c_long(0)
    _check(_PCM_Block_range(_name(name), ctypes.byref(first), ctypes.byref(rows)))
    return first.value, rows.value


def store_block(name, value):
    """``PCM_Store_block``: this rank's rows of the declared block ``name``."""
    array, kind, elements = _contiguous(value)
    _check(_PCM_Store_block(_name(name), array.ctypes.data, kind, elements))


def last_error():
    """The message of the last failed PCM call on this thread ('' if none)."""
    return (_PCM_Last_error() or b"").decode("utf-8", "replace")


def error_string(code):
    """pcm.h's description of a return code."""
    return (_PCM_Error_string(code) or b"").decode("utf-8", "replace")
