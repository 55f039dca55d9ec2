// Reference bandwidths for the protection benchmark, measured in the same run:
//   memcpy of N bytes (what the snapshot copy does) and an MPI point-to-point transfer of
//   N bytes between ranks 0 and 1 (what ring replication does). Run with 2 ranks.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const std::size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (64u << 20);
    const int chunk = 4 << 20;
    std::vector<char> a(bytes, 1), b(bytes, 0);
    auto time = [](auto&& f) {
        double best = 1e30;
        for (int i = 0; i < 5; ++i) {
            const auto t0 = std::chrono::steady_clock::now();
            f();
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return best;
    };
    const double copy_s = time([&] { std::memcpy(b.data(), a.data(), bytes); });
    const double p2p_s = time([&] {
        MPI_Barrier(MPI_COMM_WORLD);
        for (std::size_t off = 0; off < bytes; off += chunk) {
            const int n = static_cast<int>(std::min<std::size_t>(chunk, bytes - off));
            if (rank == 0) MPI_Send(a.data() + off, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            if (rank == 1) MPI_Recv(b.data() + off, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    });
    if (rank == 0)
        std::printf("bandwidth bytes=%zu memcpy_GBps=%.2f mpi_p2p_GBps=%.2f\n", bytes,
                    static_cast<double>(bytes) / copy_s / 1e9, static_cast<double>(bytes) / p2p_s / 1e9);
    MPI_Finalize();
}
