// pcm.h from C++: the header's extern "C" guards let a C++ program link libpcm. Runs
// PCM_Init, a few status calls and PCM_Finalize, and prints "cxx_smoke: ok" on rank 0.
#include <mpi.h>
#include <pcm.h>

#include <cstdio>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm world = MPI_COMM_WORLD;
    if (PCM_Init(&world, "cxx_smoke") != PCM_SUCCESS) {
        std::fprintf(stderr, "cxx_smoke: %s\n", PCM_Last_error());
        return 1;
    }
    int rank = 0;
    MPI_Comm_rank(world, &rank);
    for (int i = 0; i < 10; i++)
        if (PCM_Status(world) != PCM_CONTINUE)
            return 1;
    int ok = PCM_Process_Status() == PCM_FRESH && PCM_Finalize(world) == PCM_SUCCESS;
    MPI_Finalize();
    if (ok && rank == 0)
        std::printf("cxx_smoke: ok\n");
    return ok ? 0 : 1;
}
