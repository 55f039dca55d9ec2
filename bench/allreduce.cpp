// MPI_Allreduce (sum of floats) of N bytes per rank, as the trainers' gradient sync does:
//   bench_allreduce <bytes> [iterations]
// Rank 0 prints one line, `allreduce: {json}`: bytes, iterations, the median and best time of
// one allreduce, and the algorithm bandwidth (bytes / time). bench/transport_compare.py runs it
// on each mpi.transport, alternating.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const std::size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (64u << 20);
    const int iterations = argc > 2 ? std::atoi(argv[2]) : 5;
    const std::size_t n = bytes / sizeof(float);
    std::vector<float> in(n, 1.0f), out(n, 0.0f);
    MPI_Allreduce(in.data(), out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);  // warm-up
    std::vector<double> ms;
    for (int i = 0; i < iterations; ++i) {
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        MPI_Allreduce(in.data(), out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t = MPI_Wtime() - t0, slowest = 0;
        MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        ms.push_back(slowest * 1e3);
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    if (rank == 0)
        std::printf("allreduce: {\"bytes\":%zu,\"iterations\":%d,\"median_ms\":%.3f,\"best_ms\":%.3f,\"GBps\":%.3f}\n",
                    bytes, iterations, median, ms.front(), static_cast<double>(bytes) / (median * 1e6));
    MPI_Finalize();
    return 0;
}
