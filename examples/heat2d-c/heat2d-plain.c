/* heat2d-c-plain: the paper's heat application in C, plain MPI. heat2d.c is the same
 * program with PCM (`diff heat2d-plain.c heat2d.c`); heat.c holds the numerics both use.
 *
 *   mpiexec -n 4 heat2d-c-plain --rows 1024 --cols 1024 --iters 1000
 *
 * Rank 0 prints a JSON report as its last stdout line. */
#include <mpi.h>
#include <stdio.h>

#include "heat.h"

/* Ends the process on a failed call; the message names the call. */
#define CHECK(call)                                                                         \
    do {                                                                                    \
        if ((call) != 0) {                                                                  \
            fprintf(stderr, "heat2d-c: %s failed\n", #call);                                \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
        }                                                                                   \
    } while (0)

int main(int argc, char **argv) {
    MPI_Comm world = MPI_COMM_WORLD;
    struct heat_args args;
    struct heat_block block;
    int rank, size;
    long start = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    int parsed = heat_parse_args(argc, argv, rank, size, &args);
    if (parsed != 0) {
        MPI_Finalize();
        return parsed < 0 ? 0 : parsed;
    }
    CHECK(heat_block_init(&block, &args, rank, size));
    MPI_Barrier(world);
    double started = heat_now();

    for (long iteration = start; iteration < args.iters; iteration++) {
        heat_step(&block, world);
        heat_progress(&args, rank, iteration + 1, -1);
    }
    MPI_Barrier(world);
    heat_report(&block, &args, world, heat_now() - started, -1, -1);

    heat_block_free(&block);
    MPI_Finalize();
    return 0;
}
