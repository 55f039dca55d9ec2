// How an NCCL wait learns that the job is failing, with no thread of its own (docs/gpu.md). NCCL cannot see a dead peer, and a rank that abandons a step because *its* MPI call
// failed never joins the NCCL operation its DP peers are waiting in. So each DP group keeps a
// FailureChannel, a duplicate of the DP communicator on which no message is ever sent:
//
//   - failure_seen(), called from the NCCL poll loop (NcclOptions::before_poll), asks MPI
//     locally whether a member failed (MPIX_Comm_get_failed) or someone revoked the channel,
//     and drives MPI progress (MPI_Iprobe) so that a failure notice or revoke in flight
//     arrives even while this process makes no other MPI call;
//   - announce() revokes the channel: ULFM tells every member, whose failure_seen() becomes
//     true, whose NCCL operation then aborts (ncclCommAbort) instead of waiting forever for a
//     rank that has gone into recovery.
//
// Pure MPI, no GPU: tested over MPI where there is no device.
#pragma once
#include <mpi.h>

#include <atomic>
#include <chrono>

#include "flashrec/ft/comm.hpp"

namespace flashrec::gpu {

class FailureChannel {
public:
    using Clock = std::chrono::steady_clock;

    FailureChannel() = default;
    // Collective over `group`: a duplicate of it, then an agreement on it, because revoking a
    // communicator a peer is still creating crashes that peer (docs/ulfm-traps.md trap 6). Throws
    // ProcessFailure / CommRevoked / DeadlineExceeded like any flashrec MPI call.
    static FailureChannel open(const ft::Comm& group, Clock::time_point deadline,
                               std::chrono::microseconds min_interval = std::chrono::microseconds(100));

    FailureChannel(FailureChannel&& other) noexcept;
    FailureChannel& operator=(FailureChannel&& other) noexcept;
    FailureChannel(const FailureChannel&) = delete;
    FailureChannel& operator=(const FailureChannel&) = delete;
    ~FailureChannel() = default;

    bool valid() const { return channel_.valid(); }
    // True once a member failed or the channel was revoked (by anyone, this process included);
    // stays true. Asks MPI at most once per `min_interval` (the poll loop spins); in between,
    // returns what it last found. Local, never blocks, never throws. Thread-safe.
    bool failure_seen() noexcept;
    // Revokes the channel: every member's failure_seen() becomes true. Never throws.
    void announce() noexcept;
    // How many times failure_seen() asked MPI (tests).
    std::size_t queries() const { return queries_.load(std::memory_order_relaxed); }

private:
    bool ask_mpi() noexcept;

    ft::Comm channel_;
    std::chrono::microseconds min_interval_{100};
    std::atomic<bool> seen_{false};
    std::atomic<Clock::rep> last_query_{0};
    std::atomic<std::size_t> queries_{0};
};

}  // namespace flashrec::gpu
