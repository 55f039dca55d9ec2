// The FailureChannel that ends NCCL waits when the job fails, over MPI and without a GPU
// (label ft, 3 ranks): a quiet channel reports nothing; an announce by one rank is seen by
// every rank; a rank that is killed is seen by the survivors; and the poll loop of an NCCL
// operation that can never complete (a fake one: no device needed) ends with abort_requested
// once the channel reports, the way DeviceDpCollectives wires it into NcclComm.
// Run by ctest as  fr-run --expect ... -- fr-mpirun -n 3 gpu_failure_channel_mpi.
// Prints "OK rank <r>: ..." per check passed, "FAIL rank <r>: ..." otherwise.
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "flashrec/errors.hpp"
#include "flashrec/ft/comm.hpp"
#include "flashrec/gpu/abort_poller.hpp"
#include "flashrec/gpu/failure_channel.hpp"

namespace {

using Clock = std::chrono::steady_clock;
int failures = 0;

void report(bool ok, int rank, const std::string& what) {
    std::printf("%s rank %d: %s\n", ok ? "OK" : "FAIL", rank, what.c_str());
    std::fflush(stdout);
    if (!ok) ++failures;
}

// Polls until the channel reports or `limit` passes; returns the milliseconds it took, -1 if never.
double wait_for_failure(flashrec::gpu::FailureChannel& channel, std::chrono::seconds limit) {
    const auto start = Clock::now();
    while (Clock::now() - start < limit) {
        if (channel.failure_seen())
            return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return -1;
}

Clock::time_point in(std::chrono::seconds s) { return Clock::now() + s; }

}  // namespace

int main(int argc, char** argv) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    int rank = -1;
    {
        flashrec::ft::Comm world = flashrec::ft::Comm::dup_world("world");
        rank = world.rank();

        // 1. Nobody failed, nobody announced: nothing to see, however often it is asked.
        {
            auto channel = flashrec::gpu::FailureChannel::open(world, in(std::chrono::seconds(20)),
                                                               std::chrono::microseconds(0));
            bool seen = false;
            for (int i = 0; i < 200; ++i) seen = seen || channel.failure_seen();
            report(!seen && channel.queries() == 200, rank, "a quiet channel reports no failure");
            world.agree(1, in(std::chrono::seconds(20)));  // nobody announces before all asked
        }

        // 2. Rank 1 announces (its recovery started): every rank sees it, rank 1 at once.
        {
            auto channel = flashrec::gpu::FailureChannel::open(world, in(std::chrono::seconds(20)));
            if (rank == 1) channel.announce();
            const double ms = wait_for_failure(channel, std::chrono::seconds(20));
            report(ms >= 0, rank, "announce by rank 1 seen (" + std::to_string(ms) + " ms)");
            world.agree(1, in(std::chrono::seconds(20)));
        }

        // 3. An NCCL-like wait that can never complete ends with abort_requested once a peer
        //    announces: before_poll (here: the status source) raises the flag from the channel.
        {
            auto channel = flashrec::gpu::FailureChannel::open(world, in(std::chrono::seconds(20)));
            std::atomic<bool> abort_flag{false};
            const auto deadline = Clock::now() + std::chrono::seconds(20);
            flashrec::gpu::AbortPoller poller(
                [&] {
                    if (channel.failure_seen()) abort_flag.store(true);
                    return ncclInProgress;  // the "collective" never settles
                },
                &abort_flag, deadline);
            std::thread announcer;
            if (rank == 0)
                announcer = std::thread([&] {
                    std::this_thread::sleep_for(std::chrono::milliseconds(200));
                    channel.announce();
                });
            const auto verdict = flashrec::gpu::poll_until_settled(poller, [] { return false; });
            if (announcer.joinable()) announcer.join();
            report(verdict == flashrec::gpu::AbortPoller::Verdict::abort_requested, rank,
                   std::string("a wait that never completes ends: ") + flashrec::gpu::AbortPoller::name(verdict));
            world.agree(1, in(std::chrono::seconds(20)));
        }

        // 4. Rank 2 dies: the survivors' channel reports it (ULFM knows, no message needed).
        {
            auto channel = flashrec::gpu::FailureChannel::open(world, in(std::chrono::seconds(20)));
            if (rank == 2) {
                std::printf("DYING rank 2\n");
                std::fflush(stdout);
                std::raise(SIGKILL);
            }
            const double ms = wait_for_failure(channel, std::chrono::seconds(30));
            report(ms >= 0, rank, "death of rank 2 seen (" + std::to_string(ms) + " ms)");
        }
    }
    if (failures == 0) std::printf("DONE rank %d\n", rank);
    std::fflush(stdout);
    MPI_Finalize();  // fr-mpirun's async_mpi_finalize: no hang with a dead peer (docs/ulfm-traps.md trap 2)
    return failures == 0 ? 0 : 1;
}
