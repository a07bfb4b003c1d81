/* heat2d-c: the paper's heat application in C, instrumented with PCM (Figure 11), so
 * that any rank can be moved to another host while it runs. heat2d-plain.c is the same
 * program without PCM (`diff heat2d-plain.c heat2d.c`); heat.c holds the numerics.
 *
 *   mpiexec -n 4 heat2d-c --rows 1024 --cols 1024 --iters 1000
 *
 * Rank 0 prints a JSON report (with "migrations") as its last stdout line. */
#include <mpi.h>
#include <stdio.h>

#include "heat.h"
#include "pcm.h"

/* Ends the process on a failed call; the message names the call (and PCM's reason). */
#define CHECK(call)                                                                         \
    do {                                                                                    \
        if ((call) != 0) {                                                                  \
            fprintf(stderr, "heat2d-c: %s failed: %s\n", #call, PCM_Last_error());          \
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
    CHECK(PCM_Init(&world, "heat2d-c"));
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    int parsed = heat_parse_args(argc, argv, rank, size, &args);
    if (parsed != 0) {
        PCM_Finalize(world);
        MPI_Finalize();
        return parsed < 0 ? 0 : parsed;
    }
    CHECK(heat_block_init(&block, &args, rank, size));
    double started = heat_now();
    int spawnrank = PCM_Process_Status();
    if (spawnrank >= 0) { /* a replacement, or a restart from a checkpoint */
        CHECK(PCM_Load_checked(spawnrank, "iteration", &start, PCM_LONG, 1));
        CHECK(PCM_Load_checked(spawnrank, "started", &started, PCM_DOUBLE, 1));
        CHECK(PCM_Load_checked(spawnrank, "grid", block.data, PCM_DOUBLE, heat_block_len(&block)));
    }

    for (long iteration = start; iteration < args.iters; iteration++) {
        int status = PCM_Status(world);
        CHECK(status < 0);
        if (status == PCM_MIGRATE || status == PCM_CHECKPOINT) {
            CHECK(PCM_Store(rank, "iteration", &iteration, PCM_LONG, 1));
            CHECK(PCM_Store(rank, "started", &started, PCM_DOUBLE, 1));
            CHECK(PCM_Store(rank, "grid", block.data, PCM_DOUBLE, heat_block_len(&block)));
        }
        if (status != PCM_CONTINUE) /* does not return on a departing rank */
            CHECK(PCM_Reconfigure(&world, "heat2d-c"));
        heat_step(&block, world);
        heat_progress(&args, rank, iteration + 1, PCM_Migrations());
    }
    MPI_Barrier(world);
    heat_report(&block, &args, world, heat_now() - started, PCM_Migrations());

    heat_block_free(&block);
    PCM_Finalize(world);
    MPI_Finalize();
    return 0;
}
