! The Jacobi iteration both jacobi-plain.f90 and jacobi.f90 run: a rows x cols grid (the
! two boundary columns included) split into row blocks, the top boundary held at 100, a
! halo exchange with the neighbouring ranks (MPI_Sendrecv) and an MPI_Allreduce of the
! largest change each iteration. A block is stored as u(0:cols-1, 0:local_rows+1), so
! each grid row is contiguous, as in the C heat2d.
module jacobi_common
    use mpi
    use, intrinsic :: iso_c_binding, only: c_char, c_size_t, c_double, c_null_char
    implicit none
    private
    public :: args_t, block_t, parse_args, block_init, step, report, wall_seconds

    type :: args_t
        integer(8) :: rows = 512, cols = 512, iters = 1000
    end type

    type :: block_t
        integer(8) :: rows, cols, start_row, local_rows
        real(8), allocatable :: u(:, :), next(:, :)
        real(8) :: change = 0
    end type

    interface
        subroutine sha256_hex_of(data, len, hex) bind(C, name="sha256_hex_of")
            import :: c_double, c_size_t, c_char
            real(c_double), dimension(*), intent(in) :: data
            integer(c_size_t), value :: len
            character(kind=c_char), dimension(65) :: hex
        end subroutine
    end interface

contains

    !> Reads --rows, --cols, --iters; returns 0 to run, else the exit status (rank 0 says why).
    integer function parse_args(args, rank, size) result(status)
        type(args_t), intent(out) :: args
        integer, intent(in) :: rank, size
        character(len=64) :: name, value
        integer :: i, n, io
        integer(8) :: number
        status = 0
        n = command_argument_count()
        i = 1
        do while (i <= n)
            call get_command_argument(i, name)
            call get_command_argument(i + 1, value)
            read (value, *, iostat=io) number
            if (io /= 0 .or. number < 0 .or. i + 1 > n) then
                if (rank == 0) write (0, '(3a)') 'jacobi-f90: ', trim(name), ' needs a non-negative integer'
                status = 2
                return
            end if
            select case (trim(name))
            case ('--rows')
                args%rows = number
            case ('--cols')
                args%cols = number
            case ('--iters')
                args%iters = number
            case default
                if (rank == 0) write (0, '(3a)') 'jacobi-f90: unknown argument ', trim(name), &
                    ' (usage: --rows N --cols N --iters N)'
                status = 2
                return
            end select
            i = i + 2
        end do
        if (args%cols < 3 .or. args%rows < size .or. args%rows * args%cols > huge(0)) then
            if (rank == 0) write (0, '(a)') 'jacobi-f90: need cols >= 3, rows >= ranks, rows*cols < 2^31'
            status = 1
        end if
    end function

    subroutine block_init(b, args, rank, size)
        type(block_t), intent(out) :: b
        type(args_t), intent(in) :: args
        integer, intent(in) :: rank, size
        integer(8) :: base, extra, r, c
        base = args%rows / size
        extra = mod(args%rows, int(size, 8))
        b%rows = args%rows
        b%cols = args%cols
        b%start_row = rank * base + min(int(rank, 8), extra)
        b%local_rows = base
        if (rank < extra) b%local_rows = base + 1
        allocate (b%u(0:b%cols - 1, 0:b%local_rows + 1), b%next(0:b%cols - 1, 0:b%local_rows + 1))
        b%u = 0
        if (b%start_row == 0) b%u(:, 0) = 100
        do r = 1, b%local_rows
            do c = 1, b%cols - 2
                b%u(c, r) = real(mod((b%start_row + r - 1) * 3 + c * 5, 17_8), 8) * 0.25d0
            end do
        end do
        b%next = b%u
    end subroutine

    !> One iteration: halo exchange, update, and the largest change over all ranks.
    subroutine step(b, comm)
        type(block_t), intent(inout) :: b
        integer, intent(in) :: comm
        integer :: rank, size, up, down, ierr, n, c
        real(8) :: local_change
        call MPI_Comm_rank(comm, rank, ierr)
        call MPI_Comm_size(comm, size, ierr)
        up = rank - 1
        down = rank + 1
        if (up < 0) up = MPI_PROC_NULL
        if (down >= size) down = MPI_PROC_NULL
        n = int(b%local_rows)
        c = int(b%cols)
        call MPI_Sendrecv(b%u(0, 1), c, MPI_DOUBLE_PRECISION, up, 1, &
                          b%u(0, n + 1), c, MPI_DOUBLE_PRECISION, down, 1, comm, MPI_STATUS_IGNORE, ierr)
        call MPI_Sendrecv(b%u(0, n), c, MPI_DOUBLE_PRECISION, down, 2, &
                          b%u(0, 0), c, MPI_DOUBLE_PRECISION, up, 2, comm, MPI_STATUS_IGNORE, ierr)
        b%next(1:c - 2, 1:n) = 0.25d0 * ((b%u(1:c - 2, 0:n - 1) + b%u(1:c - 2, 2:n + 1)) &
                                         + (b%u(0:c - 3, 1:n) + b%u(2:c - 1, 1:n)))
        local_change = maxval(abs(b%next(1:c - 2, 1:n) - b%u(1:c - 2, 1:n)))
        call MPI_Allreduce(local_change, b%change, 1, MPI_DOUBLE_PRECISION, MPI_MAX, comm, ierr)
        b%u(1:c - 2, 1:n) = b%next(1:c - 2, 1:n)
    end subroutine

    real(8) function wall_seconds()
        integer(8) :: count, rate
        call system_clock(count, rate)
        wall_seconds = real(count, 8) / real(rate, 8)
    end function

    !> Gathers the grid at rank 0, which prints the JSON report as its last stdout line
    !> (migrations < 0: left out; resizes only when given). Collective.
    subroutine report(b, args, comm, seconds, migrations, resizes)
        type(block_t), intent(in) :: b
        type(args_t), intent(in) :: args
        integer, intent(in) :: comm
        real(8), intent(in) :: seconds
        integer(8), intent(in) :: migrations
        integer(8), intent(in), optional :: resizes
        integer :: rank, size, ierr, i, len
        integer(8) :: placement(2)
        integer(8), allocatable :: placements(:, :)
        integer, allocatable :: counts(:), displs(:)
        real(8), allocatable :: grid(:)
        character(kind=c_char) :: hex(65)
        character(len=MPI_MAX_LIBRARY_VERSION_STRING) :: version
        character(len=32) :: text
        call MPI_Comm_rank(comm, rank, ierr)
        call MPI_Comm_size(comm, size, ierr)
        placement = [b%start_row, b%local_rows]
        allocate (placements(2, 0:size - 1), counts(0:size - 1), displs(0:size - 1))
        allocate (grid(merge(b%rows * b%cols, 1_8, rank == 0)))
        call MPI_Gather(placement, 2, MPI_INTEGER8, placements, 2, MPI_INTEGER8, 0, comm, ierr)
        counts = int(placements(2, :) * b%cols)
        displs = int(placements(1, :) * b%cols)
        call MPI_Gatherv(b%u(0, 1), int(b%local_rows * b%cols), MPI_DOUBLE_PRECISION, grid, counts, &
                         displs, MPI_DOUBLE_PRECISION, 0, comm, ierr)
        if (rank /= 0) return
        call sha256_hex_of(grid, int(8 * b%rows * b%cols, c_size_t), hex)
        call MPI_Get_library_version(version, len, ierr)
        i = index(version(1:len), new_line('a'))
        if (i > 0) len = i - 1
        write (text, '(f20.6)') seconds
        write (*, '(a)', advance='no') '{"checksum":"'//transfer(hex(1:64), repeat(' ', 64))//'"'
        write (*, '(a,i0,3a,i0,a,i0,a,i0)', advance='no') ',"iterations":', args%iters, &
            ',"seconds":', trim(adjustl(text)), ',"ranks":', size, ',"rows":', b%rows, ',"cols":', b%cols
        if (migrations >= 0) write (*, '(a,i0)', advance='no') ',"migrations":', migrations
        if (present(resizes)) write (*, '(a,i0)', advance='no') ',"resizes":', resizes
        write (*, '(a,es24.17e3,3a)') ',"change":', b%change, ',"mpi_library":"', &
            trim(adjustl(version(1:len))), '"}'
        flush (6)
    end subroutine
end module jacobi_common
