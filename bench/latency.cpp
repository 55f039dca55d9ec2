// Per-hop constants for the scale model (bench/scale_model.py, docs/scale-model.md): the
// one-way latency of a small message (half a ping-pong between ranks 0 and 1) and the time of
// the collectives a recovery is made of, on a healthy communicator of all ranks: barrier,
// ULFM agreement (MPIX_Comm_agree), shrink (MPIX_Comm_shrink: an agreement plus building a
// communicator) and MPI_Comm_dup (building a communicator). Medians over many repetitions.
// Run with 2 ranks for figures free of time-sharing on a 2-core machine.
//   bench_latency [reps]   ->   latency ranks=N pingpong_us=... barrier_us=... ...
#include <mpi.h>
// after mpi.h, which defines what it needs
#include <mpi-ext.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

// Median wall time of `reps` calls of f, in microseconds, as seen by rank 0 (each repetition
// starts from a barrier so that all ranks enter together).
template <class F>
double median_us(int reps, F&& f) {
    std::vector<double> t;
    t.reserve(static_cast<std::size_t>(reps));
    for (int i = 0; i < reps; ++i) {
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = std::chrono::steady_clock::now();
        f();
        t.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(t.size() / 2), t.end());
    return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int reps = argc > 1 ? std::atoi(argv[1]) : 200;
    char byte[8] = {};
    // 100 round trips per repetition, so the timer's resolution does not matter.
    const double pingpong = median_us(reps, [&] {
        for (int i = 0; i < 100; ++i) {
            if (rank == 0) {
                MPI_Send(byte, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                MPI_Recv(byte, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Recv(byte, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(byte, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
            }
        }
    }) / 200.0;  // one way
    const double barrier = median_us(reps, [] { MPI_Barrier(MPI_COMM_WORLD); });
    int flag = 1;
    const double agree = median_us(reps, [&] { MPIX_Comm_agree(MPI_COMM_WORLD, &flag); });
    const int heavy = std::max(1, reps / 4);  // communicator construction is slower
    const double shrink = median_us(heavy, [] {
        MPI_Comm c = MPI_COMM_NULL;
        MPIX_Comm_shrink(MPI_COMM_WORLD, &c);
        MPI_Comm_free(&c);
    });
    const double dup = median_us(heavy, [] {
        MPI_Comm c = MPI_COMM_NULL;
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        MPI_Comm_free(&c);
    });
    if (rank == 0)
        std::printf("latency ranks=%d pingpong_us=%.2f barrier_us=%.2f agree_us=%.2f shrink_us=%.2f dup_us=%.2f\n",
                    size, pingpong, barrier, agree, shrink, dup);
    MPI_Finalize();
}
