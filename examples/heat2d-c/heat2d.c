/* heat2d-c: the paper's heat application in C, instrumented with PCM (Figure 11), so
 * that any rank can be moved to another host while it runs, and malleable: the job can
 * grow or shrink at an iteration boundary (docs/malleability.md). heat2d-plain.c is the
 * same program without PCM (`diff heat2d-plain.c heat2d.c`); heat.c holds the numerics.
 *
 *   mpiexec -n 4 heat2d-c --rows 1024 --cols 1024 --iters 1000
 *   PCM_SCHEDULE=500:size=3 mpiexec -n 2 heat2d-c --rows 256 --cols 256 --iters 1000
 *
 * Rank 0 prints a JSON report (with "migrations" and "resizes") as its last stdout line. */
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
    /* Any width that leaves each rank a row; heat_block_init splits the rows as PCM does. */
    CHECK(PCM_Set_malleable(1, (int)args.rows, PCM_SIZE_ANY, 0));
    CHECK(PCM_Declare_block("grid", PCM_DOUBLE, args.rows, args.cols));
    CHECK(heat_block_init(&block, &args, rank, size));
    double started = heat_now();
    if (PCM_Process_Status() >= 0) { /* a replacement, an added process, or a restart */
        CHECK(PCM_Load_checked(rank, "iteration", &start, PCM_LONG, 1));
        CHECK(PCM_Load_checked(rank, "started", &started, PCM_DOUBLE, 1));
        CHECK(PCM_Load_checked(rank, "grid", heat_owned(&block), PCM_DOUBLE, heat_owned_len(&block)));
    }

    for (long iteration = start; iteration < args.iters; iteration++) {
        int status = PCM_Status(world);
        CHECK(status < 0);
        if (status == PCM_MIGRATE || status == PCM_CHECKPOINT || status == PCM_RESIZE) {
            CHECK(PCM_Store(rank, "iteration", &iteration, PCM_LONG, 1));
            CHECK(PCM_Store(rank, "started", &started, PCM_DOUBLE, 1));
            CHECK(PCM_Store_block("grid", heat_owned(&block), PCM_DOUBLE, heat_owned_len(&block)));
        }
        /* Does not return on a departing rank; PCM_RESIZE: the rows changed, load them. */
        if (status != PCM_CONTINUE && (status = PCM_Reconfigure(&world, "heat2d-c")) == PCM_RESIZE) {
            MPI_Comm_rank(world, &rank);
            MPI_Comm_size(world, &size);
            heat_block_free(&block);
            CHECK(heat_block_init(&block, &args, rank, size));
            CHECK(PCM_Load_checked(rank, "grid", heat_owned(&block), PCM_DOUBLE, heat_owned_len(&block)));
        }
        CHECK(status < 0);
        heat_step(&block, world);
        heat_progress(&args, rank, iteration + 1, PCM_Migrations());
    }
    MPI_Barrier(world);
    heat_report(&block, &args, world, heat_now() - started, PCM_Migrations(), PCM_Resizes());

    heat_block_free(&block);
    PCM_Finalize(world);
    MPI_Finalize();
    return 0;
}
