/*
 * What Intel MPI's Fortran bindings (libmpifort.so.12) need from an MPI library and MPICH
 * 5.0.2's libmpi from the Python package index lacks, built without Fortran.
 *
 * Intel MPI is MPICH-derived and keeps MPICH's binary interface (libmpi.so.12: the same
 * integer handles, MPI_Status layout and constants, checked against both mpi.h files), and
 * its libmpifort calls the C library through that interface (MPI_Send, PMPI_Comm_rank, ...)
 * plus a few MPICH internals that the wheel's libmpi does export (MPII_Keyval_set_proxy,
 * MPII_Comm_get_attr, MPIR_Err_create_code, ...). What is left, defined here:
 *   - the addresses of the Fortran constants that are common blocks (MPI_BOTTOM,
 *     MPI_IN_PLACE, MPI_STATUS_IGNORE, ...): libmpifort calls `mpirinitf_` in MPI_INIT when
 *     they are unset, and compares buffer arguments with them;
 *   - Fortran's .TRUE. and .FALSE. as gfortran stores them (1 and 0);
 *   - Intel's allocator entry points, as the C library's;
 *   - Intel-only extensions (MPIX_*_notify) and the mpi_f08 user-operation hook, which
 *     report an error: Intel ships no mpi_f08 module for gfortran, and MPICH has no notify.
 * scripts/setup-mpich-fortran.sh builds this as libmpifort_glue.so with MPICH's mpicc;
 * the mpif90 it writes links it next to libmpifort and MPICH's libmpi.
 */
#include <mpi.h>
#include <stdlib.h>

/* The common blocks of Intel's mpif.h and mpi module (defined in libmpifort, and in every
 * program that uses them): /MPIPRIV1/ MPI_BOTTOM, MPI_IN_PLACE, MPI_STATUS_IGNORE;
 * /MPIPRIV2/ MPI_STATUSES_IGNORE, MPI_ERRCODES_IGNORE; /MPIPRIVC/ MPI_ARGVS_NULL,
 * MPI_ARGV_NULL; /MPIFCMB5/ MPI_UNWEIGHTED; /MPIFCMB9/ MPI_WEIGHTS_EMPTY; /MPIFCMBa/
 * MPI_BUFFER_AUTOMATIC. Each Fortran INTEGER is 4 bytes. */
extern char mpipriv1_[], mpipriv2_[], mpiprivc_[], mpifcmb5_[], mpifcmb9_[], mpifcmba_[];

const MPI_Fint MPII_F_TRUE = 1, MPII_F_FALSE = 0;
void *MPIR_F_MPI_BOTTOM, *MPIR_F_MPI_IN_PLACE, *MPIR_F_MPI_UNWEIGHTED,
    *MPIR_F_MPI_WEIGHTS_EMPTY, *MPIR_F_MPI_BUFFER_AUTOMATIC, *MPI_F_ARGVS_NULL;
MPI_Fint *MPI_F_ERRCODES_IGNORE;

/* Records where the common blocks are (MPICH's setbotf.f does this in a Fortran MPICH).
 * MPI_F_STATUS_IGNORE and MPI_F_STATUSES_IGNORE are the C library's own variables. */
void mpirinitf_(void)
{
    MPIR_F_MPI_BOTTOM = mpipriv1_;
    MPIR_F_MPI_IN_PLACE = mpipriv1_ + 4;
    MPI_F_STATUS_IGNORE = (MPI_Fint *) (mpipriv1_ + 8);
    MPI_F_STATUSES_IGNORE = (MPI_Fint *) mpipriv2_;
    MPI_F_ERRCODES_IGNORE = (MPI_Fint *) (mpipriv2_ + 4 * MPI_F_STATUS_SIZE);
    MPI_F_ARGVS_NULL = mpiprivc_;
    /* MPI_ARGV_NULL is a blank CHARACTER*1: MPI_COMM_SPAWN reads arguments up to the
     * first blank one (Intel's libmpi writes it so; left zero, the scan runs off). */
    mpiprivc_[1] = ' ';
    MPIR_F_MPI_UNWEIGHTED = mpifcmb5_;
    MPIR_F_MPI_WEIGHTS_EMPTY = mpifcmb9_;
    MPIR_F_MPI_BUFFER_AUTOMATIC = mpifcmba_;
}

void *impi_malloc(size_t size)
{
    return malloc(size);
}

void *impi_realloc(void *pointer, size_t size)
{
    return realloc(pointer, size);
}

void impi_free(void *pointer)
{
    free(pointer);
}

/* MPICH's attribute kinds (mpir_attr_generic.h). */
typedef enum { ATTR_PTR = 0, ATTR_AINT = 1, ATTR_INT = 3 } attr_kind;
int MPII_Comm_get_attr(MPI_Comm comm, int keyval, void *value, int *flag, attr_kind kind);

/* MPI_COMM_GET_ATTR from Fortran: MPICH's own Fortran build routes it through the same
 * attribute code with the Fortran attribute kind, which the caller passes. */
int MPII_Comm_get_attr_fort(MPI_Comm comm, int keyval, void *value, int *flag, attr_kind kind)
{
    return MPII_Comm_get_attr(comm, keyval, value, flag, kind);
}

/* mpi_f08 only (user-defined reduction operations): no mpi_f08 for gfortran here. */
int MPII_Op_set_f08(MPI_Op op)
{
    (void) op;
    return MPI_ERR_INTERN;
}

#define NOT_IN_MPICH(name) \
    int name(void) { return MPI_ERR_UNSUPPORTED_OPERATION; }
NOT_IN_MPICH(MPIX_Get_notify)
NOT_IN_MPICH(MPIX_Get_notify_c)
NOT_IN_MPICH(MPIX_Put_notify)
NOT_IN_MPICH(MPIX_Put_notify_c)
NOT_IN_MPICH(MPIX_Win_create_notify)
NOT_IN_MPICH(MPIX_Win_free_notify)
NOT_IN_MPICH(MPIX_Win_get_notify)
NOT_IN_MPICH(MPIX_Win_get_notify_request)
NOT_IN_MPICH(MPIX_Win_set_notify)
