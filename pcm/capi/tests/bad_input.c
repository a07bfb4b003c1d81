/* Calls every function of pcm.h wrongly on purpose, and some rightly, and checks each
 * return code: no call may abort or crash the process. Built outside the repository
 * against the installed library by tests/tests/capi.rs:
 *
 *   mpicc bad_input.c $(pkg-config --cflags --libs pcm)
 *   mpiexec -n 2 ./a.out
 *
 * Prints "bad_input: N checks passed" on rank 0 and exits 0, or names each failed check
 * and exits 1. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <mpi.h>
#include <pcm.h>

static int checks, failures, rank = -1;

static void expect(int got, int want, const char *what, int line) {
    checks++;
    if (got != want) {
        failures++;
        printf("bad_input rank %d line %d: %s returned %d, expected %d (%s); last error: %s\n",
               rank, line, what, got, want, PCM_Error_string(want), PCM_Last_error());
    }
}
#define EXPECT(call, want) expect((call), (want), #call, __LINE__)

int main(int argc, char **argv) {
    MPI_Comm world = MPI_COMM_WORLD, self = MPI_COMM_SELF;
    int values[3] = {7, 8, 9}, loaded[3] = {0, 0, 0};
    double doubles[2] = {0.5, -1.25};
    long count = -1;
    char long_name[400];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = '\0';

    /* Before MPI_Init. */
    EXPECT(PCM_Init(&world, "bad_input"), PCM_ERR_NOT_INITIALIZED);

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);

    /* Before PCM_Init. */
    EXPECT(PCM_Process_Status(), PCM_ERR_NOT_INITIALIZED);
    EXPECT(PCM_Status(world), PCM_ERR_NOT_INITIALIZED);
    EXPECT(PCM_Store(rank, "x", values, PCM_INT, 3), PCM_ERR_NOT_INITIALIZED);
    EXPECT(PCM_Load(rank, "x", loaded), PCM_ERR_NOT_INITIALIZED);
    EXPECT(PCM_Load_checked(rank, "x", loaded, PCM_INT, 3), PCM_ERR_NOT_INITIALIZED);
    EXPECT(PCM_Count(rank, "x", PCM_INT, &count), PCM_ERR_NOT_INITIALIZED);
    EXPECT(PCM_Reconfigure(&world, "bad_input"), PCM_ERR_NOT_INITIALIZED);
    EXPECT(PCM_Finalize(world), PCM_ERR_NOT_INITIALIZED);
    EXPECT((int)PCM_Migrations(), 0);
    EXPECT(strlen(PCM_Last_error()) > 0, 1);

    /* PCM_Init with bad arguments, then rightly, then twice. */
    EXPECT(PCM_Init(NULL, "bad_input"), PCM_ERR_NULL);
    EXPECT(PCM_Init(&self, "bad_input"), PCM_ERR_COMM);
    EXPECT(PCM_Init(&world, "no spaces allowed"), PCM_ERR_ARG);
    EXPECT(PCM_Init(&world, "\xff\xfe"), PCM_ERR_ARG);
    EXPECT(PCM_Init(&world, NULL), PCM_SUCCESS);
    EXPECT(world != MPI_COMM_WORLD, 1);
    MPI_Comm world_copy = world;
    EXPECT(PCM_Init(&world_copy, "bad_input"), PCM_ERR_ALREADY_INITIALIZED);
    EXPECT(PCM_Process_Status(), PCM_FRESH);

    /* PCM_Status: only PCM's world is accepted. */
    EXPECT(PCM_Status(MPI_COMM_WORLD), PCM_ERR_COMM);
    EXPECT(PCM_Status(MPI_COMM_NULL), PCM_ERR_COMM);
    EXPECT(PCM_Status(self), PCM_ERR_COMM);
    for (int i = 0; i < 5; i++)
        EXPECT(PCM_Status(world), PCM_CONTINUE);

    /* PCM_Store. */
    EXPECT(PCM_Store(rank, NULL, values, PCM_INT, 3), PCM_ERR_NULL);
    EXPECT(PCM_Store(rank, "x", NULL, PCM_INT, 3), PCM_ERR_NULL);
    EXPECT(PCM_Store(rank, "x", values, 0, 3), PCM_ERR_ARG);
    EXPECT(PCM_Store(rank, "x", values, 99, 3), PCM_ERR_ARG);
    EXPECT(PCM_Store(rank, "x", values, -1, 3), PCM_ERR_ARG);
    EXPECT(PCM_Store(rank, "x", values, PCM_INT, -1), PCM_ERR_ARG);
    EXPECT(PCM_Store(rank, "x", values, PCM_DOUBLE, LONG_MAX), PCM_ERR_ARG);
    /* More than PCM can allocate for its copy (8 TiB): a code, not an abort. */
    EXPECT(PCM_Store(rank, "x", doubles, PCM_DOUBLE, 1L << 40), PCM_ERR_ARG);
    EXPECT(PCM_Store(rank, "x", doubles, PCM_BYTE, 1L << 46), PCM_ERR_ARG);
    EXPECT(PCM_Store(rank + 1, "x", values, PCM_INT, 3), PCM_ERR_ARG);
    EXPECT(PCM_Store(-5, "x", values, PCM_INT, 3), PCM_ERR_ARG);
    EXPECT(PCM_Store(rank, "", values, PCM_INT, 3), PCM_ERR_ARG);
    EXPECT(PCM_Store(rank, long_name, values, PCM_INT, 3), PCM_ERR_ARG);
    EXPECT(PCM_Store(rank, "\xc3\x28", values, PCM_INT, 3), PCM_ERR_ARG);
    EXPECT(PCM_Store(rank, "x", values, PCM_INT, 3), PCM_SUCCESS);
    EXPECT(PCM_Store(rank, "d", doubles, PCM_DOUBLE, 2), PCM_SUCCESS);
    EXPECT(PCM_Store(rank, "empty", NULL, PCM_BYTE, 0), PCM_SUCCESS);
    /* A misaligned buffer is copied, not rejected. */
    char bytes[sizeof(double) * 2 + 1];
    memcpy(bytes + 1, doubles, sizeof doubles);
    EXPECT(PCM_Store(rank, "unaligned", bytes + 1, PCM_DOUBLE, 2), PCM_SUCCESS);

    /* PCM_Count. */
    EXPECT(PCM_Count(rank, "x", PCM_INT, NULL), PCM_ERR_NULL);
    EXPECT(PCM_Count(rank, NULL, PCM_INT, &count), PCM_ERR_NULL);
    EXPECT(PCM_Count(rank, "nope", PCM_INT, &count), PCM_ERR_NOT_STORED);
    EXPECT(PCM_Count(rank, "x", PCM_DOUBLE, &count), PCM_ERR_TYPE);
    EXPECT(PCM_Count(rank, "x", 42, &count), PCM_ERR_ARG);
    EXPECT(PCM_Count(rank + 1, "x", PCM_INT, &count), PCM_ERR_ARG);
    EXPECT(PCM_Count(rank, "x", PCM_INT, &count), PCM_SUCCESS);
    EXPECT((int)count, 3);
    EXPECT(PCM_Count(rank, "empty", PCM_BYTE, &count), PCM_SUCCESS);
    EXPECT((int)count, 0);

    /* PCM_Load_checked and PCM_Load. */
    EXPECT(PCM_Load_checked(rank, "x", loaded, PCM_DOUBLE, 3), PCM_ERR_TYPE);
    EXPECT(PCM_Load_checked(rank, "x", loaded, PCM_INT, 2), PCM_ERR_COUNT);
    /* A negative count is an invalid argument, as in PCM_Store (pcm.h), checked first. */
    EXPECT(PCM_Load_checked(rank, "x", loaded, PCM_INT, -3), PCM_ERR_ARG);
    EXPECT(PCM_Load_checked(rank, "nope", loaded, PCM_INT, -3), PCM_ERR_ARG);
    EXPECT(PCM_Load_checked(rank, "x", loaded, 0, 3), PCM_ERR_ARG);
    EXPECT(PCM_Load_checked(rank, "nope", loaded, 0, 3), PCM_ERR_ARG);
    EXPECT(PCM_Load_checked(rank, "x", NULL, PCM_INT, 3), PCM_ERR_NULL);
    EXPECT(PCM_Load_checked(rank, "nope", loaded, PCM_INT, 3), PCM_ERR_NOT_STORED);
    EXPECT(PCM_Load_checked(rank + 1, "x", loaded, PCM_INT, 3), PCM_ERR_ARG);
    EXPECT(PCM_Load_checked(rank, NULL, loaded, PCM_INT, 3), PCM_ERR_NULL);
    EXPECT(PCM_Load(rank, NULL, loaded), PCM_ERR_NULL);
    EXPECT(PCM_Load(rank, "x", NULL), PCM_ERR_NULL);
    EXPECT(PCM_Load(rank, "nope", loaded), PCM_ERR_NOT_STORED);
    EXPECT(loaded[0] + loaded[1] + loaded[2], 0); /* nothing written by the failures */
    EXPECT(PCM_Load(rank, "x", loaded), PCM_SUCCESS);
    EXPECT(loaded[0] == 7 && loaded[1] == 8 && loaded[2] == 9, 1);
    /* The state is handed over once: PCM's copy is gone after the load. */
    EXPECT(PCM_Load(rank, "x", loaded), PCM_ERR_NOT_STORED);
    double back[2] = {0, 0};
    EXPECT(PCM_Load_checked(rank, "unaligned", back, PCM_DOUBLE, 2), PCM_SUCCESS);
    EXPECT(back[0] == 0.5 && back[1] == -1.25, 1);
    EXPECT(PCM_Load(rank, "empty", NULL), PCM_SUCCESS);
    char unaligned_out[sizeof(double) * 2 + 1];
    EXPECT(PCM_Load(rank, "d", unaligned_out + 1), PCM_SUCCESS);
    EXPECT(memcmp(unaligned_out + 1, doubles, sizeof doubles), 0);

    /* PCM_Reconfigure with nothing pending, or a wrong communicator. */
    EXPECT(PCM_Reconfigure(NULL, "bad_input"), PCM_ERR_NULL);
    EXPECT(PCM_Reconfigure(&world, "bad_input"), PCM_ERR_ORDER);
    MPI_Comm other = MPI_COMM_WORLD;
    EXPECT(PCM_Reconfigure(&other, NULL), PCM_ERR_COMM);
    EXPECT(other == MPI_COMM_WORLD, 1);
    EXPECT(PCM_Status(world), PCM_CONTINUE); /* still usable after the failures */

    /* Error strings: every code, and nonsense ones, give a C string. */
    for (int code = -20; code <= 5; code++)
        EXPECT(PCM_Error_string(code) != NULL && strlen(PCM_Error_string(code)) > 0, 1);
    EXPECT(PCM_Error_string(INT_MIN) != NULL, 1);
    EXPECT(PCM_Error_string(INT_MAX) != NULL, 1);

    /* PCM_Finalize: a wrong communicator, then rightly, then everything after it. */
    EXPECT(PCM_Finalize(MPI_COMM_WORLD), PCM_ERR_COMM);
    EXPECT(PCM_Finalize(world), PCM_SUCCESS);
    EXPECT(PCM_Finalize(world), PCM_ERR_NOT_INITIALIZED);
    EXPECT(PCM_Status(world), PCM_ERR_NOT_INITIALIZED);
    EXPECT(PCM_Process_Status(), PCM_ERR_NOT_INITIALIZED);
    EXPECT(PCM_Store(rank, "x", values, PCM_INT, 3), PCM_ERR_NOT_INITIALIZED);
    EXPECT(PCM_Load(rank, "x", loaded), PCM_ERR_NOT_INITIALIZED);
    EXPECT(PCM_Count(rank, "x", PCM_INT, &count), PCM_ERR_NOT_INITIALIZED);
    EXPECT(PCM_Reconfigure(&world, NULL), PCM_ERR_NOT_INITIALIZED);
    world = MPI_COMM_WORLD;
    EXPECT(PCM_Init(&world, "bad_input"), PCM_ERR_ALREADY_INITIALIZED);

    /* MPI is still the application's: it finalizes it. */
    int local[2] = {failures, checks}, total[2] = {0, 0};
    MPI_Allreduce(local, total, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank == 0) {
        if (total[0] == 0)
            printf("bad_input: %d checks passed\n", total[1]);
        else
            printf("bad_input: %d of %d checks failed\n", total[0], total[1]);
    }
    return total[0] == 0 ? 0 : 1;
}
