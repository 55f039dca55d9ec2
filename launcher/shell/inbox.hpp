// What the controller's thread hands the main loop: a hung, superseded or lost rank, or a record
// (parsed on the main loop, where a bad one is logged), with the time it was seen. Thread-safe; an eventfd
// wakes the loop's poll.
#pragma once
#include <nlohmann/json.hpp>

#include <deque>
#include <mutex>
#include <variant>

#include "attempt.hpp"
#include "job_inputs.hpp"

namespace flashrec::launcher {

struct Queued {
    std::variant<HangReported, RankSuperseded, RankLost, nlohmann::json> what;
    Now seen;
};

class Inbox {
public:
    Inbox();  // throws flashrec::Error without an eventfd
    // The fd to poll for POLLIN; take() empties it.
    int wake_fd() const { return wake_.get(); }
    void push(Queued queued);
    std::deque<Queued> take();

private:
    Fd wake_;
    std::mutex mutex_;
    std::deque<Queued> queue_;
};

}  // namespace flashrec::launcher
