/* malleable.c: the C interface of malleable jobs, checked from a C program
 * (tests/tests/resize_c.rs). It runs the heat application of examples/heat2d-c (heat.c)
 * with the malleable calls of pcm.h, checks on every process the answers of bad calls
 * (PCM_ERR_ARG, PCM_ERR_NULL), PCM_Block_range against the heat decomposition after every
 * start and resize, PCM_Resizing against the status, and the codes PCM_Reconfigure returns.
 *
 *   PCM_SCHEDULE=40:size=3,80:size=3 MALLEABLE_BAD_RANK=1 mpiexec -n 2 malleable --rows 90 ...
 *
 * MALLEABLE_BAD_RANK=R: at the first resize, rank R stores its rows one row short with
 * PCM_Store_block, so PCM_Reconfigure refuses that resize on every rank (PCM_SUCCESS); the
 * program checks that nothing was kept and goes on at its width.
 *
 * Rank 0 prints "malleable: checks passed, R refused" (or the number of failed checks, and
 * the program ends with 1), then the heat JSON report as its last stdout line. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "heat.h"
#include "pcm.h"

static int failures = 0;

/* Counts a failed check, naming it, the rank's line and PCM's last error. */
#define EXPECT(cond)                                                                        \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "malleable: line %d: %s failed (last PCM error: %s)\n",         \
                    __LINE__, #cond, PCM_Last_error());                                     \
            failures++;                                                                     \
        }                                                                                   \
    } while (0)

/* Ends the process on a failed call. */
#define CHECK(call)                                                                         \
    do {                                                                                    \
        if ((call) != 0) {                                                                  \
            fprintf(stderr, "malleable: %s failed: %s\n", #call, PCM_Last_error());         \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                   \
        }                                                                                   \
    } while (0)

/* PCM_Block_range of the grid names exactly the heat block's rows. */
static void expect_range(const struct heat_block *b) {
    long first = -1, rows = -1;
    EXPECT(PCM_Block_range("grid", &first, &rows) == PCM_SUCCESS);
    EXPECT(first == b->start_row && rows == b->local_rows);
}

int main(int argc, char **argv) {
    MPI_Comm world = MPI_COMM_WORLD;
    struct heat_args args;
    struct heat_block block;
    int rank, size;
    long start = 0, first = 0, rows = 0, refused = 0;
    double x = 0;

    MPI_Init(&argc, &argv);
    CHECK(PCM_Init(&world, "malleable-c"));
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &size);
    int parsed = heat_parse_args(argc, argv, rank, size, &args);
    if (parsed != 0) {
        PCM_Finalize(world);
        MPI_Finalize();
        return parsed < 0 ? 0 : parsed;
    }
    const char *bad = getenv("MALLEABLE_BAD_RANK");
    int bad_rank = bad ? atoi(bad) : -1;

    /* Bad declarations: refused with a code, nothing declared. */
    EXPECT(PCM_Set_malleable(0, 4, PCM_SIZE_ANY, 0) == PCM_ERR_ARG);
    EXPECT(PCM_Set_malleable(3, 2, PCM_SIZE_ANY, 0) == PCM_ERR_ARG);
    EXPECT(PCM_Set_malleable(-1, 2, PCM_SIZE_ANY, 0) == PCM_ERR_ARG);
    EXPECT(PCM_Set_malleable(1, 4, 9, 0) == PCM_ERR_ARG);
    EXPECT(PCM_Set_malleable(1, 4, PCM_SIZE_MULTIPLE_OF, 0) == PCM_ERR_ARG);
    EXPECT(PCM_Declare_block("grid", PCM_DOUBLE, 0, args.cols) == PCM_ERR_ARG);
    EXPECT(PCM_Declare_block("grid", PCM_DOUBLE, args.rows, -1) == PCM_ERR_ARG);
    EXPECT(PCM_Declare_block("grid", 42, args.rows, args.cols) == PCM_ERR_ARG);
    EXPECT(PCM_Declare_block(NULL, PCM_DOUBLE, args.rows, args.cols) == PCM_ERR_NULL);
    EXPECT(PCM_Declare_block("", PCM_DOUBLE, args.rows, args.cols) == PCM_ERR_ARG);
    int fresh = PCM_Process_Status() < 0;
    if (fresh) { /* an added process or a replacement inherits the job's declarations */
        EXPECT(PCM_Block_range("grid", &first, &rows) == PCM_ERR_ARG);
        EXPECT(PCM_Store_block("grid", &x, PCM_DOUBLE, 1) == PCM_ERR_ARG);
    }

    CHECK(PCM_Set_malleable(1, (int)args.rows, PCM_SIZE_ANY, 0));
    CHECK(PCM_Declare_block("grid", PCM_DOUBLE, args.rows, args.cols));
    /* Again with the same values: fine (an added process does it too); with others: not. */
    EXPECT(PCM_Set_malleable(1, (int)args.rows, PCM_SIZE_ANY, 0) == PCM_SUCCESS);
    EXPECT(PCM_Set_malleable(1, (int)args.rows, PCM_SIZE_POWER_OF_TWO, 0) == PCM_ERR_ARG);
    EXPECT(PCM_Declare_block("grid", PCM_DOUBLE, args.rows + 1, args.cols) == PCM_ERR_ARG);
    EXPECT(PCM_Declare_block("grid", PCM_FLOAT, args.rows, args.cols) == PCM_ERR_ARG);
    EXPECT(PCM_Block_range("grid", NULL, &rows) == PCM_ERR_NULL);
    EXPECT(PCM_Block_range("nosuch", &first, &rows) == PCM_ERR_ARG);
    EXPECT(PCM_Store_block("grid", NULL, PCM_DOUBLE, 4) == PCM_ERR_NULL);
    EXPECT(PCM_Store_block("grid", &x, PCM_DOUBLE, -1) == PCM_ERR_ARG);

    CHECK(heat_block_init(&block, &args, rank, size));
    expect_range(&block);
    if (!fresh) { /* a replacement, an added process, or a restart */
        EXPECT(PCM_Resizes() >= 0);
        CHECK(PCM_Load_checked(rank, "iteration", &start, PCM_LONG, 1));
        CHECK(PCM_Load_checked(rank, "grid", heat_owned(&block), PCM_DOUBLE, heat_owned_len(&block)));
    }

    for (long iteration = start; iteration < args.iters; iteration++) {
        int status = PCM_Status(world);
        CHECK(status < 0);
        EXPECT(PCM_Resizing() == (status == PCM_RESIZE));
        if (status == PCM_MIGRATE || status == PCM_CHECKPOINT || status == PCM_RESIZE) {
            long count = heat_owned_len(&block);
            if (status == PCM_RESIZE && rank == bad_rank && refused == 0)
                count -= block.cols; /* one row short */
            CHECK(PCM_Store(rank, "iteration", &iteration, PCM_LONG, 1));
            CHECK(PCM_Store_block("grid", heat_owned(&block), PCM_DOUBLE, count));
        }
        int code = status == PCM_CONTINUE ? PCM_SUCCESS : PCM_Reconfigure(&world, "malleable-c");
        CHECK(code < 0);
        if (code == PCM_RESIZE) {
            EXPECT(status == PCM_RESIZE);
            MPI_Comm_rank(world, &rank);
            MPI_Comm_size(world, &size);
            heat_block_free(&block);
            CHECK(heat_block_init(&block, &args, rank, size));
            expect_range(&block);
            CHECK(PCM_Load_checked(rank, "grid", heat_owned(&block), PCM_DOUBLE,
                                   heat_owned_len(&block)));
        } else if (status == PCM_RESIZE) {
            /* Refused on every rank: the width is the same and nothing stored was kept. */
            int now = 0;
            MPI_Comm_size(world, &now);
            EXPECT(now == size);
            EXPECT(PCM_Load(rank, "grid", heat_owned(&block)) == PCM_ERR_NOT_STORED);
            refused++;
        }
        heat_step(&block, world);
    }
    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, world);
    if (rank == 0) {
        if (all == 0)
            printf("malleable: checks passed, %ld refused\n", refused);
        else
            printf("malleable: %d checks failed\n", all);
    }
    heat_report(&block, &args, world, 0.0, PCM_Migrations(), PCM_Resizes());
    heat_block_free(&block);
    PCM_Finalize(world);
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
