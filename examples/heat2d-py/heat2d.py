#!/usr/bin/env python3
"""heat2d.py: the paper's heat application in Python (mpi4py, numpy), instrumented with
PCM (Figure 11) so that any rank can be moved to another host while it runs.
heat2d_plain.py is the same program without PCM (`diff heat2d_plain.py heat2d.py`);
heat.py holds the numerics both use.

    mpiexec -n 4 python3 heat2d.py --rows 1024 --cols 1024 --iters 1000

Rank 0 prints a JSON report (with migrations and hosts) as its last stdout line."""
import sys
import time

import pcm  # before mpi4py starts MPI: libpcm's wrappers take its calls
from mpi4py import MPI

import heat


def main():
    world = pcm.init(MPI.COMM_WORLD)  # the job is named after the script: heat2d
    rank, size = world.Get_rank(), world.Get_size()
    try:
        args = heat.parse_args(sys.argv, rank, size)
    except heat.ArgumentError as e:
        if rank == 0 and str(e):
            print(e, file=sys.stderr)
        pcm.finalize(world)
        return e.code
    block = heat.Block(args, rank, size)
    start = 0
    started = time.time()
    if pcm.process_status() >= 0:  # a replacement, or a restart: resume where it stopped
        start = int(pcm.load(rank, "iteration", dtype=int)[0])
        started = float(pcm.load(rank, "started", dtype=float)[0])
        pcm.load(rank, "grid", out=block.owned)  # straight into the grid, no copy
    progress = heat.Progress(args, start)
    for iteration in range(start, args.iters):
        status = pcm.status(world)
        if status in (pcm.MIGRATE, pcm.CHECKPOINT):
            pcm.store(rank, "iteration", iteration)
            pcm.store(rank, "started", started)
            pcm.store(rank, "grid", block.owned)
        if status != pcm.CONTINUE:
            world = pcm.reconfigure(world)  # does not return on a departing rank
        block.step(world)
        progress.tick(rank, iteration + 1)
    world.Barrier()
    seconds = time.time() - started
    heat.report(block, args, world, seconds, pcm.migrations(), pcm.resizes())
    pcm.finalize(world)
    return 0


if __name__ == "__main__":
    sys.exit(main())
