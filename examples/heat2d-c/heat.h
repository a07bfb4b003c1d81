/* The heat application's numerics, shared by heat2d-plain.c and heat2d.c: the same
 * computation, row-block decomposition, halo exchange and checksum as the Rust heat2d
 * (examples/heat2d), so that both languages give bit-identical grids. */
#ifndef HEAT_H
#define HEAT_H

#include <mpi.h>

struct heat_args {
    long rows;         /* computed rows of the grid */
    long cols;         /* columns, the two boundary columns included */
    long iters;        /* iterations */
    long report_every; /* progress line on stderr every K iterations (0: none) */
};

/* One rank's rows: local_rows owned rows between two halo rows, each cols wide. */
struct heat_block {
    long rows, cols, start_row, local_rows;
    double *data;    /* (local_rows + 2) * cols values */
    double *scratch; /* the next iteration is computed into it, then the two swap */
};

/* Parses the command line (--rows, --cols, --iters, --report-every, --help) and checks
 * it against the number of ranks. Returns 0 to run; else, after MPI_Finalize, end with
 * exit status 0 for -1 (--help), the value itself otherwise (rank 0 has printed why). */
int heat_parse_args(int argc, char **argv, int rank, int size, struct heat_args *args);

/* Allocates rank's block with the initial values. Returns 0, or -1 (out of memory). */
int heat_block_init(struct heat_block *b, const struct heat_args *args, int rank, int size);

/* Number of values in the block's data (halo rows included). */
long heat_block_len(const struct heat_block *b);

/* The block's own rows, without the halos (what PCM moves in a resize, and what a
 * replacement loads: the halos come with the next exchange), and their number of values. */
double *heat_owned(const struct heat_block *b);
long heat_owned_len(const struct heat_block *b);

/* One Jacobi iteration: halo exchange with the neighbouring ranks, overlapped with the
 * rows that do not need the halos. */
void heat_step(struct heat_block *b, MPI_Comm comm);

void heat_block_free(struct heat_block *b);

/* Wall-clock seconds since the epoch (a start time that can travel with a moved rank). */
double heat_now(void);

/* Progress line on rank 0 every report_every iterations. */
void heat_progress(const struct heat_args *args, int rank, long done, long migrations);

/* Gathers the grid at rank 0, which prints the JSON report as its last stdout line
 * (migrations and resizes < 0: left out, for the plain program). "ranks" is the width
 * at the end. Collective. */
void heat_report(const struct heat_block *b, const struct heat_args *args, MPI_Comm comm,
                double seconds, long migrations, long resizes);

#endif
