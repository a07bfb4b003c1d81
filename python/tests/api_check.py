"""Checks of the pcm package's calls, run on every rank of a small job by
tests/tests/python.rs (``mpiexec -n 2 python3 python/tests/api_check.py``, PCM_DAEMON=none):
communicators in and out as mpi4py objects, numpy arrays of every element type stored and
loaded (into the caller's memory: no copy of its own), and every misuse an exception with
PCM's code and message. Rank 0 prints ``api_check: N checks passed`` as its last line; a
failed check raises AssertionError (the job then fails)."""

import numpy as np

import pcm
from mpi4py import MPI

checks = 0


def check(condition, what):
    global checks
    checks += 1
    if not condition:
        raise AssertionError(what)


def raises(code, function, *args, **kwargs):
    """``function(*args, **kwargs)`` raises PcmError with ``code`` and PCM's message."""
    try:
        function(*args, **kwargs)
    except pcm.PcmError as e:
        check(e.code == code, "%s: %s, expected code %d" % (function.__name__, e, code))
        check(str(e) and pcm.last_error() in str(e), "the message is PCM's: %s" % e)
        return e
    raise AssertionError("%s%r did not fail" % (function.__name__, args))


# Before init: codes, not crashes.
raises(pcm.ERR_NOT_INITIALIZED, pcm.status, MPI.COMM_WORLD)
raises(pcm.ERR_NOT_INITIALIZED, pcm.store, 0, "x", 1)
raises(pcm.ERR_COMM, pcm.init, MPI.COMM_SELF)

world = pcm.init(MPI.COMM_WORLD, "api-check")
check(isinstance(world, MPI.Intracomm), "init returns an mpi4py Intracomm: %r" % world)
check(world.Get_size() == MPI.COMM_WORLD.Get_size(), "PCM's world has every rank")
check(world != MPI.COMM_WORLD, "PCM's world is its own communicator")
rank, size = world.Get_rank(), world.Get_size()
raises(pcm.ERR_ALREADY_INITIALIZED, pcm.init, MPI.COMM_WORLD)
check(pcm.process_status() == pcm.FRESH, "a process of the launch is fresh")
check(pcm.status(world) == pcm.CONTINUE, "nothing scheduled: continue")
raises(pcm.ERR_COMM, pcm.status, MPI.COMM_WORLD)
raises(pcm.ERR_ORDER, pcm.reconfigure, world)
check(world.allreduce(rank + 1) == size * (size + 1) // 2, "PCM's world communicates")
try:
    pcm.status("not a communicator")
    check(False, "a str is no communicator")
except TypeError:
    check(True, "")

# Every element type: the five PCM names, and others as their raw bytes.
for dtype in (np.int8, np.int32, np.int64, np.float32, np.float64, np.uint8, np.uint16, np.complex128):
    stored = (np.arange(12) * 3 - 7).astype(dtype).reshape(3, 4)
    pcm.store(rank, "a", stored)
    check(pcm.count(rank, "a", dtype) == 12, "count of %s" % np.dtype(dtype))
    out = np.zeros((3, 4), dtype)
    check(pcm.load(rank, "a", out=out) is out, "load returns out")
    check(np.array_equal(out, stored), "%s round trip: %r" % (np.dtype(dtype), out))
    raises(pcm.ERR_NOT_STORED, pcm.load, rank, "a", out=out)  # handed over once

# Scalars, and loads into a new array of the stored length.
pcm.store(rank, "iteration", 123456789012)
pcm.store(rank, "started", 2.5)
iteration = pcm.load(rank, "iteration", dtype=int)
check(iteration.dtype == np.int64 and iteration.tolist() == [123456789012], repr(iteration))
started = pcm.load(rank, "started", dtype=float)
check(started.dtype == np.float64 and started.tolist() == [2.5], repr(started))
pcm.store(rank, "raw", np.arange(5, dtype=np.uint16))
check(pcm.load(rank, "raw", dtype=np.uint16).tolist() == list(range(5)), "raw bytes back")
try:
    pcm.load(rank, "nothing")
    check(False, "load without out or dtype")
except TypeError:
    check(True, "")

# A non-contiguous array is stored as its contiguous copy.
strided = np.arange(20.0).reshape(4, 5)[:, ::2]
pcm.store(rank, "strided", strided)
out = np.empty((4, 3))
pcm.load(rank, "strided", out=out)
check(np.array_equal(out, strided), "strided round trip")

# Loads go straight into the caller's memory: rows of a larger grid, as heat2d's owned rows.
grid = np.zeros((5, 4))
pcm.store(rank, "rows", np.full((3, 4), 7.0))
rows = grid[1:4]
pcm.load(rank, "rows", out=rows)
check(grid[1:4].sum() == 84.0 and grid[0].sum() == 0.0 and grid[4].sum() == 0.0, repr(grid))
check(np.shares_memory(rows, grid), "loaded in place")

# Mismatches and misuse: codes with PCM's reason, and nothing written.
pcm.store(rank, "d", np.arange(4.0))
wrong = np.full(5, -1.0)
e = raises(pcm.ERR_COUNT, pcm.load, rank, "d", out=wrong)
check("4" in str(e) and "5" in str(e), "the message gives both counts: %s" % e)
check((wrong == -1.0).all(), "nothing written on a failed load")
raises(pcm.ERR_TYPE, pcm.load, rank, "d", out=np.zeros(4, np.float32))
check(pcm.load(rank, "d", dtype=float).tolist() == [0.0, 1.0, 2.0, 3.0], "still stored after a refused load")
readonly = np.zeros(4)
readonly.flags.writeable = False
pcm.store(rank, "d", np.arange(4.0))
for bad in (readonly, np.zeros((4, 2))[:, 0]):
    try:
        pcm.load(rank, "d", out=bad)
        check(False, "load into a read-only or strided array")
    except ValueError:
        check(True, "")
raises(pcm.ERR_ARG, pcm.store, rank + 1, "x", 1)
raises(pcm.ERR_ARG, pcm.store, rank, "", 1)
raises(pcm.ERR_NOT_STORED, pcm.load, rank, "never", dtype=float)
check(pcm.error_string(pcm.ERR_COUNT) != "", "error_string")

# Malleable declarations: PCM's row blocks.
pcm.set_malleable(1, 8)
pcm.declare_block("g", np.float64, 10, 3)
base, extra = divmod(10, size)
expected = (rank * base + min(rank, extra), base + (1 if rank < extra else 0))
check(pcm.block_range("g") == expected, "block_range %r, expected %r" % (pcm.block_range("g"), expected))
raises(pcm.ERR_ARG, pcm.block_range, "undeclared")
raises(pcm.ERR_ARG, pcm.set_malleable, 3, 2)
check(pcm.migrations() == 0 and pcm.resizes() == 0 and not pcm.resizing(), "no reconfiguration")

pcm.finalize(world)
raises(pcm.ERR_NOT_INITIALIZED, pcm.status, world)
if rank == 0:
    print("api_check: %d checks passed on %d ranks" % (checks, size), flush=True)
