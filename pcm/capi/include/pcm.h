/*
 * pcm.h: the C interface of PCM (Process Checkpointing and Migration), MPI/IOS.
 *
 * A thin layer over the Rust `pcm` library (pcm/capi/src/lib.rs): the same status
 * agreement, store, migration and checkpoints as Rust programs get. The calls are the
 * paper's (El Maghraoui et al., Figure 11) with the smallest changes C needs; see
 * docs/instrumenting-c.md for the step-by-step and the differences.
 *
 * Every call returns an int: PCM_SUCCESS (0) or, for PCM_Status and PCM_Process_Status,
 * a non-negative answer; a negative PCM_ERR_* code on error. No call aborts the process
 * on bad input. PCM_Error_string(code) describes a code, PCM_Last_error() the last
 * failed call on the calling thread in detail (what was wrong, with names and sizes).
 *
 * MPI_COMM_WORLD: libpcm also defines MPI's C functions (MPI_Send, MPI_Allreduce,
 * MPI_Comm_rank, ... over the profiling interface). After a reconfiguration, each gives a
 * call naming MPI_COMM_WORLD the job's current world instead (a duplicate of PCM's world,
 * with MPI_COMM_WORLD's error handler), so code the program did not change (a helper in
 * another file, a library) keeps working after ranks moved; so do Fortran calls on Open
 * MPI (libpcm's PMPI_Comm_f2c). Not so: attribute calls (MPI_Comm_get_attr, ...) and
 * names stay on the launch's MPI_COMM_WORLD, and communicators derived from either world
 * before a move (MPI_Comm_dup, MPI_Comm_split, MPI_Cart_create) still hold the departed
 * process: make them again after PCM_Reconfigure. See docs/instrumenting-c.md.
 *
 * Build:  mpicc app.c $(pkg-config --cflags --libs pcm)
 */
#ifndef PCM_H
#define PCM_H

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PCM_VERSION_MAJOR 0
#define PCM_VERSION_MINOR 1

/* Return codes. */
#define PCM_SUCCESS 0
/* PCM_Process_Status: the process started with the job (not an error). */
#define PCM_FRESH (-1)
/* A call before PCM_Init, after PCM_Finalize, or PCM_Init before MPI_Init. */
#define PCM_ERR_NOT_INITIALIZED (-2)
/* PCM_Init called twice. */
#define PCM_ERR_ALREADY_INITIALIZED (-3)
/* A NULL pointer where one is required. */
#define PCM_ERR_NULL (-4)
/* An invalid argument: unknown datatype, negative count (in every call that takes one,
 * PCM_Load_checked too), a count too large to store (more bytes than a buffer can hold,
 * or than PCM can allocate for its copy), empty or over-long name, not valid UTF-8, a
 * rank other than this process's; a malleable declaration that is invalid (limits, size
 * rule, no rows) or differs from the job's, an undeclared block. */
#define PCM_ERR_ARG (-5)
/* The communicator is not PCM's current world (use the one PCM_Init or
 * PCM_Reconfigure gave back). */
#define PCM_ERR_COMM (-6)
/* PCM_Load / PCM_Count of a name nothing was stored under. */
#define PCM_ERR_NOT_STORED (-7)
/* Stored with another datatype than the one asked for. */
#define PCM_ERR_TYPE (-8)
/* Stored with another element count than the (non-negative) one given. */
#define PCM_ERR_COUNT (-9)
/* A call out of order: PCM_Reconfigure when the last PCM_Status returned
 * PCM_CONTINUE, or PCM_Status again before the PCM_Reconfigure that PCM_MIGRATE or
 * PCM_RECONFIGURE asked for. */
#define PCM_ERR_ORDER (-10)
/* A PCM setting (PCM_SCHEDULE, PCM_RESTART, ...) is malformed, or the MPI library is
 * not the one libpcm was built for. */
#define PCM_ERR_CONFIG (-11)
/* An MPI call inside PCM failed, or the reconfiguration / restart failed. */
#define PCM_ERR_MPI (-12)
/* A bug in PCM (caught; the process was not aborted). PCM is unusable afterwards. */
#define PCM_ERR_INTERNAL (-13)

/* PCM_Status answers. */
#define PCM_CONTINUE 0    /* compute */
#define PCM_MIGRATE 1     /* this rank moves: PCM_Store the state, then PCM_Reconfigure */
#define PCM_RECONFIGURE 2 /* other ranks move: PCM_Reconfigure */
#define PCM_CHECKPOINT 3  /* coordinated checkpoint: PCM_Store, then PCM_Reconfigure */
#define PCM_RESIZE 4      /* the job changes width: PCM_Store_block, PCM_Reconfigure, load again */

/* PCM_Set_malleable size rules: the widths a malleable job may run with. */
#define PCM_SIZE_ANY 0          /* any width in min..max */
#define PCM_SIZE_MULTIPLE_OF 1  /* a multiple of rule_arg (at least 1) */
#define PCM_SIZE_POWER_OF_TWO 2 /* 1, 2, 4, 8, ... */
#define PCM_SIZE_SQUARE 3       /* 1, 4, 9, 16, ... */

/* Element types of stored arrays. */
typedef int PCM_Datatype;
#define PCM_CHAR 1   /* char (stored as signed 8-bit) */
#define PCM_INT 2    /* int (32-bit) */
#define PCM_LONG 3   /* long (64-bit: LP64 only) */
#define PCM_FLOAT 4  /* float */
#define PCM_DOUBLE 5 /* double */
#define PCM_BYTE 6   /* raw bytes (unsigned 8-bit) */

/*
 * Starts PCM after MPI_Init. *comm must be MPI_COMM_WORLD; on return it is PCM's world,
 * which PCM_Status, PCM_Reconfigure and PCM_Finalize take (communication may use it or go
 * on naming MPI_COMM_WORLD; take the rank after this call). A replacement (spawned by a
 * migration) receives its predecessor's rank and state here. app_name names the
 * program for pcmd (letters, digits, '.', '-', '_'); NULL: the executable's name.
 * (Paper: PCM_Init(PCM_COMM_WORLD); the communicator is passed by address so that a
 * replacement gets the job's world.)
 */
int PCM_Init(MPI_Comm *comm, const char *app_name);

/*
 * PCM_FRESH (-1) if the process started with the job; otherwise (a replacement, a
 * restart from a checkpoint with PCM_RESTART=1, or a process added by a resize of a
 * malleable job) the rank whose stored state to PCM_Load, which is this process's rank
 * and may be 0. (Figure 11's `spawnrank <= 0` would take a replacement of rank 0 for a
 * fresh process: test `< 0`.) An added process loads like a replacement: PCM_Load of a
 * declared block gives its rows (PCM_Block_range), of any other name rank 0's value.
 * PCM_Resizing() tells an added process (1) from a replacement of a plain migration (0).
 */
int PCM_Process_Status(void);

/*
 * Once per iteration, on every rank, at the same point, with no message in flight:
 * PCM_CONTINUE, PCM_MIGRATE, PCM_RECONFIGURE, PCM_CHECKPOINT or, in a job declared
 * malleable (PCM_Set_malleable), PCM_RESIZE (or a PCM_ERR_* code).
 * comm: PCM's current world.
 */
int PCM_Status(MPI_Comm comm);

/*
 * Copies count elements of type at buf under name, for the replacement or the
 * checkpoint. rank: this process's rank in PCM's world. Storing a name again replaces
 * it. count 0 stores an empty array (buf may then be NULL). A count PCM cannot allocate
 * its copy of returns PCM_ERR_ARG (the process is not aborted).
 */
int PCM_Store(int rank, const char *name, const void *buf, PCM_Datatype type, long count);

/*
 * Copies the array stored under name into buf, which must hold all of it (PCM_Count
 * says how much). rank: as PCM_Process_Status returned it. The state is handed over
 * once: PCM frees its copy, and a second PCM_Load of the name returns
 * PCM_ERR_NOT_STORED. Nothing is written to buf when the call fails.
 */
int PCM_Load(int rank, const char *name, void *buf);

/* PCM_Load that also checks the stored type and count (PCM_ERR_TYPE, PCM_ERR_COUNT; an
 * unknown type or a negative count is PCM_ERR_ARG, checked first). */
int PCM_Load_checked(int rank, const char *name, void *buf, PCM_Datatype type, long count);

/*
 * The number of elements stored under name, which must have been stored as type
 * (else PCM_ERR_TYPE): lets a replacement allocate before it loads.
 */
int PCM_Count(int rank, const char *name, PCM_Datatype type, long *count);

/*
 * Carries out the reconfiguration the last PCM_Status announced (collective over
 * PCM's world). On the ranks that stay, *comm becomes the new world and it returns
 * PCM_SUCCESS. On a departing rank it does not return: PCM frees what it holds,
 * finalizes MPI and ends the process with status 0 (on Open MPI 4 it first waits,
 * idle, until the processes launched with it end). After PCM_CHECKPOINT it writes
 * the checkpoint and returns with *comm unchanged. app_name is not used (the
 * replacement runs this executable with the same arguments); it may be NULL.
 * After PCM_RESIZE it returns PCM_RESIZE on every rank of the new world when the job
 * changed width (a rank leaving a shrink does not return): this rank's number, the
 * world's size and its rows changed, so it takes its rank and size from *comm again,
 * rebuilds what it derives from its block and PCM_Loads its rows of each block
 * (PCM_Block_range says which). It returns PCM_SUCCESS when the resize was refused
 * (a block stored with the wrong length or type on any rank, or the spawn failed): the
 * job runs on at its width, with *comm and every rank's data as they were, and what
 * was stored is dropped.
 */
int PCM_Reconfigure(MPI_Comm *comm, const char *app_name);

/*
 * Ends PCM (collective over PCM's world). MPI stays initialised: call MPI_Finalize
 * next. comm: PCM's current world, freed here.
 */
int PCM_Finalize(MPI_Comm comm);

/* A static description of a return code. Never NULL. */
const char *PCM_Error_string(int code);

/*
 * The message of the most recent failed PCM call on this thread (empty if none): what
 * was wrong, with names and sizes. Valid until the next failed call. Never NULL.
 */
const char *PCM_Last_error(void);

/* Informative: reconfigurations the job has completed (0 before PCM_Init). */
long PCM_Migrations(void);

/*
 * Malleable jobs (docs/malleability.md): the job may grow or shrink at an iteration
 * boundary. Once, after PCM_Init and before the loop, on every rank, with the same values
 * (an added process or a replacement runs the same calls, which must agree with the
 * job's, else PCM_ERR_ARG). A job that never calls PCM_Set_malleable refuses every
 * resize, and the job runs on.
 *
 * The loop answers PCM_RESIZE like PCM_CHECKPOINT, storing each block with
 * PCM_Store_block, then loads again when PCM_Reconfigure returns PCM_RESIZE:
 *
 *     if (status == PCM_MIGRATE || status == PCM_CHECKPOINT || status == PCM_RESIZE) {
 *         PCM_Store(rank, "iteration", &iteration, PCM_LONG, 1);
 *         PCM_Store_block("grid", mine, PCM_DOUBLE, my_rows * cols);
 *     }
 *     if (status != PCM_CONTINUE && PCM_Reconfigure(&world, NULL) == PCM_RESIZE) {
 *         MPI_Comm_rank(world, &rank);
 *         MPI_Comm_size(world, &size);
 *         PCM_Block_range("grid", &first, &my_rows);   (reallocate for the new rows)
 *         PCM_Load_checked(rank, "grid", mine, PCM_DOUBLE, my_rows * cols);
 *     }
 */

/*
 * The job may run with any width from min to max (min >= 1) that rule allows:
 * PCM_SIZE_ANY, PCM_SIZE_MULTIPLE_OF (rule_arg = k >= 1), PCM_SIZE_POWER_OF_TWO,
 * PCM_SIZE_SQUARE (rule_arg ignored but for PCM_SIZE_MULTIPLE_OF).
 */
int PCM_Set_malleable(int min, int max, int rule, int rule_arg);

/*
 * name is a distributed array of rows global rows of row_len elements of type, split in
 * row blocks over the ranks: with P ranks rank r owns a contiguous block, in rank order,
 * the first rows % P ranks one row more. rows and row_len >= 1 (else PCM_ERR_ARG).
 */
int PCM_Declare_block(const char *name, PCM_Datatype type, long rows, long row_len);

/*
 * This rank's rows of the block name in the current world (after a resize: its new
 * rows): *first_row (0-based global row) and *rows. PCM_ERR_ARG if name was not declared.
 */
int PCM_Block_range(const char *name, long *first_row, long *rows);

/*
 * Copies this rank's rows of the declared block name (count = rows times row_len
 * elements of type, in row order) for a resize; outside a resize it stores them as
 * PCM_Store does (a replacement or a restart PCM_Loads them). The length and type are
 * checked in PCM_Reconfigure on every rank together: a mismatch anywhere refuses the
 * resize (PCM_Reconfigure returns PCM_SUCCESS and the job runs on at its width; PCM's
 * log names the array, the rank and the lengths). PCM_ERR_ARG if name was not declared.
 */
int PCM_Store_block(const char *name, const void *buf, PCM_Datatype type, long count);

/* Resizes the job has completed since it first started (0 before PCM_Init). */
long PCM_Resizes(void);

/*
 * 1 while the state stored or loaded now is a resize's (blocks hold only this rank's
 * rows, other names rank 0's value): from the PCM_Status that returned PCM_RESIZE to
 * the next PCM_Status, and in a process of the new world (an added process, or a
 * replacement spawned with the resize) until its first PCM_Status; 0 otherwise. A
 * program that stores its blocks the same way in every case does not need it.
 */
int PCM_Resizing(void);

/*
 * The calls that take a communicator, for Fortran (the `pcm` module calls them): comm
 * is a Fortran handle (MPI_Fint), converted with MPI_Comm_f2c / MPI_Comm_c2f.
 */
int PCM_Init_f(MPI_Fint *comm, const char *app_name);
int PCM_Status_f(MPI_Fint comm);
int PCM_Reconfigure_f(MPI_Fint *comm, const char *app_name);
int PCM_Finalize_f(MPI_Fint comm);

#ifdef __cplusplus
}
#endif

#endif /* PCM_H */
