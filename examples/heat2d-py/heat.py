"""The heat application's numerics, shared by heat2d_plain.py and heat2d.py: the grid,
row-block decomposition, halo exchange, formulas, checksum and report of the Rust heat2d
(examples/heat2d) and the C one (examples/heat2d-c), in numpy.

Every value is computed with the same floating-point operations in the same order as
those programs (``0.25 * ((up + down) + (left + right))``, no fused multiply-add), so the
Python grids are bit for bit theirs too."""

import argparse
import hashlib
import json
import os
import socket
import sys
import time

import numpy as np
from mpi4py import MPI

TOP_BOUNDARY = 100.0
OTHER_BOUNDARY = 0.0
TAG_UP = 11  # a row sent to the rank above (it fills that rank's bottom halo)
TAG_DOWN = 12  # a row sent to the rank below (it fills that rank's top halo)
# Samples of heat2d_plain.py's last_change: one every iters / SAMPLES iterations, and the last.
SAMPLES = 1024


class ArgumentError(Exception):
    """Options that cannot run; the exit status is ``code``."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ArgumentError("%s: %s" % (self.prog, message), 2)


def parse_args(argv, rank, size):
    """The options of the command line ``argv`` (``sys.argv``: --rows, --cols, --iters,
    --report-every), checked against the number of ranks as heat2d's Args::validate checks
    them. Raises ArgumentError (code 0 after
    --help, which rank 0 prints); every rank reaches the same verdict."""
    prog = os.path.basename(argv[0]) if argv else "heat2d"
    parser = _Parser(
        prog=prog,
        description="2-D heat diffusion (Jacobi) on row blocks, one per rank.",
        add_help=False,
        allow_abbrev=False,
    )
    parser.add_argument("-h", "--help", action="store_true", help="show this help")
    parser.add_argument("--rows", type=int, default=512, help="computed rows (default 512)")
    parser.add_argument(
        "--cols", type=int, default=512, help="columns, the two boundary columns included (default 512)"
    )
    parser.add_argument("--iters", type=int, default=1000, help="iterations (default 1000)")
    parser.add_argument(
        "--report-every", type=int, default=0, metavar="K", help="progress line on stderr every K iterations"
    )
    args = parser.parse_args(argv[1:])
    if args.help:
        if rank == 0:
            parser.print_help()
        raise ArgumentError("", 0)
    if min(args.rows, args.cols, args.iters, args.report_every) < 0:
        raise ArgumentError("%s: options are non-negative integers" % prog, 2)
    if args.cols < 3:
        raise ArgumentError(
            "%s: --cols %d is less than 3: two fixed boundary columns and at least one computed"
            % (prog, args.cols),
            1,
        )
    if args.rows < max(size, 1):
        raise ArgumentError(
            "%s: --rows %d is less than the number of ranks (%d): every rank needs at least one row"
            % (prog, args.rows, size),
            1,
        )
    if args.rows * args.cols > 2**31 - 1:
        raise ArgumentError("%s: --rows x --cols exceeds the MPI count limit" % prog, 1)
    return args


def initial_value(rows, cols):
    """The initial interior values of global rows ``rows`` and columns ``cols`` (exact)."""
    return ((rows[:, None] * 7 + cols[None, :] * 13) % 32).astype(np.float64) * 0.5


class Block:
    """One rank's rows: ``local_rows`` owned rows between two halo rows, ``cols`` wide.
    The first ``rows % size`` ranks own one row more."""

    def __init__(self, args, rank, size):
        base, extra = divmod(args.rows, size)
        self.rows, self.cols = args.rows, args.cols
        self.start_row = rank * base + min(rank, extra)
        self.local_rows = base + (1 if rank < extra else 0)
        self.data = self._initial()
        self.scratch = self._initial()
        self._sums = (np.empty((self.local_rows, self.cols - 2)), np.empty((self.local_rows, self.cols - 2)))

    def _initial(self):
        grid = np.full((self.local_rows + 2, self.cols), OTHER_BOUNDARY)
        if self.start_row == 0:
            grid[0, :] = TOP_BOUNDARY
        rows = np.arange(self.start_row, self.start_row + self.local_rows)
        grid[1:-1, 1:-1] = initial_value(rows, np.arange(1, self.cols - 1))
        return grid

    @property
    def owned(self):
        """The owned rows without the halos (a view: no copy), what a replacement needs."""
        return self.data[1:-1]

    def step(self, comm):
        """One Jacobi iteration: halo exchange with the ranks above and below, then the
        5-point average of every owned interior point into the other buffer, then swap."""
        rank, size = comm.Get_rank(), comm.Get_size()
        d, s, n = self.data, self.scratch, self.local_rows
        requests = []
        if rank > 0:
            requests.append(comm.Irecv(d[0], rank - 1, TAG_DOWN))
            requests.append(comm.Isend(d[1], rank - 1, TAG_UP))
        if rank + 1 < size:
            requests.append(comm.Irecv(d[n + 1], rank + 1, TAG_UP))
            requests.append(comm.Isend(d[n], rank + 1, TAG_DOWN))
        MPI.Request.Waitall(requests)
        # 0.25 * ((up + down) + (left + right)), into buffers kept from step to step.
        vertical, horizontal = self._sums
        np.add(d[:-2, 1:-1], d[2:, 1:-1], out=vertical)
        np.add(d[1:-1, :-2], d[1:-1, 2:], out=horizontal)
        np.add(vertical, horizontal, out=vertical)
        np.multiply(vertical, 0.25, out=s[1:-1, 1:-1])
        self.data, self.scratch = s, d

    def changed_in_last_step(self):
        """Whether the last step changed any owned value, bit for bit."""
        return not np.array_equal(self.data[1:-1].view(np.uint64), self.scratch[1:-1].view(np.uint64))


class Settling:
    """When the grid last changed (heat2d_plain.py's ``last_change``), sampled as heat2d's
    Settling samples it: a comparison against a grid at its fixed point cannot fail."""

    def __init__(self, iters):
        self.iters, self.every, self.last = iters, max(iters // SAMPLES, 1), 0

    def sample(self, done, block):
        if (done % self.every == 0 or done == self.iters) and block.changed_in_last_step():
            self.last = max(self.last, done)

    def last_change(self, comm):
        """The last sampled change of any rank's block. Collective."""
        return comm.allreduce(self.last, op=MPI.MAX)


class Progress:
    """A progress line on rank 0's stderr every ``--report-every`` iterations."""

    def __init__(self, args, start):
        self.every, self.total = args.report_every, args.iters
        self.since, self.since_iter = time.monotonic(), start

    def tick(self, rank, done, migrations=None):
        if rank != 0 or self.every <= 0 or done % self.every:
            return
        now = time.monotonic()
        rate = (done - self.since_iter) / (now - self.since) if now > self.since else 0.0
        self.since, self.since_iter = now, done
        line = "heat2d: iteration %d/%d %.1f it/s" % (done, self.total, rate)
        if migrations is not None:
            line += " (migrations: %d)" % migrations
        print(line, file=sys.stderr, flush=True)


def mpi_library():
    """The first line of the MPI library's version text, as the Rust heat2d reports it."""
    lines = MPI.Get_library_version().splitlines()
    return lines[0].strip() if lines else ""


def checksum(block, comm):
    """On rank 0: the hex SHA-256 of the whole grid (global row order, halos excluded,
    boundary columns included) as little-endian float64 bytes; None elsewhere. Rows are
    placed by each block's start row, whichever rank holds it. Collective."""
    placements = comm.gather((block.start_row, block.local_rows), root=0)
    if comm.Get_rank() != 0:
        comm.Gatherv(block.owned, None, root=0)
        return None
    grid = np.empty((block.rows, block.cols))
    counts = [rows * block.cols for _, rows in placements]
    displs = [start * block.cols for start, _ in placements]
    comm.Gatherv(block.owned, [grid, counts, displs, MPI.DOUBLE], root=0)
    return hashlib.sha256(grid.astype("<f8", copy=False).tobytes()).hexdigest()


def report(block, args, comm, seconds, migrations=None, resizes=None, last_change=None):
    """Rank 0 prints the JSON report, the Rust heat2d's, as its last stdout line: checksum,
    iterations, seconds, ranks, rows, cols, then migrations, resizes and the host of each
    rank (instrumented), or last_change (plain), and mpi_library. Collective."""
    digest = checksum(block, comm)
    hosts = comm.gather(socket.gethostname(), root=0) if migrations is not None else None
    if digest is None:
        return
    fields = {
        "checksum": digest,
        "iterations": args.iters,
        "seconds": seconds,
        "ranks": comm.Get_size(),
        "rows": args.rows,
        "cols": args.cols,
    }
    if migrations is not None:
        fields.update(migrations=migrations, resizes=resizes, hosts=hosts)
    fields["mpi_library"] = mpi_library()
    if last_change is not None:
        fields["last_change"] = last_change
    print(json.dumps(fields, separators=(",", ":"), ensure_ascii=False), flush=True)
