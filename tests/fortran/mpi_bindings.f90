! The parts of the Fortran bindings that depend on where Fortran's special constants live
! (scripts/mpich-fortran-glue.c on MPICH): run by tests/tests/fortran_bindings.rs on 2 ranks.
! Rank 0 prints one line per check, "check NAME ok" or "check NAME FAILED: why".
program mpi_bindings
    use mpi
    implicit none
    integer :: ierr, rank, size, key, dup, parent, inter, merged, errcodes(1), request, i
    integer :: buf(4), status(MPI_STATUS_SIZE)
    integer(kind=MPI_ADDRESS_KIND) :: value
    logical :: flag, mine, any_true, all_true
    double precision :: x

    call MPI_Init(ierr)
    call MPI_Comm_get_parent(parent, ierr)
    if (parent /= MPI_COMM_NULL) then
        ! The spawned child: joins its parents in one communicator and adds its 42 to their
        ! ranks. Only collectives cross the new intercommunicator: on MPICH 5.0.2 with UCX a
        ! point-to-point message right after the spawn was lost now and then (7 of 300 C runs
        ! hung with each side waiting), and a parent that sent its last message and left
        ! before the child had connected to it made the child's MPI_Init fail (UCX could not
        ! open the gone parent's shared memory; 12 of 100). The merge and the all-reduce need
        ! every process, so nobody leaves before everybody is connected (0 of 300).
        call MPI_Intercomm_merge(parent, .true., merged, ierr)
        call MPI_Allreduce(42, i, 1, MPI_INTEGER, MPI_SUM, merged, ierr)
        call MPI_Comm_free(merged, ierr)
        call MPI_Comm_disconnect(parent, ierr)
        call MPI_Finalize(ierr)
        stop
    end if
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)

    ! A predefined attribute, read through the Fortran attribute path.
    call MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, value, flag, ierr)
    call check('tag_ub', ierr == MPI_SUCCESS .and. flag .and. value >= 32767, value)

    ! A user attribute with the Fortran copy function, copied by MPI_Comm_dup.
    call MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, key, 0_MPI_ADDRESS_KIND, ierr)
    call MPI_Comm_set_attr(MPI_COMM_WORLD, key, 12345_MPI_ADDRESS_KIND, ierr)
    call MPI_Comm_dup(MPI_COMM_WORLD, dup, ierr)
    value = 0
    call MPI_Comm_get_attr(dup, key, value, flag, ierr)
    call check('user_attribute', ierr == MPI_SUCCESS .and. flag .and. value == 12345, value)

    ! MPI_IN_PLACE.
    x = rank + 1
    call MPI_Allreduce(MPI_IN_PLACE, x, 1, MPI_DOUBLE_PRECISION, MPI_SUM, dup, ierr)
    call check('in_place', ierr == MPI_SUCCESS .and. x == size * (size + 1) / 2, int(x, MPI_ADDRESS_KIND))

    ! LOGICAL reductions: .TRUE. and .FALSE. as gfortran stores them.
    mine = rank == 0
    call MPI_Allreduce(mine, any_true, 1, MPI_LOGICAL, MPI_LOR, dup, ierr)
    call MPI_Allreduce(mine, all_true, 1, MPI_LOGICAL, MPI_LAND, dup, ierr)
    call check('logical', ierr == MPI_SUCCESS .and. any_true .and. .not. all_true, 0_MPI_ADDRESS_KIND)

    ! MPI_STATUS_IGNORE, then a real status.
    buf = -1
    if (rank == 1) then
        buf = 9
        call MPI_Isend(buf, 4, MPI_INTEGER, 0, 3, dup, request, ierr)
        call MPI_Wait(request, MPI_STATUS_IGNORE, ierr)
        call MPI_Send(buf, 2, MPI_INTEGER, 0, 4, dup, ierr)
    else if (rank == 0) then
        call MPI_Recv(buf, 4, MPI_INTEGER, 1, 3, dup, MPI_STATUS_IGNORE, ierr)
        call check('status_ignore', ierr == MPI_SUCCESS .and. all(buf == 9), int(buf(1), MPI_ADDRESS_KIND))
        call MPI_Recv(buf, 4, MPI_INTEGER, MPI_ANY_SOURCE, MPI_ANY_TAG, dup, status, ierr)
        call MPI_Get_count(status, MPI_INTEGER, i, ierr)
        call check('status', ierr == MPI_SUCCESS .and. status(MPI_SOURCE) == 1 .and. status(MPI_TAG) == 4 &
                   .and. i == 2, int(status(MPI_SOURCE), MPI_ADDRESS_KIND))
    end if

    ! A spawn with MPI_ARGV_NULL and an array of error codes; the child is checked through
    ! a merge and an all-reduce (see the child's part for why not point-to-point).
    call MPI_Comm_spawn(program_path(), MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &
                        inter, errcodes, ierr)
    call MPI_Intercomm_merge(inter, .false., merged, ierr)
    call MPI_Comm_size(merged, i, ierr)
    call MPI_Allreduce(rank, buf(1), 1, MPI_INTEGER, MPI_SUM, merged, ierr)
    call check('spawn', ierr == MPI_SUCCESS .and. i == size + 1 .and. errcodes(1) == MPI_SUCCESS &
               .and. buf(1) == 42 + size * (size - 1) / 2, int(buf(1), MPI_ADDRESS_KIND))
    call MPI_Comm_free(merged, ierr)
    call MPI_Comm_disconnect(inter, ierr)
    call MPI_Comm_free(dup, ierr)
    call MPI_Comm_free_keyval(key, ierr)
    call MPI_Finalize(ierr)

contains

    subroutine check(name, passed, seen)
        character(*), intent(in) :: name
        logical, intent(in) :: passed
        integer(kind=MPI_ADDRESS_KIND), intent(in) :: seen
        if (rank /= 0) return
        if (passed) then
            print '(a, a, a)', 'check ', name, ' ok'
        else
            print '(a, a, a, i0, a, i0)', 'check ', name, ' FAILED: value ', seen, ' ierr ', ierr
        end if
    end subroutine check

    function program_path() result(path)
        character(len=:), allocatable :: path
        character(len=4096) :: arg0
        integer :: length
        call get_command_argument(0, arg0, length)
        path = arg0(1:length)
    end function program_path
end program mpi_bindings
