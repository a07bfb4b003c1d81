/* Helpers written for plain MPI, as a library or another file of an application would be:
 * they name MPI_COMM_WORLD and know nothing of PCM. world_main.c calls them with and
 * without PCM; after ranks move, PCM's wrappers must hand their calls the job's current
 * world (tests/tests/capi.rs). */
#include <stdio.h>

#include <mpi.h>

/* One step: a ring exchange (MPI_Send/MPI_Recv), an all-reduce and, every 8th step, a
 * barrier, all on MPI_COMM_WORLD. Every rank's value changes at every step and depends on
 * its rank and its neighbour's, so a stale value, a wrong rank or a lost message changes
 * the final numbers. */
void world_step(double *x, long step) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double left = *x;
    int right = (rank + 1) % size, from = (rank + size - 1) % size;
    if (size > 1) {
        /* Even ranks send first, odd ranks receive first: no reliance on buffering. */
        if (rank % 2 == 0) {
            MPI_Send(x, 1, MPI_DOUBLE, right, 7, MPI_COMM_WORLD);
            MPI_Recv(&left, 1, MPI_DOUBLE, from, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&left, 1, MPI_DOUBLE, from, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(x, 1, MPI_DOUBLE, right, 7, MPI_COMM_WORLD);
        }
    }
    *x = 0.75 * *x + 0.25 * left + (double)(rank + 1) / (double)(step + 1);
    double sum = 0;
    MPI_Allreduce(x, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    *x += 1e-3 * sum;
    if (step % 8 == 0)
        MPI_Barrier(MPI_COMM_WORLD);
}

/* Rank 0 prints every rank's value (exact, as hexadecimal floats) and the world's size. */
void world_report(double x, long steps) {
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double all[64] = {0};
    if (size > 64)
        MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Gather(&x, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("result ranks %d steps %ld:", size, steps);
        for (int r = 0; r < size; r++)
            printf(" %a", all[r]);
        printf("\n");
        fflush(stdout);
    }
}
