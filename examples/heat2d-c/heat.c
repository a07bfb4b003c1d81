/* See heat.h. The formulas and the order of the floating-point operations are those of
 * examples/heat2d/src/block.rs; build with -ffp-contract=off so that no multiply-add is
 * fused and the results stay bit-identical to the Rust program's. */
#define _POSIX_C_SOURCE 200809L
#include "heat.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sha256.h"

#define TOP_BOUNDARY 100.0
#define OTHER_BOUNDARY 0.0
#define TAG_UP 11
#define TAG_DOWN 12

#define USAGE                                                                          \
    "usage: %s [--rows N] [--cols N] [--iters N] [--report-every K]\n"                   \
    "  --rows N          computed rows (default 512)\n"                                  \
    "  --cols N          columns, the two boundary columns included (default 512)\n"     \
    "  --iters N         iterations (default 1000)\n"                                    \
    "  --report-every K  progress line on stderr every K iterations (default 0: none)\n"

static int parse_number(const char *option, const char *text, long *out, int rank) {
    char *end = NULL;
    errno = 0;
    long value = text ? strtol(text, &end, 10) : 0;
    if (!text || errno != 0 || end == text || *end != '\0' || value < 0) {
        if (rank == 0)
            fprintf(stderr, "heat2d-c: %s needs a non-negative integer, got %s\n", option,
                    text ? text : "nothing");
        return -1;
    }
    *out = value;
    return 0;
}

int heat_parse_args(int argc, char **argv, int rank, int size, struct heat_args *args) {
    args->rows = 512;
    args->cols = 512;
    args->iters = 1000;
    args->report_every = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            if (rank == 0)
                printf(USAGE, argv[0]);
            return -1;
        }
        static const char *const names[] = {"--rows", "--cols", "--iters", "--report-every"};
        long *const slots[] = {&args->rows, &args->cols, &args->iters, &args->report_every};
        int matched = 0;
        for (int k = 0; k < 4; k++) {
            size_t n = strlen(names[k]);
            if (strncmp(arg, names[k], n) != 0)
                continue;
            const char *value = NULL;
            if (arg[n] == '=')
                value = arg + n + 1;
            else if (arg[n] == '\0')
                value = i + 1 < argc ? argv[++i] : NULL;
            else
                continue;
            if (parse_number(names[k], value, slots[k], rank) != 0)
                return 2;
            matched = 1;
            break;
        }
        if (!matched) {
            if (rank == 0)
                fprintf(stderr, "heat2d-c: unknown argument %s\n" USAGE, arg, argv[0]);
            return 2;
        }
    }
    /* The same checks as the Rust heat2d's Args::validate. */
    const char *problem = NULL;
    if (args->cols < 3)
        problem = "--cols must be at least 3";
    else if (args->rows < (size > 1 ? size : 1))
        problem = "--rows must be at least the number of ranks";
    else if (args->rows > INT_MAX / args->cols)
        problem = "--rows times --cols exceeds the MPI count limit (2^31 - 1)";
    if (problem) {
        if (rank == 0)
            fprintf(stderr, "heat2d-c: %s\n", problem);
        return 1;
    }
    return 0;
}

long heat_block_len(const struct heat_block *b) { return (b->local_rows + 2) * b->cols; }

double *heat_owned(const struct heat_block *b) { return b->data + b->cols; }

long heat_owned_len(const struct heat_block *b) { return b->local_rows * b->cols; }

static double initial_value(long row, long col) { return (double)((row * 7 + col * 13) % 32) * 0.5; }

static void fill_initial(const struct heat_block *b, double *data) {
    long c = b->cols;
    for (long i = 0; i < heat_block_len(b); i++)
        data[i] = OTHER_BOUNDARY;
    if (b->start_row == 0)
        for (long j = 0; j < c; j++)
            data[j] = TOP_BOUNDARY;
    for (long r = 1; r <= b->local_rows; r++)
        for (long j = 1; j < c - 1; j++)
            data[r * c + j] = initial_value(b->start_row + r - 1, j);
}

int heat_block_init(struct heat_block *b, const struct heat_args *args, int rank, int size) {
    /* Row-block decomposition: the first rows % size ranks get one extra row. */
    long base = args->rows / size, extra = args->rows % size;
    b->rows = args->rows;
    b->cols = args->cols;
    b->start_row = rank * base + (rank < extra ? rank : extra);
    b->local_rows = base + (rank < extra ? 1 : 0);
    b->data = malloc(sizeof(double) * (size_t)heat_block_len(b));
    b->scratch = malloc(sizeof(double) * (size_t)heat_block_len(b));
    if (!b->data || !b->scratch) {
        heat_block_free(b);
        return -1;
    }
    fill_initial(b, b->data);
    fill_initial(b, b->scratch);
    return 0;
}

void heat_block_free(struct heat_block *b) {
    free(b->data);
    free(b->scratch);
    b->data = b->scratch = NULL;
}

/* dst row i (of n) from src rows i, i + 1, i + 2: the 5-point average of the interior. */
static void relax_rows(const double *src, double *dst, long n, long c) {
    for (long i = 0; i < n; i++) {
        const double *up = src + i * c, *mid = up + c, *down = mid + c;
        double *out = dst + i * c;
        for (long j = 1; j < c - 1; j++)
            out[j] = 0.25 * ((up[j] + down[j]) + (mid[j - 1] + mid[j + 1]));
    }
}

void heat_step(struct heat_block *b, MPI_Comm comm) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    long c = b->cols, n = b->local_rows;
    MPI_Request requests[4];
    int count = 0;
    if (rank > 0) {
        MPI_Irecv(b->data, (int)c, MPI_DOUBLE, rank - 1, TAG_DOWN, comm, &requests[count++]);
        MPI_Isend(b->data + c, (int)c, MPI_DOUBLE, rank - 1, TAG_UP, comm, &requests[count++]);
    }
    if (rank + 1 < size) {
        MPI_Irecv(b->data + (n + 1) * c, (int)c, MPI_DOUBLE, rank + 1, TAG_UP, comm,
                  &requests[count++]);
        MPI_Isend(b->data + n * c, (int)c, MPI_DOUBLE, rank + 1, TAG_DOWN, comm,
                  &requests[count++]);
    }
    /* Rows 2 .. n-1 need no halo: computed while the halos travel. */
    if (n >= 3)
        relax_rows(b->data + c, b->scratch + 2 * c, n - 2, c);
    MPI_Waitall(count, requests, MPI_STATUSES_IGNORE);
    relax_rows(b->data, b->scratch + c, 1, c);
    if (n >= 2)
        relax_rows(b->data + (n - 1) * c, b->scratch + n * c, 1, c);
    double *t = b->data;
    b->data = b->scratch;
    b->scratch = t;
}

double heat_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void heat_progress(const struct heat_args *args, int rank, long done, long migrations) {
    if (rank != 0 || args->report_every <= 0 || done % args->report_every != 0)
        return;
    if (migrations >= 0)
        fprintf(stderr, "iteration %ld/%ld (migrations: %ld)\n", done, args->iters, migrations);
    else
        fprintf(stderr, "iteration %ld/%ld\n", done, args->iters);
}

/* Writes s as a JSON string. */
static void print_json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

/* The first line of MPI_Get_library_version, trimmed, as the Rust programs report it. */
static void library_version(char *out, size_t room) {
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(text, &len);
    text[len < MPI_MAX_LIBRARY_VERSION_STRING ? len : MPI_MAX_LIBRARY_VERSION_STRING - 1] = '\0';
    char *line = text;
    while (*line == ' ' || *line == '\t' || *line == '\n')
        line++;
    size_t n = strcspn(line, "\r\n");
    while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t'))
        n--;
    if (n >= room)
        n = room - 1;
    memcpy(out, line, n);
    out[n] = '\0';
}

void heat_report(const struct heat_block *b, const struct heat_args *args, MPI_Comm comm,
                double seconds, long migrations, long resizes) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    uint64_t placement[2] = {(uint64_t)b->start_row, (uint64_t)b->local_rows};
    uint64_t *placements = rank == 0 ? malloc(sizeof(uint64_t) * 2 * (size_t)size) : NULL;
    int *counts = rank == 0 ? malloc(sizeof(int) * (size_t)size) : NULL;
    int *displs = rank == 0 ? malloc(sizeof(int) * (size_t)size) : NULL;
    double *grid = rank == 0 ? malloc(sizeof(double) * (size_t)(b->rows * b->cols)) : NULL;
    if (rank == 0 && !(placements && counts && displs && grid)) {
        fprintf(stderr, "heat2d-c: out of memory gathering the grid\n");
        MPI_Abort(comm, 1);
    }
    /* Rows are placed by each block's start row, whichever rank holds it. */
    MPI_Gather(placement, 2, MPI_UINT64_T, placements, 2, MPI_UINT64_T, 0, comm);
    if (rank == 0)
        for (int r = 0; r < size; r++) {
            counts[r] = (int)(placements[2 * r + 1] * (uint64_t)b->cols);
            displs[r] = (int)(placements[2 * r] * (uint64_t)b->cols);
        }
    MPI_Gatherv(b->data + b->cols, (int)(b->local_rows * b->cols), MPI_DOUBLE, grid, counts,
                displs, MPI_DOUBLE, 0, comm);
    /* Where each rank ended (instrumented runs), as the Rust heat2d reports it. */
    char host[MPI_MAX_PROCESSOR_NAME] = {0}, *hosts = NULL;
    if (migrations >= 0) {
        int len = 0;
        MPI_Get_processor_name(host, &len);
        hosts = rank == 0 ? calloc((size_t)size, MPI_MAX_PROCESSOR_NAME) : NULL;
        if (rank == 0 && !hosts) {
            fprintf(stderr, "heat2d-c: out of memory gathering the host names\n");
            MPI_Abort(comm, 1);
        }
        MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts, MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                   0, comm);
    }
    if (rank == 0) {
        /* SHA-256 of the values as little-endian f64 bytes (x86-64 and arm64 are). */
        struct sha256 h;
        char hex[65], mpi_library[256];
        sha256_init(&h);
        sha256_update(&h, grid, sizeof(double) * (size_t)(b->rows * b->cols));
        sha256_hex(&h, hex);
        library_version(mpi_library, sizeof mpi_library);
        printf("{\"checksum\":\"%s\",\"iterations\":%ld,\"seconds\":%.9f,\"ranks\":%d,"
               "\"rows\":%ld,\"cols\":%ld,",
               hex, args->iters, seconds, size, b->rows, b->cols);
        if (migrations >= 0) {
            printf("\"migrations\":%ld,\"hosts\":[", migrations);
            for (int r = 0; r < size; r++) {
                char *name = hosts + (size_t)r * MPI_MAX_PROCESSOR_NAME;
                name[MPI_MAX_PROCESSOR_NAME - 1] = '\0';
                if (r > 0)
                    putchar(',');
                print_json_string(name);
            }
            printf("],");
        }
        if (resizes >= 0)
            printf("\"resizes\":%ld,", resizes);
        printf("\"mpi_library\":");
        print_json_string(mpi_library);
        printf("}\n");
        fflush(stdout);
    }
    free(placements);
    free(counts);
    free(displs);
    free(grid);
    free(hosts);
}
