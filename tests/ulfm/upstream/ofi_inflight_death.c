/*
 * A standalone reproducer for docs/ulfm-traps.md trap 12, without flashrec: one rank dies
 * while a 4 MiB MPI_Allreduce has data in flight (a timer fires inside it), and the survivors
 * revoke, shrink and run allreduces on the shrunk communicator. Over `btl tcp` both survivors
 * print "REPAIRED size 2 sum 2 rc 0"; over `btl ofi` (libfabric's tcp provider) on Open MPI
 * 5.0.10 and 5.0.11 they mostly do not (docs/results.md, "Issue 27: btl ofi on 5.0.11").
 * Not built by CMake: it is for reporting the defect upstream.
 *
 *   P=.deps/openmpi; $P/bin/mpicc -O2 -o ofi_inflight_death tests/ulfm/upstream/ofi_inflight_death.c
 *   OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout -k 5 40 $P/bin/mpirun \
 *     --with-ft ulfm --oversubscribe -n 3 --mca pml ob1 --mca btl ofi,self \
 *     --mca btl_ofi_provider_include tcp --mca btl_ofi_mode 1 -x FI_PROVIDER=tcp -x FI_TCP_IFACE=lo \
 *     --mca mpi_ft_detector true --mca mpi_ft_detector_thread false \
 *     --mca mpi_ft_detector_period 0.2 --mca mpi_ft_detector_timeout 2 \
 *     ./ofi_inflight_death kill 25000          # or: exit3; the delay in microseconds
 *   (the same with `--mca btl tcp,self --mca btl_tcp_if_include lo` and no ofi flags: the control)
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static int kind_exit = 0;
static void die(int sig) {
    (void)sig;
    if (kind_exit) _exit(3);
    kill(getpid(), SIGKILL);
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    kind_exit = argc > 1 && strcmp(argv[1], "exit3") == 0;
    long delay_us = argc > 2 ? atol(argv[2]) : 20000;
    const int n = 1 << 20;
    float* a = malloc(n * sizeof(float));
    float* b = malloc(n * sizeof(float));
    for (int i = 0; i < n; ++i) a[i] = 1.0f;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == size - 1) {
        signal(SIGALRM, die);
        struct itimerval t = {{0, 0}, {delay_us / 1000000, delay_us % 1000000}};
        setitimer(ITIMER_REAL, &t, NULL);
    }
    int rc = MPI_SUCCESS;
    int it = 0;
    for (; it < 100000 && rc == MPI_SUCCESS; ++it) rc = MPI_Allreduce(a, b, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int cls = 0;
    MPI_Error_class(rc, &cls);
    fprintf(stderr, "rank %d: allreduce %d returned class %d\n", rank, it, cls);
    MPIX_Comm_revoke(MPI_COMM_WORLD);
    MPI_Comm shrunk;
    rc = MPIX_Comm_shrink(MPI_COMM_WORLD, &shrunk);
    if (rc != MPI_SUCCESS) { fprintf(stderr, "rank %d: shrink failed %d\n", rank, rc); return 1; }
    int ssize;
    MPI_Comm_size(shrunk, &ssize);
    float one = 1, sum = 0;
    rc = MPI_Allreduce(&one, &sum, 1, MPI_FLOAT, MPI_SUM, shrunk);
    for (int i = 0; i < 20 && rc == MPI_SUCCESS; ++i) rc = MPI_Allreduce(a, b, n, MPI_FLOAT, MPI_SUM, shrunk);
    printf("rank %d: REPAIRED size %d sum %g rc %d\n", rank, ssize, sum, rc);
    fflush(stdout);
    // Both survivors have printed before either exits: with a non-zero exit in the job, PRRTE
    // may end it at the first survivor's exit (docs/ulfm-traps.md, trap 14).
    MPI_Barrier(shrunk);
    MPI_Comm_free(&shrunk);
    _exit(0);
}
