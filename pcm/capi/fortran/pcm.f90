! The Fortran interface of PCM (MPI/IOS): `use pcm`, over libpcm's C calls through
! ISO_C_BINDING. The same calls as pcm.h (docs/instrumenting-c.md), as integer functions
! that return PCM_SUCCESS, a non-negative answer, or a negative PCM_ERR_* code.
!
! Communicators are Fortran handles: an INTEGER with `use mpi`, `comm%MPI_VAL` with
! `use mpi_f08`; libpcm converts them with MPI_Comm_f2c / MPI_Comm_c2f. The module does
! not use an MPI module itself, so it serves both.
!
! Buffers of pcm_store / pcm_load take any type and rank (scalars too): gfortran's
! NO_ARG_CHECK, as Open MPI's own `mpi` module does; the datatype argument says what
! they hold (PCM_INT for default INTEGER, PCM_LONG for INTEGER(8), PCM_FLOAT for REAL,
! PCM_DOUBLE for DOUBLE PRECISION / REAL(8), PCM_CHAR and PCM_BYTE for bytes).
!
! Malleable jobs (docs/malleability.md): pcm_set_malleable, pcm_declare_block,
! pcm_block_range (first_row counts from 0, as in C), pcm_store_block, pcm_resizes,
! pcm_resizing; pcm_status may return PCM_RESIZE, and pcm_reconfigure returns PCM_RESIZE
! when the job changed width (load the block again: see docs/instrumenting-c.md).
module pcm
    use, intrinsic :: iso_c_binding, only: c_int, c_long, c_char, c_ptr, c_null_char, &
        c_associated, c_f_pointer
    implicit none
    private

    integer, parameter, public :: PCM_SUCCESS = 0, PCM_FRESH = -1
    integer, parameter, public :: PCM_ERR_NOT_INITIALIZED = -2, PCM_ERR_ALREADY_INITIALIZED = -3, &
        PCM_ERR_NULL = -4, PCM_ERR_ARG = -5, PCM_ERR_COMM = -6, PCM_ERR_NOT_STORED = -7, &
        PCM_ERR_TYPE = -8, PCM_ERR_COUNT = -9, PCM_ERR_ORDER = -10, PCM_ERR_CONFIG = -11, &
        PCM_ERR_MPI = -12, PCM_ERR_INTERNAL = -13
    ! PCM_RECONFIGURE of pcm.h: Fortran names are case-blind, and pcm_reconfigure is the call.
    integer, parameter, public :: PCM_CONTINUE = 0, PCM_MIGRATE = 1, PCM_RECONFIG = 2, &
        PCM_CHECKPOINT = 3, PCM_RESIZE = 4
    integer, parameter, public :: PCM_SIZE_ANY = 0, PCM_SIZE_MULTIPLE_OF = 1, &
        PCM_SIZE_POWER_OF_TWO = 2, PCM_SIZE_SQUARE = 3
    integer, parameter, public :: PCM_CHAR = 1, PCM_INT = 2, PCM_LONG = 3, PCM_FLOAT = 4, &
        PCM_DOUBLE = 5, PCM_BYTE = 6

    public :: pcm_init, pcm_process_status, pcm_status, pcm_store, pcm_load, pcm_load_checked, &
        pcm_count, pcm_reconfigure, pcm_finalize, pcm_error_string, pcm_last_error, pcm_migrations, &
        pcm_set_malleable, pcm_declare_block, pcm_block_range, pcm_store_block, pcm_resizes, &
        pcm_resizing

    interface
        function c_init(comm, app) bind(C, name="PCM_Init_f") result(code)
            import :: c_int, c_char
            integer(c_int), intent(inout) :: comm
            character(kind=c_char), dimension(*), intent(in) :: app
            integer(c_int) :: code
        end function
        function c_process_status() bind(C, name="PCM_Process_Status") result(code)
            import :: c_int
            integer(c_int) :: code
        end function
        function c_status(comm) bind(C, name="PCM_Status_f") result(code)
            import :: c_int
            integer(c_int), value :: comm
            integer(c_int) :: code
        end function
        function c_store(rank, name, buf, datatype, count) bind(C, name="PCM_Store") result(code)
            import :: c_int, c_long, c_char
            integer(c_int), value :: rank, datatype
            character(kind=c_char), dimension(*), intent(in) :: name
            type(*), dimension(*), intent(in) :: buf
            integer(c_long), value :: count
            integer(c_int) :: code
        end function
        function c_load(rank, name, buf) bind(C, name="PCM_Load") result(code)
            import :: c_int, c_char
            integer(c_int), value :: rank
            character(kind=c_char), dimension(*), intent(in) :: name
            type(*), dimension(*) :: buf
            integer(c_int) :: code
        end function
        function c_load_checked(rank, name, buf, datatype, count) &
            bind(C, name="PCM_Load_checked") result(code)
            import :: c_int, c_long, c_char
            integer(c_int), value :: rank, datatype
            character(kind=c_char), dimension(*), intent(in) :: name
            type(*), dimension(*) :: buf
            integer(c_long), value :: count
            integer(c_int) :: code
        end function
        function c_count(rank, name, datatype, count) bind(C, name="PCM_Count") result(code)
            import :: c_int, c_long, c_char
            integer(c_int), value :: rank, datatype
            character(kind=c_char), dimension(*), intent(in) :: name
            integer(c_long), intent(out) :: count
            integer(c_int) :: code
        end function
        function c_reconfigure(comm, app) bind(C, name="PCM_Reconfigure_f") result(code)
            import :: c_int, c_char
            integer(c_int), intent(inout) :: comm
            character(kind=c_char), dimension(*), intent(in) :: app
            integer(c_int) :: code
        end function
        function c_finalize(comm) bind(C, name="PCM_Finalize_f") result(code)
            import :: c_int
            integer(c_int), value :: comm
            integer(c_int) :: code
        end function
        function c_error_string(code) bind(C, name="PCM_Error_string") result(text)
            import :: c_int, c_ptr
            integer(c_int), value :: code
            type(c_ptr) :: text
        end function
        function c_last_error() bind(C, name="PCM_Last_error") result(text)
            import :: c_ptr
            type(c_ptr) :: text
        end function
        function c_migrations() bind(C, name="PCM_Migrations") result(count)
            import :: c_long
            integer(c_long) :: count
        end function
        function c_set_malleable(min, max, rule, rule_arg) bind(C, name="PCM_Set_malleable") &
            result(code)
            import :: c_int
            integer(c_int), value :: min, max, rule, rule_arg
            integer(c_int) :: code
        end function
        function c_declare_block(name, datatype, rows, row_len) bind(C, name="PCM_Declare_block") &
            result(code)
            import :: c_int, c_long, c_char
            character(kind=c_char), dimension(*), intent(in) :: name
            integer(c_int), value :: datatype
            integer(c_long), value :: rows, row_len
            integer(c_int) :: code
        end function
        function c_block_range(name, first_row, rows) bind(C, name="PCM_Block_range") result(code)
            import :: c_int, c_long, c_char
            character(kind=c_char), dimension(*), intent(in) :: name
            integer(c_long), intent(out) :: first_row, rows
            integer(c_int) :: code
        end function
        function c_store_block(name, buf, datatype, count) bind(C, name="PCM_Store_block") &
            result(code)
            import :: c_int, c_long, c_char
            character(kind=c_char), dimension(*), intent(in) :: name
            type(*), dimension(*), intent(in) :: buf
            integer(c_int), value :: datatype
            integer(c_long), value :: count
            integer(c_int) :: code
        end function
        function c_resizes() bind(C, name="PCM_Resizes") result(count)
            import :: c_long
            integer(c_long) :: count
        end function
        function c_resizing() bind(C, name="PCM_Resizing") result(flag)
            import :: c_int
            integer(c_int) :: flag
        end function
    end interface

contains

    !> After MPI_Init: comm must be MPI_COMM_WORLD; on return it is PCM's world.
    integer function pcm_init(comm, app_name)
        integer, intent(inout) :: comm
        character(len=*), intent(in) :: app_name
        pcm_init = c_init(comm, trim(app_name)//c_null_char)
    end function

    !> PCM_FRESH, or the rank whose state to load (a replacement, a restart, or a process
    !> added by a resize; may be 0).
    integer function pcm_process_status()
        pcm_process_status = c_process_status()
    end function

    !> Once per iteration on every rank: PCM_CONTINUE, PCM_MIGRATE, PCM_RECONFIG,
    !> PCM_CHECKPOINT, PCM_RESIZE (a malleable job), or an error.
    integer function pcm_status(comm)
        integer, intent(in) :: comm
        pcm_status = c_status(comm)
    end function

    !> Copies count elements of datatype from buf under name.
    integer function pcm_store(rank, name, buf, datatype, count)
        integer, intent(in) :: rank, datatype
        character(len=*), intent(in) :: name
        type(*), dimension(*), intent(in) :: buf
        !GCC$ ATTRIBUTES NO_ARG_CHECK :: buf
        integer(8), intent(in) :: count
        pcm_store = c_store(rank, trim(name)//c_null_char, buf, datatype, int(count, c_long))
    end function

    !> Copies the array stored under name into buf (which must hold all of it).
    integer function pcm_load(rank, name, buf)
        integer, intent(in) :: rank
        character(len=*), intent(in) :: name
        type(*), dimension(*) :: buf
        !GCC$ ATTRIBUTES NO_ARG_CHECK :: buf
        pcm_load = c_load(rank, trim(name)//c_null_char, buf)
    end function

    !> pcm_load that also checks the stored datatype and count.
    integer function pcm_load_checked(rank, name, buf, datatype, count)
        integer, intent(in) :: rank, datatype
        character(len=*), intent(in) :: name
        type(*), dimension(*) :: buf
        !GCC$ ATTRIBUTES NO_ARG_CHECK :: buf
        integer(8), intent(in) :: count
        pcm_load_checked = c_load_checked(rank, trim(name)//c_null_char, buf, datatype, &
            int(count, c_long))
    end function

    !> How many elements of datatype are stored under name.
    integer function pcm_count(rank, name, datatype, count)
        integer, intent(in) :: rank, datatype
        character(len=*), intent(in) :: name
        integer(8), intent(out) :: count
        integer(c_long) :: c_value
        pcm_count = c_count(rank, trim(name)//c_null_char, datatype, c_value)
        count = c_value
    end function

    !> Carries out the announced reconfiguration; does not return on a departing rank.
    !> PCM_RESIZE when the job changed width: load the blocks again.
    integer function pcm_reconfigure(comm, app_name)
        integer, intent(inout) :: comm
        character(len=*), intent(in) :: app_name
        pcm_reconfigure = c_reconfigure(comm, trim(app_name)//c_null_char)
    end function

    !> Ends PCM; call MPI_Finalize next.
    integer function pcm_finalize(comm)
        integer, intent(in) :: comm
        pcm_finalize = c_finalize(comm)
    end function

    !> Reconfigurations the job has completed.
    integer(8) function pcm_migrations()
        pcm_migrations = c_migrations()
    end function

    !> The job may run with any width from min to max that rule allows (PCM_SIZE_ANY,
    !> PCM_SIZE_MULTIPLE_OF with rule_arg = k, PCM_SIZE_POWER_OF_TWO, PCM_SIZE_SQUARE).
    integer function pcm_set_malleable(min, max, rule, rule_arg)
        integer, intent(in) :: min, max, rule, rule_arg
        pcm_set_malleable = c_set_malleable(min, max, rule, rule_arg)
    end function

    !> name is a distributed array of rows global rows of row_len elements of datatype,
    !> split in row blocks over the ranks (the first mod(rows, size) ranks one row more).
    integer function pcm_declare_block(name, datatype, rows, row_len)
        character(len=*), intent(in) :: name
        integer, intent(in) :: datatype
        integer(8), intent(in) :: rows, row_len
        pcm_declare_block = c_declare_block(trim(name)//c_null_char, datatype, &
            int(rows, c_long), int(row_len, c_long))
    end function

    !> This rank's rows of the block name: first_row (counted from 0) and rows.
    integer function pcm_block_range(name, first_row, rows)
        character(len=*), intent(in) :: name
        integer(8), intent(out) :: first_row, rows
        integer(c_long) :: c_first, c_rows
        c_first = 0
        c_rows = 0
        pcm_block_range = c_block_range(trim(name)//c_null_char, c_first, c_rows)
        first_row = c_first
        rows = c_rows
    end function

    !> Copies this rank's rows of the declared block name (count elements) for a resize.
    integer function pcm_store_block(name, buf, datatype, count)
        character(len=*), intent(in) :: name
        type(*), dimension(*), intent(in) :: buf
        !GCC$ ATTRIBUTES NO_ARG_CHECK :: buf
        integer, intent(in) :: datatype
        integer(8), intent(in) :: count
        pcm_store_block = c_store_block(trim(name)//c_null_char, buf, datatype, int(count, c_long))
    end function

    !> Resizes the job has completed.
    integer(8) function pcm_resizes()
        pcm_resizes = c_resizes()
    end function

    !> Whether the state stored or loaded now is a resize's (see pcm.h's PCM_Resizing).
    logical function pcm_resizing()
        pcm_resizing = c_resizing() /= 0
    end function

    !> A description of a return code.
    function pcm_error_string(code) result(text)
        integer, intent(in) :: code
        character(len=:), allocatable :: text
        text = from_c(c_error_string(code))
    end function

    !> The message of the most recent failed call.
    function pcm_last_error() result(text)
        character(len=:), allocatable :: text
        text = from_c(c_last_error())
    end function

    function from_c(pointer) result(text)
        type(c_ptr), intent(in) :: pointer
        character(len=:), allocatable :: text
        character(kind=c_char), dimension(:), pointer :: chars
        integer :: n
        text = ''
        if (.not. c_associated(pointer)) return
        call c_f_pointer(pointer, chars, [4096])
        n = 0
        do while (n < 4096)
            if (chars(n + 1) == c_null_char) exit
            n = n + 1
        end do
        allocate (character(len=n) :: text)
        text = transfer(chars(1:n), text)
    end function
end module pcm
