// Write and restore figures of the HDF5 fallback checkpoint, measured in one MPI run (driven by
// bench/checkpoint/ckpt_bench.py, which also measures the step-time ratio with the trainer).
//
//   mpirun -n N ckpt_write_bench --dir DIR [--mib-per-rank S] [--reps R]
//
// Every rank holds S MiB of state shaped like the example trainer's (params f32 1/2, master f64
// 1/4, adam_m and adam_v f32 1/8 each) in live memory and in a committed shm snapshot, and each
// repetition measures, in alternating order, on every rank at the same time:
//   dd         the same bytes written sequentially to one file per rank: one write(2) per
//              buffer, then fsync (what `dd conv=fsync` does)
//   rankfile   ft::CheckpointWriter::write_rank_file of the same buffers (HDF5, fsynced), with
//              their checksums computed beforehand, as the Checkpointer does
//   checkpoint runtime::Checkpointer: committed(v) + finish(), the whole protocol the step loop
//              runs in the background (copy-out of the snapshot, rank file, gather, manifest,
//              agree, publish, prune)
// Then restore of the same state into the live buffers:
//   hdf5-cold  Checkpointer::restore after the files were evicted from the page cache
//   hdf5-warm  Checkpointer::restore again (files in the page cache)
//   shm        the survivor's path: own committed snapshot (SnapshotReader, verified) + memcpy
//   replica    the replacement's path: the state sent by a peer over MPI (ft::Transfers)
// Rank 0 prints "RESULT <what> <rank> <bytes> <seconds>" lines (rank "all": aggregate, from the
// earliest start to the latest end of a barrier-aligned start) and "DONE".
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "flashrec/ft/checkpoint.hpp"
#include "flashrec/ft/checksum.hpp"
#include "flashrec/ft/comm.hpp"
#include "flashrec/ft/snapshot.hpp"
#include "flashrec/flashrec.hpp"
#include "flashrec/runtime/checkpointing.hpp"
#include "flashrec/runtime/state_registry.hpp"

namespace fs = std::filesystem;
using namespace flashrec;

namespace {

struct Buffer {
    std::string name;
    DType type;
    std::vector<std::byte> data;
};

void fill(std::vector<std::byte>& data, std::uint64_t seed) {
    std::uint64_t x = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (std::size_t i = 0; i + 8 <= data.size(); i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        std::memcpy(&data[i], &x, 8);
    }
}

// This rank's snapshot segments, removed on the way out whatever happens.
std::string g_job, g_key;

void die(const std::string& what) {
    std::fprintf(stderr, "ckpt_write_bench: %s\n", what.c_str());
    if (!g_job.empty()) ft::unlink_snapshot(g_job, g_key);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

// Every rank's [start, end] to rank 0, which prints one line per rank and the aggregate.
void report(const char* what, std::size_t bytes, double start, double end) {
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double mine[2] = {start, end};
    std::vector<double> all(static_cast<std::size_t>(2 * size));
    MPI_Gather(mine, 2, MPI_DOUBLE, all.data(), 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank != 0) return;
    double first = all[0], last = all[1];
    for (int r = 0; r < size; ++r) {
        const double s = all[static_cast<std::size_t>(2 * r)], e = all[static_cast<std::size_t>(2 * r + 1)];
        std::printf("RESULT %s %d %zu %.6f\n", what, r, bytes, e - s);
        first = std::min(first, s);
        last = std::max(last, e);
    }
    std::printf("RESULT %s all %zu %.6f\n", what, bytes * static_cast<std::size_t>(size), last - first);
    std::fflush(stdout);
}

void write_all(int fd, const std::byte* data, std::size_t bytes, const std::string& path) {
    while (bytes > 0) {
        const ssize_t n = ::write(fd, data, std::min<std::size_t>(bytes, std::size_t{1} << 30));
        if (n < 0) die("write " + path + ": " + std::strerror(errno));
        data += n;
        bytes -= static_cast<std::size_t>(n);
    }
}

// Drops a file's pages from the page cache (it was fsynced, so they are clean).
void evict(const fs::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) return;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    std::string dir;
    double mib = 64;
    int reps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string arg = argv[i];
        if (arg == "--dir") dir = argv[i + 1];
        else if (arg == "--mib-per-rank") mib = std::atof(argv[i + 1]);
        else if (arg == "--reps") reps = std::atoi(argv[i + 1]);
        else die("unknown option " + arg);
    }
    if (dir.empty()) die("usage: ckpt_write_bench --dir DIR [--mib-per-rank S] [--reps R]");
    try {
        const auto total = static_cast<std::size_t>(mib * (1 << 20)) / 64 * 64;
        std::vector<Buffer> buffers = {{"params", DType::f32, std::vector<std::byte>(total / 2)},
                                       {"master", DType::f64, std::vector<std::byte>(total / 4)},
                                       {"adam_m", DType::f32, std::vector<std::byte>(total / 8)},
                                       {"adam_v", DType::f32, std::vector<std::byte>(total / 8)}};
        std::size_t bytes = 0;
        for (std::size_t b = 0; b < buffers.size(); ++b) {
            fill(buffers[b].data, static_cast<std::uint64_t>(rank * 16) + b);
            bytes += buffers[b].data.size();
        }
        const std::string role = topology::role_key({rank, 0, 0});
        int pid = static_cast<int>(getpid());
        MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
        const std::string job = "bench-ckpt-" + std::to_string(pid);
        const fs::path root = fs::path(dir) / ("run-" + std::to_string(pid));
        if (rank == 0) fs::create_directories(root / "dd");
        MPI_Barrier(MPI_COMM_WORLD);

        ft::SnapshotLayout layout;
        std::vector<ProtectedBuffer> registered;
        for (auto& b : buffers) {
            layout.push_back({b.name, b.data.size()});
            registered.push_back({b.name, b.data.data(), b.data.size(), b.type, Redundancy::sharded});
        }
        const std::string key = "bench." + role;
        g_job = job, g_key = key;
        ft::SnapshotStore store(job, key, layout);
        const config::Config cfg = config::parse(
            "job: {name: " + job + ", ranks_per_node: " + std::to_string(size) + ", dp: " + std::to_string(size) +
            ", steps: 1000000}\n"
            "checkpoint: {dir: " + (root / "ckpt").string() + ", every_steps: 1, keep: 1}\n",
            "ckpt_write_bench");
        const topology::Shape shape{size, 1, 1};
        std::vector<ft::BufferToSave> save;
        const ft::Dtype dtypes[] = {ft::Dtype::float32, ft::Dtype::float64, ft::Dtype::float32, ft::Dtype::float32};
        // With their checksums, as the Checkpointer passes them (it hashes while copying out): the
        // rank file's time is then the HDF5 write and fsync alone, like dd's.
        for (std::size_t b = 0; b < buffers.size(); ++b)
            save.push_back({buffers[b].name, dtypes[b], buffers[b].data.data(), buffers[b].data.size(),
                            ft::checksum(buffers[b].data.data(), buffers[b].data.size())});
        const ft::CheckpointWriter writer(root / "rankfile");

        std::int64_t version = 0;
        for (int rep = 0; rep < reps; ++rep) {
            for (int k = 0; k < 3; ++k) {
                const int what = (k + rep) % 3;  // rotate the order: no method always goes first
                if (what == 0) {
                    const fs::path path = root / "dd" / ("rank-" + role + ".bin");
                    MPI_Barrier(MPI_COMM_WORLD);
                    const double t0 = MPI_Wtime();
                    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
                    if (fd < 0) die("open " + path.string() + ": " + std::strerror(errno));
                    for (auto& b : buffers) write_all(fd, b.data.data(), b.data.size(), path.string());
                    if (::fsync(fd) != 0) die("fsync " + path.string());
                    ::close(fd);
                    const double t1 = MPI_Wtime();
                    report("dd", bytes, t0, t1);
                    fs::remove(path);
                } else if (what == 1) {
                    char tag[17] = {};
                    if (rank == 0) std::snprintf(tag, sizeof tag, "%s", ft::CheckpointWriter::new_attempt_tag().c_str());
                    MPI_Bcast(tag, sizeof tag, MPI_CHAR, 0, MPI_COMM_WORLD);
                    const fs::path staging = writer.create_staging_dir(rep, tag);
                    ft::CheckpointInfo info{rep, 0, {size, 1, 1}, flashrec::version(), "ckpt-write-bench"};
                    MPI_Barrier(MPI_COMM_WORLD);
                    const double t0 = MPI_Wtime();
                    writer.write_rank_file(staging, role, info, save);
                    const double t1 = MPI_Wtime();
                    report("rankfile", bytes, t0, t1);
                    MPI_Barrier(MPI_COMM_WORLD);
                    if (rank == 0) writer.cleanup_incomplete();
                } else {
                    ++version;
                    const ft::WriteView view = store.begin_write(version, 0);
                    for (std::size_t b = 0; b < buffers.size(); ++b)
                        std::memcpy(view.buffers[b].bytes.data(), buffers[b].data.data(), buffers[b].data.size());
                    store.commit();
                    const ft::Comm world = ft::Comm::dup_world("bench-checkpoint");
                    runtime::CheckpointIdentity id{shape, rank, role, key, 0};
                    MPI_Barrier(MPI_COMM_WORLD);
                    const double t0 = MPI_Wtime();
                    {
                        runtime::Checkpointer checkpointer(cfg, registered, id, world.dup("checkpoint"));
                        checkpointer.committed(version);
                        checkpointer.finish();
                    }
                    const double t1 = MPI_Wtime();
                    report("checkpoint", bytes, t0, t1);
                }
            }
        }

        // Restore: the newest checkpoint holds `version`; the snapshot store holds it too.
        for (const auto& d : ft::CheckpointReader::list_complete(root / "ckpt"))
            for (const auto& entry : fs::directory_iterator(d.path)) evict(entry.path());
        MPI_Barrier(MPI_COMM_WORLD);
        for (const char* what : {"hdf5-cold", "hdf5-warm"}) {
            for (auto& b : buffers) std::memset(b.data.data(), 0, b.data.size());
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = MPI_Wtime();
            runtime::Checkpointer::restore(cfg, registered, role, version);
            const double t1 = MPI_Wtime();
            report(what, bytes, t0, t1);
        }
        {
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = MPI_Wtime();
            const ft::SnapshotReader reader(job, key, layout);
            const ft::SnapshotView view = reader.committed(version);
            if (!view.ok) die("snapshot: " + view.problem);
            for (std::size_t b = 0; b < buffers.size(); ++b)
                std::memcpy(buffers[b].data.data(), view.buffers[b].bytes.data(), buffers[b].data.size());
            const double t1 = MPI_Wtime();
            report("shm", bytes, t0, t1);
        }
        if (size > 1) {
            // Each rank's state comes from the next rank's memory (ring replica), all at once.
            const ft::Comm world = ft::Comm::dup_world("bench-replica");
            std::vector<std::vector<std::byte>> incoming;
            for (auto& b : buffers) incoming.emplace_back(b.data.size());
            MPI_Barrier(MPI_COMM_WORLD);
            const double t0 = MPI_Wtime();
            ft::Transfers transfers(world);
            const int from = (rank + 1) % size, to = (rank + size - 1) % size;
            for (std::size_t b = 0; b < buffers.size(); ++b) {
                transfers.receive(incoming[b].data(), incoming[b].size(), from, static_cast<int>(b));
                transfers.send(buffers[b].data.data(), buffers[b].data.size(), to, static_cast<int>(b));
            }
            transfers.wait("replica restore");
            const double t1 = MPI_Wtime();
            report("replica", bytes, t0, t1);
        }

        MPI_Barrier(MPI_COMM_WORLD);
        ft::unlink_snapshot(job, key);
        if (rank == 0) {
            fs::remove_all(root);
            std::printf("DONE\n");
        }
    } catch (const std::exception& e) {
        die(e.what());
    }
    MPI_Finalize();
    return 0;
}
