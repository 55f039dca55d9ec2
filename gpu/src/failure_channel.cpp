#include "flashrec/gpu/failure_channel.hpp"

#include <mpi-ext.h>

#include <utility>

namespace flashrec::gpu {

FailureChannel FailureChannel::open(const ft::Comm& group, Clock::time_point deadline,
                                    std::chrono::microseconds min_interval) {
    FailureChannel c;
    c.channel_ = group.dup(group.name() + ".failure-channel");
    c.channel_.agree(1, deadline);  // from here on, revoking it cannot hit a peer still creating it
    c.min_interval_ = min_interval;
    return c;
}

FailureChannel::FailureChannel(FailureChannel&& other) noexcept
    : channel_(std::move(other.channel_)),
      min_interval_(other.min_interval_),
      seen_(other.seen_.load()),
      last_query_(other.last_query_.load()),
      queries_(other.queries_.load()) {}

FailureChannel& FailureChannel::operator=(FailureChannel&& other) noexcept {
    if (this != &other) {
        channel_ = std::move(other.channel_);
        min_interval_ = other.min_interval_;
        seen_.store(other.seen_.load());
        last_query_.store(other.last_query_.load());
        queries_.store(other.queries_.load());
    }
    return *this;
}

bool FailureChannel::failure_seen() noexcept {
    if (seen_.load(std::memory_order_acquire)) return true;
    if (!channel_.valid()) return false;
    const Clock::rep now = Clock::now().time_since_epoch().count();
    Clock::rep last = last_query_.load(std::memory_order_relaxed);
    const auto interval = std::chrono::duration_cast<Clock::duration>(min_interval_).count();
    if (last != 0 && now - last < interval) return false;
    // One caller asks at a time; the others keep the previous answer.
    if (!last_query_.compare_exchange_strong(last, now, std::memory_order_acq_rel)) return false;
    if (ask_mpi()) seen_.store(true, std::memory_order_release);
    return seen_.load(std::memory_order_acquire);
}

bool FailureChannel::ask_mpi() noexcept {
    queries_.fetch_add(1, std::memory_order_relaxed);
    MPI_Comm comm = channel_.get();
    // Progress first: a revoke or failure notice still in the network lands here.
    int flag = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, &status) != MPI_SUCCESS)
        return true;  // ERR_REVOKED, ERR_PROC_FAILED(_PENDING): either way the group is failing
    int revoked = 0;
    if (MPIX_Comm_is_revoked(comm, &revoked) != MPI_SUCCESS || revoked != 0) return true;
    MPI_Group failed = MPI_GROUP_NULL;
    if (MPIX_Comm_get_failed(comm, &failed) != MPI_SUCCESS) return true;
    int count = 0;
    MPI_Group_size(failed, &count);
    MPI_Group_free(&failed);
    return count > 0;
}

void FailureChannel::announce() noexcept {
    seen_.store(true, std::memory_order_release);
    channel_.revoke();
}

}  // namespace flashrec::gpu
