// Reference bandwidths for the protection benchmark, measured in the same run (2 ranks):
//   memcpy_GBps       memcpy of N bytes (what the snapshot copy does) by rank 0 alone;
//   memcpy_both_GBps  the same with both ranks copying at once (per rank), as the ranks'
//                     snapshot threads do in a protection run: they share the memory channels;
//   mpi_p2p_GBps      MPI point-to-point, N bytes from rank 0 to rank 1 in 4 MiB messages
//                     (the reference for replication);
//   mpi_exchange_GBps both ranks send N bytes to each other at once (per direction), as a ring
//                     of two does: each core pays the send of its payload and the receive of its
//                     predecessor's (TCP loopback copies on both sides);
//   tcp_GBps, tcp_cpu_s_per_GB
//                     the kernel's own TCP loopback, without MPI: rank 0 write()s N bytes to rank
//                     1's blocking read() over 127.0.0.1, and the CPU both processes used for
//                     it (user + system, getrusage) per GB moved one way. No MPI library (no
//                     polling) is involved, so this is what every byte replicated over TCP
//                     loopback costs the machine at least, whatever the software above it.
#include <arpa/inet.h>
#include <mpi.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

double process_cpu_seconds() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    const auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
    return s(u.ru_utime) + s(u.ru_stime);
}

void check_sys(bool ok, const char* what) {
    if (ok) return;
    std::perror(what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

// Rank 0 -> rank 1 over a loopback TCP socket, `rounds` x `bytes`: wall seconds of the
// slowest side and the CPU seconds of both processes together.
std::pair<double, double> kernel_tcp(int rank, std::vector<char>& a, std::vector<char>& b, int rounds) {
    int port = 0, listener = -1, fd = -1;
    if (rank == 0) {
        listener = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        check_sys(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                      ::listen(listener, 1) == 0,
                  "bench_bandwidth: listen on 127.0.0.1");
        socklen_t len = sizeof addr;
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
        port = ntohs(addr.sin_port);
    }
    MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 1) {
        fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        addr.sin_port = htons(static_cast<std::uint16_t>(port));
        check_sys(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0,
                  "bench_bandwidth: connect to 127.0.0.1");
    } else {
        fd = ::accept(listener, nullptr, nullptr);
        check_sys(fd >= 0, "bench_bandwidth: accept");
        ::close(listener);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const double cpu0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < rounds; ++r)
        for (std::size_t done = 0; done < a.size();) {
            const ssize_t n = rank == 0 ? ::write(fd, a.data() + done, a.size() - done)
                                        : ::read(fd, b.data() + done, b.size() - done);
            check_sys(n > 0, "bench_bandwidth: loopback TCP transfer");
            done += static_cast<std::size_t>(n);
        }
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double cpu = process_cpu_seconds() - cpu0, cpu_both = 0, wall_max = 0;
    ::close(fd);
    MPI_Reduce(&cpu, &cpu_both, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&wall, &wall_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    return {wall_max, cpu_both};
}

}  // namespace

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
    // Enough rounds for ~1 GB, so that the CPU clocks' ticks are small against it.
    const int rounds = static_cast<int>(std::max<std::size_t>(1, (1u << 30) / std::max<std::size_t>(bytes, 1)));
    const auto [tcp_s, tcp_cpu_s] = kernel_tcp(rank, a, b, rounds);
    const double tcp_gb = static_cast<double>(bytes) * rounds / 1e9;
    const auto gbps = [&](double s) { return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0.0; };
    if (rank == 0)
        std::printf("bandwidth bytes=%zu memcpy_GBps=%.2f mpi_p2p_GBps=%.2f memcpy_both_GBps=%.2f "
                    "mpi_exchange_GBps=%.2f tcp_GBps=%.2f tcp_cpu_s_per_GB=%.4f\n",
                    bytes, gbps(copy_s), gbps(p2p_s), gbps(copy_both_s), gbps(exchange_s),
                    tcp_gb / tcp_s, tcp_cpu_s / tcp_gb);
    MPI_Finalize();
}
