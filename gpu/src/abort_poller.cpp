#include "flashrec/gpu/abort_poller.hpp"

#include <algorithm>
#include <thread>
#include <utility>

namespace flashrec::gpu {

AbortPoller::AbortPoller(StatusSource status, const std::atomic<bool>* abort_flag,
                         std::optional<Clock::time_point> deadline, TimeSource now)
    : status_(std::move(status)),
      abort_flag_(abort_flag),
      deadline_(deadline),
      now_(now ? std::move(now) : TimeSource(&Clock::now)) {}

AbortPoller::Verdict AbortPoller::poll(std::optional<bool> op_complete) {
    ++polls_;
    last_status_ = status_();
    if (last_status_ != ncclSuccess && last_status_ != ncclInProgress) return Verdict::comm_error;
    if (abort_flag_ != nullptr && abort_flag_->load(std::memory_order_acquire))
        return Verdict::abort_requested;
    if (last_status_ == ncclSuccess && op_complete.value_or(true)) return Verdict::complete;
    if (deadline_ && now_() >= *deadline_) return Verdict::deadline;
    return Verdict::pending;
}

const char* AbortPoller::name(Verdict verdict) {
    switch (verdict) {
        case Verdict::pending: return "pending";
        case Verdict::complete: return "complete";
        case Verdict::comm_error: return "comm_error";
        case Verdict::abort_requested: return "abort_requested";
        case Verdict::deadline: return "deadline";
    }
    return "unknown";
}

std::chrono::microseconds AbortPoller::backoff() const {
    if (polls_ < spin_rounds) return std::chrono::microseconds(0);
    // 1, 2, 4, ... µs after the spin rounds, capped.
    const std::size_t doublings = std::min<std::size_t>(polls_ - spin_rounds, 20);
    const auto sleep = std::chrono::microseconds(1LL << doublings);
    return std::min(sleep, max_sleep);
}

AbortPoller::Verdict poll_until_settled(AbortPoller& poller, const std::function<bool()>& op_complete,
                                        const SleepFunction& sleep) {
    for (;;) {
        const AbortPoller::Verdict verdict =
            op_complete ? poller.poll(op_complete()) : poller.poll(std::nullopt);
        if (verdict != AbortPoller::Verdict::pending) return verdict;
        const auto pause = poller.backoff();
        if (sleep)
            sleep(pause);
        else if (pause.count() == 0)
            std::this_thread::yield();
        else
            std::this_thread::sleep_for(pause);
    }
}

}  // namespace flashrec::gpu
