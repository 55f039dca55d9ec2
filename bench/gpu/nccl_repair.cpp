// nccl_repair MODE [MIB] [WHEN]: one real failure of an NCCL communicator and its repair, timed.
//   MODE shrink: the survivors revoke the communicator (ncclCommRevoke) and make theirs from it
//                once the revoke settled (ncclCommShrink, no new bootstrap); the parent is
//                aborted after.
//   MODE shrink-abort: no revoke; ncclCommShrink(NCCL_SHRINK_ABORT) ends what is in flight.
//   MODE reinit: the survivors abort it (ncclCommAbort) and make a new one from the repaired MPI
//                communicator (unique id over MPI, ncclCommInitRankConfig): what flashrec's
//                runtime does after every repair.
// Every rank of the job (fr-mpirun -n N) joins an NCCL communicator over the world, runs a few
// all-reduces of MIB MiB (default 64), then the last rank SIGKILLs itself:
//   WHEN during (default): while the others are in the next all-reduce. NCCL itself sees the
//                closed connections and marks the communicator failed (ncclRemoteError).
//   WHEN between: between two collectives. The survivors learn it from MPI alone (the
//                FailureChannel) and revoke/abort NCCL before NCCL has seen anything.
// The survivors repair MPI (revoke + shrink, not timed), then NCCL the MODE's way (timed), and
// check that an all-reduce on the new communicator sums the survivors' values exactly. A shrink
// NCCL refuses falls back to abort + re-init (fallback=1). Rank 0 prints one line
//   nccl_repair mode=M when=W ranks=N survivors=S fallback=F notice_ms=.. release_ms=.. quiesce_ms=.. repair_ms=.. first_allreduce_ms=.. allreduce_ms=.. nccl=V
// and every survivor "OK rank r: ..." / "FAIL rank r: ..." (bench/gpu/nccl_repair.py, the
// gpu.nccl_repair_* tests). Several ranks on one GPU need FLASHREC_GPU_SHARED=1.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "flashrec/errors.hpp"
#include "flashrec/ft/comm.hpp"
#include "flashrec/gpu/cuda_check.hpp"
#include "flashrec/gpu/device.hpp"
#include "flashrec/gpu/failure_channel.hpp"
#include "flashrec/gpu/handles.hpp"
#include "flashrec/gpu/nccl_comm.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using flashrec::gpu::NcclComm;
using flashrec::gpu::NcclError;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

int report(bool ok, int rank, const std::string& what) {
    std::printf("%s rank %d: %s\n", ok ? "OK" : "FAIL", rank, what.c_str());
    std::fflush(stdout);
    return ok ? 0 : 1;
}

// Rank r's values: distinct per rank, small integers, so that any sum is exact in float.
std::vector<float> values_of(int rank, std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((rank + 1) * 3 + static_cast<int>(i % 7));
    return v;
}

// One all-reduce of the rank's values; true when the result is the sum over `ranks` (world
// ranks of the members, in any order).
bool allreduce_is_exact(NcclComm& nccl, flashrec::gpu::DeviceBuffer& data, std::size_t n, int my_world_rank,
                        const std::vector<int>& ranks, cudaStream_t stream, double* ms) {
    const std::vector<float> mine = values_of(my_world_rank, n);
    FLASHREC_CUDA_CHECK(cudaMemcpy(data.data(), mine.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    const auto start = Clock::now();
    nccl.allreduce_sum(data.as<float>(), n, stream);
    *ms = ms_since(start);
    std::vector<float> got(n);
    FLASHREC_CUDA_CHECK(cudaMemcpy(got.data(), data.data(), n * sizeof(float), cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r : ranks) want += static_cast<float>((r + 1) * 3 + static_cast<int>(i % 7));
        if (got[i] != want) return false;
    }
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    const std::string mode = argc > 1 ? argv[1] : "";
    const std::size_t mib = argc > 2 ? static_cast<std::size_t>(std::atoi(argv[2])) : 64;
    const std::string when = argc > 3 ? argv[3] : "during";
    int failures = 0, rank = -1;
    try {
        if ((mode != "shrink" && mode != "shrink-abort" && mode != "reinit") || (when != "during" && when != "between"))
            throw flashrec::Error("usage: nccl_repair shrink|shrink-abort|reinit [MIB] [during|between]");
        const bool shrinking = mode != "reinit";
        if (shrinking && !NcclComm::can_shrink())
            throw flashrec::Error("mode shrink: the NCCL loaded has no ncclCommRevoke/ncclCommShrink (2.28.7+)");
        flashrec::ft::Comm world = flashrec::ft::Comm::dup_world("world");
        rank = world.rank();
        const int size = world.size(), victim = size - 1;
        if (size < 3) throw flashrec::Error("nccl_repair needs 3 ranks or more");
        FLASHREC_CUDA_CHECK(cudaSetDevice(flashrec::gpu::device_for_local_rank(flashrec::gpu::local_rank_from_env())));
        flashrec::gpu::Stream stream = flashrec::gpu::Stream::create();
        const std::size_t n = mib * (1 << 20) / sizeof(float);
        flashrec::gpu::DeviceBuffer data = flashrec::gpu::DeviceBuffer::allocate(n * sizeof(float));

        std::atomic<bool> abort{false};
        auto channel = flashrec::gpu::FailureChannel::open(world, Clock::now() + std::chrono::seconds(60));
        flashrec::gpu::NcclOptions options;
        options.abort_flag = &abort;
        options.timeout = std::chrono::seconds(60);
        options.before_poll = [&] {
            if (channel.failure_seen()) abort.store(true);
        };
        options.keep_after_failure = mode == "shrink";
        NcclComm nccl = NcclComm::create(world, options);

        std::vector<int> everyone(static_cast<std::size_t>(size));
        for (int r = 0; r < size; ++r) everyone[static_cast<std::size_t>(r)] = r;
        std::vector<double> times;
        for (int i = 0; i < 4; ++i) {
            double ms = 0;
            if (!allreduce_is_exact(nccl, data, n, rank, everyone, stream.get(), &ms))
                failures += report(false, rank, "all-reduce before the failure is not exact");
            times.push_back(ms);
        }
        std::sort(times.begin(), times.end());
        const double allreduce_ms = times[times.size() / 2];

        world.agree(1, Clock::now() + std::chrono::seconds(60));  // everyone is here: now fail
        if (rank == victim) std::raise(SIGKILL);
        const auto failed_at = Clock::now();
        double notice_ms = -1;
        if (when == "during") {
            try {
                nccl.allreduce_sum(data.as<float>(), n, stream.get());
                failures += report(false, rank, "the all-reduce with a dead member completed");
            } catch (const NcclError& e) {
                notice_ms = ms_since(failed_at);
                failures += report(e.peer_failure(), rank, std::string("the all-reduce ended: ") + e.what());
            }
        } else {
            while (!channel.failure_seen()) std::this_thread::sleep_for(std::chrono::microseconds(100));
            notice_ms = ms_since(failed_at);
            failures += report(true, rank, "MPI reported the failure");
            if (mode == "shrink")
                nccl.revoke();
            else if (mode == "reinit")
                nccl.abort();
        }
        if (mode != "shrink-abort" || when == "during")
            failures += report(!nccl.valid(), rank,
                               nccl.revoked() ? "the communicator is revoked, kept for the shrink"
                                              : "the communicator is aborted");
        // MPI's repair (what flashrec's recovery does; not part of the NCCL figures).
        world.revoke();
        flashrec::ft::Comm survivors = world.shrink("survivors");
        survivors.agree(1, Clock::now() + std::chrono::seconds(60));
        abort.store(false);

        const auto repair_started = Clock::now();
        double release_ms = 0, quiesce_ms = 0;
        if (nccl.revoked()) {  // the revoke's settling apart from the shrink itself (shrink() waits for it too)
            ncclResult_t status = ncclInProgress;
            while (status == ncclInProgress && ncclCommGetAsyncError(nccl.get(), &status) == ncclSuccess)
                std::this_thread::sleep_for(std::chrono::microseconds(50));
            quiesce_ms = ms_since(repair_started);
        }
        NcclComm repaired;
        flashrec::gpu::NcclOptions after = options;
        after.before_poll = {};  // the channel holds the dead rank: it always reports now
        int fallback = 0;
        if (shrinking) {
            const int excluded[] = {victim};
            try {
                repaired = nccl.shrink(excluded, after);
            } catch (const NcclError& e) {
                report(true, rank, std::string("NCCL refused the shrink; abort + re-init instead: ") + e.what());
                fallback = 1;
            }
        }
        if (mode == "reinit" || fallback) {
            const auto release_started = Clock::now();
            nccl.abort();
            release_ms = ms_since(release_started);
            repaired = NcclComm::create(survivors, after);
        }
        const double repair_ms = ms_since(repair_started);
        failures += report(repaired.valid() && repaired.size() == size - 1 && repaired.rank() == survivors.rank(), rank,
                           "the repaired communicator has the survivors, in order (rank " +
                               std::to_string(repaired.rank()) + " of " + std::to_string(repaired.size()) + ")");
        std::vector<int> alive(everyone.begin(), everyone.end() - 1);
        double first_ms = 0;
        failures += report(allreduce_is_exact(repaired, data, n, rank, alive, stream.get(), &first_ms), rank,
                           "an all-reduce over the survivors is exact");
        repaired.finalize();
        int version = 0;
        ncclGetVersion(&version);
        if (rank == 0)
            std::printf("nccl_repair mode=%s when=%s ranks=%d survivors=%d fallback=%d mib=%zu notice_ms=%.3f "
                        "release_ms=%.3f quiesce_ms=%.3f repair_ms=%.3f first_allreduce_ms=%.3f allreduce_ms=%.3f nccl=%d\n",
                        mode.c_str(), when.c_str(), size, size - 1, fallback, mib, notice_ms, release_ms, quiesce_ms, repair_ms,
                        first_ms, allreduce_ms, version);
        std::printf("DONE rank %d\n", rank);
        std::fflush(stdout);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "nccl_repair rank %d: %s\n", rank, e.what());
        failures += 1;
    }
    MPI_Finalize();
    return failures == 0 ? 0 : 1;
}
