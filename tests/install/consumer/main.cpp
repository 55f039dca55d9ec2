#include <flashrec/flashrec.hpp>

#include <cstdio>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int size = 0, rank = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) std::printf("consumer: flashrec %s linked, %d ranks\n", flashrec::version(), size);
    MPI_Finalize();
}
