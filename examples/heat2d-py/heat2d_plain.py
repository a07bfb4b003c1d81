#!/usr/bin/env python3
"""heat2d_plain.py: the paper's heat application on plain MPI, in Python (mpi4py, numpy).
heat2d.py is the same program with PCM (`diff heat2d_plain.py heat2d.py`); heat.py holds
the numerics both use.

    mpiexec -n 4 python3 heat2d_plain.py --rows 1024 --cols 1024 --iters 1000

Rank 0 prints a JSON report as its last stdout line (with last_change: when the grid
last changed)."""
import sys
import time

from mpi4py import MPI

import heat


def main():
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    try:
        args = heat.parse_args(sys.argv, rank, size)
    except heat.ArgumentError as e:
        if rank == 0 and str(e):
            print(e, file=sys.stderr)
        return e.code
    block = heat.Block(args, rank, size)
    start = 0
    world.Barrier()
    started = time.time()
    progress = heat.Progress(args, start)
    settling = heat.Settling(args.iters)
    for iteration in range(start, args.iters):
        block.step(world)
        settling.sample(iteration + 1, block)
        progress.tick(rank, iteration + 1)
    world.Barrier()
    seconds = time.time() - started
    heat.report(block, args, world, seconds, last_change=settling.last_change(world))
    return 0


if __name__ == "__main__":
    sys.exit(main())
