// Reference bandwidths for the protection benchmark, measured in the same run (2 ranks):
//   memcpy_GBps       memcpy of N bytes (what the snapshot copy does) by rank 0 alone;
//   memcpy_both_GBps  the same with both ranks copying at once (per rank), as the ranks'
//                     snapshot threads do in a protection run: they share the memory channels;
//   mpi_p2p_GBps      MPI point-to-point, N bytes from rank 0 to rank 1 in 4 MiB messages
//                     (the reference for replication);
//   mpi_exchange_GBps both ranks send N bytes to each other at once (per direction), as a ring
//                     of two does: each core pays the send of its payload and the receive of its
//                     predecessor's (TCP loopback copies on both sides).
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
    // Best of 5, each started together on both ranks.
    auto time = [](auto&& f) {
        double best = 1e30;
        for (int i = 0; i < 5; ++i) {
            MPI_Barrier(MPI_COMM_WORLD);
            const auto t0 = std::chrono::steady_clock::now();
            f();
            best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        return best;
    };
    const double copy_s = time([&] {
        if (rank == 0) std::memcpy(b.data(), a.data(), bytes);
    });
    const double copy_both_s = time([&] { std::memcpy(b.data(), a.data(), bytes); });
    const double p2p_s = time([&] {
        for (std::size_t off = 0; off < bytes; off += chunk) {
            const int n = static_cast<int>(std::min<std::size_t>(chunk, bytes - off));
            if (rank == 0) MPI_Send(a.data() + off, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            if (rank == 1) MPI_Recv(b.data() + off, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        MPI_Barrier(MPI_COMM_WORLD);  // until the receiver has every byte
    });
    const double exchange_s = time([&] {
        std::vector<MPI_Request> requests;
        for (std::size_t off = 0; off < bytes; off += chunk) {
            const int n = static_cast<int>(std::min<std::size_t>(chunk, bytes - off));
            requests.emplace_back();
            MPI_Irecv(b.data() + off, n, MPI_BYTE, 1 - rank, 2, MPI_COMM_WORLD, &requests.back());
            requests.emplace_back();
            MPI_Isend(a.data() + off, n, MPI_BYTE, 1 - rank, 2, MPI_COMM_WORLD, &requests.back());
        }
        MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
        MPI_Barrier(MPI_COMM_WORLD);
    });
    const auto gbps = [&](double s) { return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0.0; };
    if (rank == 0)
        std::printf("bandwidth bytes=%zu memcpy_GBps=%.2f mpi_p2p_GBps=%.2f memcpy_both_GBps=%.2f "
                    "mpi_exchange_GBps=%.2f\n",
                    bytes, gbps(copy_s), gbps(p2p_s), gbps(copy_both_s), gbps(exchange_s));
    MPI_Finalize();
}
