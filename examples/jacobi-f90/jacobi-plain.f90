! jacobi-f90-plain: an iterative Fortran MPI code (Jacobi, halo exchange and an allreduce
! each iteration), plain MPI. jacobi.f90 is the same program with PCM.
!
!   mpirun -np 4 jacobi-f90-plain --rows 1024 --cols 1024 --iters 1000
program jacobi_plain
    use mpi
    use jacobi_common
    implicit none
    type(args_t) :: args
    type(block_t) :: b
    integer :: comm, rank, nranks, ierr, status
    integer(8) :: iteration, start
    real(8) :: started

    call MPI_Init(ierr)
    comm = MPI_COMM_WORLD
    call MPI_Comm_rank(comm, rank, ierr)
    call MPI_Comm_size(comm, nranks, ierr)
    status = parse_args(args, rank, nranks)
    if (status /= 0) then
        call MPI_Finalize(ierr)
        call exit(status)
    end if
    call block_init(b, args, rank, nranks)
    start = 0
    started = wall_seconds()

    do iteration = start, args%iters - 1
        call step(b, comm)
    end do
    call report(b, args, comm, wall_seconds() - started, -1_8)

    call MPI_Finalize(ierr)
end program
