// When to give up on an NCCL communicator: the decision of the poll loop that every
// NcclComm operation runs in, as pure logic (no GPU, no NCCL communicator), so it is tested
// with a fake status source and a fake clock.
//
// NCCL cannot tell that a peer process died: a collective whose peer is gone can spin on the
// GPU forever (it may report ncclRemoteError when a network connection drops, and may not).
// So flashrec never waits for NCCL in a blocking call. It uses non-blocking communicators
// (ncclConfig_t::blocking = 0) and polls, each round asking, in this order:
//   1. ncclCommGetAsyncError: an error (not ncclSuccess/ncclInProgress)   -> abort (comm_error)
//   2. the external abort flag, set by recovery / the control plane when
//      ULFM or the controller saw a failure                               -> abort (abort_requested)
//   3. is the operation complete?                                         -> complete
//   4. is the deadline (if any) past?                                     -> abort (deadline)
//   otherwise                                                             -> pending, poll again
// The abort flag wins over completion: once recovery started, the communicator includes a dead
// or departing rank and is rebuilt from the new `work` anyway.
#pragma once
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>

namespace flashrec::gpu {

class AbortPoller {
public:
    using Clock = std::chrono::steady_clock;
    using StatusSource = std::function<ncclResult_t()>;  // ncclCommGetAsyncError
    using TimeSource = std::function<Clock::time_point()>;

    enum class Verdict { pending, complete, comm_error, abort_requested, deadline };

    // `abort_flag` may be null (no external abort), `deadline` empty (none).
    AbortPoller(StatusSource status, const std::atomic<bool>* abort_flag,
                std::optional<Clock::time_point> deadline, TimeSource now = &Clock::now);

    // One round. `op_complete`: the operation's own completion signal (for a collective, the
    // query of an event recorded after it on its stream). Leave it empty for communicator
    // operations (init, finalize), which are complete when the async status is ncclSuccess.
    // A collective is complete only when its signal fired and the status is ncclSuccess.
    Verdict poll(std::optional<bool> op_complete = std::nullopt);

    // The communicator must be aborted (ncclCommAbort) after this verdict.
    static bool must_abort(Verdict verdict) {
        return verdict == Verdict::comm_error || verdict == Verdict::abort_requested ||
               verdict == Verdict::deadline;
    }
    static const char* name(Verdict verdict);

    // The status the last poll() saw.
    ncclResult_t last_status() const { return last_status_; }
    std::size_t polls() const { return polls_; }
    // How long to sleep before the next poll: nothing for the first rounds (a collective of a
    // few MiB is over in microseconds), then growing to `max_sleep`.
    std::chrono::microseconds backoff() const;
    static constexpr std::size_t spin_rounds = 32;
    static constexpr std::chrono::microseconds max_sleep{1000};

private:
    StatusSource status_;
    const std::atomic<bool>* abort_flag_;
    std::optional<Clock::time_point> deadline_;
    TimeSource now_;
    ncclResult_t last_status_ = ncclSuccess;
    std::size_t polls_ = 0;
};

// Polls until the verdict is not pending and returns it. `op_complete` is asked each round
// (empty function: a communicator operation); `sleep` is std::this_thread::sleep_for unless a
// test passes its own (e.g. one that advances a fake clock).
using SleepFunction = std::function<void(std::chrono::microseconds)>;
AbortPoller::Verdict poll_until_settled(AbortPoller& poller,
                                        const std::function<bool()>& op_complete = {},
                                        const SleepFunction& sleep = {});

}  // namespace flashrec::gpu
