! jacobi-f90: an iterative Fortran MPI code (Jacobi, halo exchange and an allreduce each
! iteration), instrumented with PCM so that any rank can move while it runs, and malleable:
! the job can grow or shrink at an iteration boundary (docs/malleability.md).
! jacobi-plain.f90 is the same program without PCM (`diff jacobi-plain.f90 jacobi.f90`).
!
!   mpirun -np 4 jacobi-f90 --rows 1024 --cols 1024 --iters 1000
program jacobi
    use mpi
    use jacobi_common
    use pcm
    implicit none
    type(args_t) :: args
    type(block_t) :: b
    integer :: comm, rank, nranks, ierr, status
    integer(8) :: iteration, start
    real(8) :: started

    call MPI_Init(ierr)
    comm = MPI_COMM_WORLD
    call check(pcm_init(comm, 'jacobi-f90'))
    call MPI_Comm_rank(comm, rank, ierr)
    call MPI_Comm_size(comm, nranks, ierr)
    status = parse_args(args, rank, nranks)
    if (status /= 0) then
        call check(pcm_finalize(comm))
        call MPI_Finalize(ierr)
        call exit(status)
    end if
    ! Any width that leaves each rank a row; block_init splits the rows as PCM does.
    call check(pcm_set_malleable(1, int(args%rows), PCM_SIZE_ANY, 0))
    call check(pcm_declare_block('u', PCM_DOUBLE, args%rows, args%cols))
    call block_init(b, args, rank, nranks)
    start = 0
    started = wall_seconds()
    if (pcm_process_status() >= 0) then ! a replacement, an added process, or a restart
        call check(pcm_load_checked(rank, 'iteration', start, PCM_LONG, 1_8))
        call check(pcm_load_checked(rank, 'started', started, PCM_DOUBLE, 1_8))
        call check(pcm_load_checked(rank, 'u', b%u(0, 1), PCM_DOUBLE, b%local_rows * b%cols))
    end if

    do iteration = start, args%iters - 1
        status = pcm_status(comm)
        call check(status)
        if (status == PCM_MIGRATE .or. status == PCM_CHECKPOINT .or. status == PCM_RESIZE) then
            call check(pcm_store(rank, 'iteration', iteration, PCM_LONG, 1_8))
            call check(pcm_store(rank, 'started', started, PCM_DOUBLE, 1_8))
            call check(pcm_store_block('u', b%u(0, 1), PCM_DOUBLE, b%local_rows * b%cols))
        end if
        if (status /= PCM_CONTINUE) status = pcm_reconfigure(comm, 'jacobi-f90')
        call check(status)
        if (status == PCM_RESIZE) then ! the width changed: this rank's new rows
            call MPI_Comm_rank(comm, rank, ierr)
            call MPI_Comm_size(comm, nranks, ierr)
            call block_init(b, args, rank, nranks)
            call check(pcm_load_checked(rank, 'u', b%u(0, 1), PCM_DOUBLE, b%local_rows * b%cols))
        end if
        call step(b, comm)
    end do
    call report(b, args, comm, wall_seconds() - started, pcm_migrations(), pcm_resizes())

    call check(pcm_finalize(comm))
    call MPI_Finalize(ierr)
contains
    !> Ends the job on a failed PCM call, with PCM's reason.
    subroutine check(code)
        integer, intent(in) :: code
        integer :: ierr
        if (code >= 0) return
        write (0, '(2a)') 'jacobi-f90: ', pcm_last_error()
        call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end subroutine
end program
