/* A loop written exactly like the paper's Figure 11: it answers PCM_MIGRATE and
 * PCM_RECONFIGURE, and nothing else. Run with PCM_CHECKPOINT_INTERVAL set, PCM_Status
 * returns PCM_CHECKPOINT, which this program ignores: PCM must give checkpoints up, say
 * why once, and go on (tests/tests/capi.rs). Each iteration sums the ranks' values with an
 * allreduce; rank 0 prints the total, which a migration must not change. */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <unistd.h>

#include <mpi.h>
#include <pcm.h>

#define ITERATIONS 1200

int main(int argc, char **argv) {
    MPI_Comm PCM_COMM_WORLD;
    int rank, spawnrank, pcm_status;
    long current_iteration = 0, iterations, total = 0;

    MPI_Init(&argc, &argv);
    PCM_COMM_WORLD = MPI_COMM_WORLD;
    if (PCM_Init(&PCM_COMM_WORLD, "figure11") != PCM_SUCCESS) {
        fprintf(stderr, "figure11: %s\n", PCM_Last_error());
        return 1;
    }
    MPI_Comm_rank(PCM_COMM_WORLD, &rank);
    spawnrank = PCM_Process_Status();
    if (spawnrank >= 0) {
        PCM_Load(spawnrank, "iterator", &current_iteration);
        PCM_Load(spawnrank, "total", &total);
    }
    for (iterations = current_iteration; iterations < ITERATIONS; iterations++) {
        pcm_status = PCM_Status(PCM_COMM_WORLD);
        if (pcm_status == PCM_MIGRATE) {
            PCM_Store(rank, "iterator", &iterations, PCM_LONG, 1);
            PCM_Store(rank, "total", &total, PCM_LONG, 1);
            PCM_Reconfigure(&PCM_COMM_WORLD, "figure11");
        } else if (pcm_status == PCM_RECONFIGURE) {
            PCM_Reconfigure(&PCM_COMM_WORLD, "figure11");
            MPI_Comm_rank(PCM_COMM_WORLD, &rank);
        } else if (pcm_status < 0) {
            fprintf(stderr, "figure11: PCM_Status: %s\n", PCM_Last_error());
            MPI_Abort(PCM_COMM_WORLD, 1);
        }
        long value = iterations * (rank + 1), sum = 0;
        MPI_Allreduce(&value, &sum, 1, MPI_LONG, MPI_SUM, PCM_COMM_WORLD);
        total += sum;
        usleep(1000);
    }
    MPI_Barrier(PCM_COMM_WORLD);
    if (rank == 0)
        printf("figure11: total %ld, migrations %ld\n", total, PCM_Migrations());
    PCM_Finalize(PCM_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
