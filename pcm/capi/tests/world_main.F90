! The Fortran twin of world_main.c: all communication sits in world_step and world_report,
! which name MPI_COMM_WORLD and know nothing of PCM. Built as is, it is the plain program;
! with -DWITH_PCM, PCM's calls are added in the main program only. Moves of any rank must
! give the plain program's numbers (tests/tests/capi.rs): Open MPI's Fortran bindings reach
! the C library past libpcm's MPI_ wrappers, so this checks libpcm's PMPI_Comm_f2c.
module world_helper
    use mpi
    implicit none
contains
    ! A ring exchange, an all-reduce and, every 8th step, a barrier on MPI_COMM_WORLD.
    subroutine world_step(x, step)
        real(8), intent(inout) :: x
        integer(8), intent(in) :: step
        integer :: rank, size, ierr, right, from
        real(8) :: left, total
        call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
        call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
        left = x
        right = mod(rank + 1, size)
        from = mod(rank + size - 1, size)
        if (size > 1) then
            if (mod(rank, 2) == 0) then
                call MPI_Send(x, 1, MPI_DOUBLE_PRECISION, right, 7, MPI_COMM_WORLD, ierr)
                call MPI_Recv(left, 1, MPI_DOUBLE_PRECISION, from, 7, MPI_COMM_WORLD, &
                              MPI_STATUS_IGNORE, ierr)
            else
                call MPI_Recv(left, 1, MPI_DOUBLE_PRECISION, from, 7, MPI_COMM_WORLD, &
                              MPI_STATUS_IGNORE, ierr)
                call MPI_Send(x, 1, MPI_DOUBLE_PRECISION, right, 7, MPI_COMM_WORLD, ierr)
            end if
        end if
        x = 0.75d0 * x + 0.25d0 * left + real(rank + 1, 8) / real(step + 1, 8)
        call MPI_Allreduce(x, total, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
        x = x + 1d-3 * total
        if (mod(step, 8_8) == 0) call MPI_Barrier(MPI_COMM_WORLD, ierr)
    end subroutine

    ! Rank 0 prints every rank's value, exactly (the bits in hexadecimal).
    subroutine world_report(x, steps)
        real(8), intent(in) :: x
        integer(8), intent(in) :: steps
        integer :: rank, size, ierr
        real(8) :: all(64)
        call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
        call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
        if (size > 64) call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
        call MPI_Gather(x, 1, MPI_DOUBLE_PRECISION, all, 1, MPI_DOUBLE_PRECISION, 0, &
                        MPI_COMM_WORLD, ierr)
        if (rank == 0) print '(a, i0, a, i0, a, 64(1x, z16.16))', 'result ranks ', size, &
            ' steps ', steps, ':', all(1:size)
    end subroutine
end module

program world_main
    use mpi
#ifdef WITH_PCM
    use pcm
#endif
    use world_helper
    implicit none
    integer(8), parameter :: steps = 100
    integer(8) :: step, start
    integer :: rank, ierr
    real(8) :: x
#ifdef WITH_PCM
    integer :: comm, status
#endif

    call MPI_Init(ierr)
    x = 1d0
    start = 0
#ifdef WITH_PCM
    comm = MPI_COMM_WORLD
    if (pcm_init(comm, 'world-main-f') < 0) call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
#endif
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)   ! a replacement: its predecessor's rank
#ifdef WITH_PCM
    if (pcm_process_status() >= 0) then
        if (pcm_load_checked(rank, 'step', start, PCM_LONG, 1_8) < 0) call MPI_Abort(comm, 1, ierr)
        if (pcm_load_checked(rank, 'x', x, PCM_DOUBLE, 1_8) < 0) call MPI_Abort(comm, 1, ierr)
    end if
#endif
    do step = start, steps - 1
#ifdef WITH_PCM
        status = pcm_status(comm)
        if (status < 0) call MPI_Abort(comm, 1, ierr)
        if (status == PCM_MIGRATE .or. status == PCM_CHECKPOINT) then
            ierr = pcm_store(rank, 'step', step, PCM_LONG, 1_8)
            ierr = pcm_store(rank, 'x', x, PCM_DOUBLE, 1_8)
        end if
        if (status /= PCM_CONTINUE) then
            if (pcm_reconfigure(comm, 'world-main-f') < 0) call MPI_Abort(comm, 1, ierr)
        end if
#endif
        call world_step(x, step)
    end do
    call world_report(x, steps)
#ifdef WITH_PCM
    ierr = pcm_finalize(comm)
#endif
    call MPI_Finalize(ierr)
end program
