/* A program whose communication all sits in helpers that name MPI_COMM_WORLD
 * (world_helper.c). Built as is, it is the plain program; built with -DWITH_PCM it is the
 * same program with PCM's calls added here and nothing changed in the helpers, not even
 * this file's own MPI_Comm_rank on MPI_COMM_WORLD. Moves of any rank must give the plain
 * program's numbers (tests/tests/capi.rs).
 *
 *   world-main STEPS */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <mpi.h>
#ifdef WITH_PCM
#include <pcm.h>
#endif

void world_step(double *x, long step);
void world_report(double x, long steps);

#ifdef WITH_PCM
#define CHECK(call)                                                                    \
    do {                                                                               \
        if ((call) < 0) {                                                              \
            fprintf(stderr, "world-main: %s failed: %s\n", #call, PCM_Last_error());   \
            MPI_Abort(MPI_COMM_WORLD, 1);                                              \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)
#endif

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    long steps = argc > 1 ? atol(argv[1]) : 100, step = 0;
    double x = 1.0;
#ifdef WITH_PCM
    MPI_Comm comm = MPI_COMM_WORLD;
    CHECK(PCM_Init(&comm, "world-main"));
#endif
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank); /* a replacement: its predecessor's rank */
#ifdef WITH_PCM
    if (PCM_Process_Status() >= 0) {
        CHECK(PCM_Load_checked(rank, "step", &step, PCM_LONG, 1));
        CHECK(PCM_Load_checked(rank, "x", &x, PCM_DOUBLE, 1));
    }
#endif
    for (; step < steps; step++) {
#ifdef WITH_PCM
        int status = PCM_Status(comm);
        CHECK(status);
        if (status == PCM_MIGRATE || status == PCM_CHECKPOINT) {
            CHECK(PCM_Store(rank, "step", &step, PCM_LONG, 1));
            CHECK(PCM_Store(rank, "x", &x, PCM_DOUBLE, 1));
        }
        if (status != PCM_CONTINUE) /* does not return on a departing rank */
            CHECK(PCM_Reconfigure(&comm, "world-main"));
#endif
        world_step(&x, step);
    }
    world_report(x, steps);
#ifdef WITH_PCM
    CHECK(PCM_Finalize(comm));
#endif
    MPI_Finalize();
    return 0;
}
