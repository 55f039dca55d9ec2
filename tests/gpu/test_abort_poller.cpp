// The decision logic of NCCL's poll loop (when to abort a communicator), with a fake status
// source and a fake clock: no GPU, no NCCL communicator. Label unit.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "flashrec/gpu/abort_poller.hpp"

using namespace flashrec::gpu;
using Verdict = AbortPoller::Verdict;
using Clock = AbortPoller::Clock;
using namespace std::chrono_literals;

namespace {

// ncclCommGetAsyncError as a script: one answer per poll, the last one repeated.
struct FakeStatus {
    std::vector<ncclResult_t> script;
    std::size_t calls = 0;
    ncclResult_t operator()() {
        const ncclResult_t r = script[std::min(calls, script.size() - 1)];
        ++calls;
        return r;
    }
};

struct FakeClock {
    Clock::time_point now{Clock::duration(1'000'000)};
};

}  // namespace

TEST_CASE("a communicator operation completes when the async status leaves ncclInProgress") {
    FakeStatus status{{ncclInProgress, ncclInProgress, ncclInProgress, ncclSuccess}};
    AbortPoller poller(std::ref(status), nullptr, std::nullopt);
    CHECK(poller.poll() == Verdict::pending);
    CHECK(poller.poll() == Verdict::pending);
    CHECK(poller.poll() == Verdict::pending);
    CHECK(poller.last_status() == ncclInProgress);
    CHECK(poller.poll() == Verdict::complete);
    CHECK(poller.last_status() == ncclSuccess);
    CHECK(poller.polls() == 4);
}

TEST_CASE("a collective completes when its event fired and the status is ncclSuccess") {
    FakeStatus status{{ncclSuccess}};
    AbortPoller poller(std::ref(status), nullptr, std::nullopt);
    CHECK(poller.poll(false) == Verdict::pending);
    CHECK(poller.poll(false) == Verdict::pending);
    CHECK(poller.poll(true) == Verdict::complete);

    // Enqueued-but-not-yet (ncclInProgress) is not complete, whatever the event says.
    FakeStatus enqueuing{{ncclInProgress}};
    AbortPoller early(std::ref(enqueuing), nullptr, std::nullopt);
    CHECK(early.poll(true) == Verdict::pending);
}

TEST_CASE("an asynchronous NCCL error means abort, even if the operation looks complete") {
    for (ncclResult_t error : {ncclRemoteError, ncclSystemError, ncclInternalError,
                               ncclUnhandledCudaError, ncclInvalidUsage}) {
        CAPTURE(error);
        FakeStatus status{{ncclSuccess, error}};
        AbortPoller poller(std::ref(status), nullptr, std::nullopt);
        CHECK(poller.poll(false) == Verdict::pending);
        const Verdict v = poller.poll(true);
        CHECK(v == Verdict::comm_error);
        CHECK(AbortPoller::must_abort(v));
        CHECK(poller.last_status() == error);
    }
}

TEST_CASE("the external abort flag ends the wait, and wins over completion") {
    std::atomic<bool> abort{false};
    FakeStatus status{{ncclSuccess}};
    AbortPoller poller(std::ref(status), &abort, std::nullopt);
    CHECK(poller.poll(false) == Verdict::pending);
    abort = true;
    CHECK(poller.poll(false) == Verdict::abort_requested);
    CHECK(poller.poll(true) == Verdict::abort_requested);  // recovery started: the comm goes
    CHECK(AbortPoller::must_abort(Verdict::abort_requested));

    // Init in progress + abort requested: abort (do not wait for a peer that may be dead).
    FakeStatus init{{ncclInProgress}};
    AbortPoller init_poller(std::ref(init), &abort, std::nullopt);
    CHECK(init_poller.poll() == Verdict::abort_requested);
}

TEST_CASE("an NCCL error is reported as such even when the abort flag is set too") {
    std::atomic<bool> abort{true};
    FakeStatus status{{ncclRemoteError}};
    AbortPoller poller(std::ref(status), &abort, std::nullopt);
    CHECK(poller.poll(false) == Verdict::comm_error);
}

TEST_CASE("the deadline ends a wait that nothing else ends") {
    FakeClock clock;
    FakeStatus status{{ncclSuccess}};
    const auto deadline = clock.now + 5ms;
    AbortPoller poller(std::ref(status), nullptr, deadline, [&] { return clock.now; });
    CHECK(poller.poll(false) == Verdict::pending);
    clock.now = deadline - 1us;
    CHECK(poller.poll(false) == Verdict::pending);
    clock.now = deadline;
    CHECK(poller.poll(false) == Verdict::deadline);
    CHECK(AbortPoller::must_abort(Verdict::deadline));
    // Completion seen at the deadline still counts as completion.
    CHECK(poller.poll(true) == Verdict::complete);
}

TEST_CASE("poll_until_settled: a dead peer (event never fires) ends at the deadline") {
    FakeClock clock;
    FakeStatus status{{ncclInProgress, ncclSuccess}};
    const auto start = clock.now;
    AbortPoller poller(std::ref(status), nullptr, start + 50ms, [&] { return clock.now; });
    std::chrono::microseconds slept{0};
    const Verdict v = poll_until_settled(
        poller, [] { return false; },
        [&](std::chrono::microseconds d) {
            slept += d;
            clock.now += d + 1us;  // the poll itself takes a moment
        });
    CHECK(v == Verdict::deadline);
    CHECK(clock.now >= start + 50ms);
    CHECK(clock.now < start + 50ms + 2 * AbortPoller::max_sleep);  // overshoot <= one sleep
    CHECK(poller.polls() < 200);  // it backs off: not a busy loop for 50 ms
    CHECK(slept > 0us);
}

TEST_CASE("poll_until_settled: completes when the operation completes") {
    FakeStatus status{{ncclInProgress, ncclInProgress, ncclSuccess}};
    AbortPoller poller(std::ref(status), nullptr, std::nullopt);
    int queries = 0;
    const Verdict v = poll_until_settled(
        poller, [&] { return ++queries >= 5; }, [](std::chrono::microseconds) {});
    CHECK(v == Verdict::complete);
    CHECK(queries == 5);

    FakeStatus init{{ncclInProgress, ncclInProgress, ncclSuccess}};
    AbortPoller init_poller(std::ref(init), nullptr, std::nullopt);
    CHECK(poll_until_settled(init_poller, {}, [](std::chrono::microseconds) {}) == Verdict::complete);
    CHECK(init_poller.polls() == 3);
}

TEST_CASE("poll_until_settled: a flag set by another thread (the control plane) wakes it") {
    std::atomic<bool> abort{false};
    FakeStatus status{{ncclSuccess}};
    AbortPoller poller(std::ref(status), &abort, std::nullopt);  // no deadline at all
    // The clock starts before the thread does: the flag is set at least 20 ms after it, however
    // the threads are scheduled (measured after the thread's start, it failed once under load).
    const auto start = Clock::now();
    std::thread control_plane([&] {
        std::this_thread::sleep_for(20ms);
        abort = true;
    });
    const Verdict v = poll_until_settled(poller, [] { return false; });  // real sleeps
    const auto waited = Clock::now() - start;
    control_plane.join();
    CHECK(v == Verdict::abort_requested);
    CHECK(waited >= 20ms);  // it returned because of the flag, not before
}

TEST_CASE("backoff: spin first, then sleep, doubling, capped") {
    FakeStatus status{{ncclSuccess}};
    AbortPoller poller(std::ref(status), nullptr, std::nullopt);
    for (std::size_t i = 0; i < AbortPoller::spin_rounds; ++i) {
        CHECK(poller.backoff() == 0us);
        (void)poller.poll(false);
    }
    std::chrono::microseconds previous = poller.backoff();
    CHECK(previous == 1us);
    for (int i = 0; i < 40; ++i) {
        (void)poller.poll(false);
        const auto next = poller.backoff();
        CHECK(next >= previous);
        CHECK(next <= AbortPoller::max_sleep);
        previous = next;
    }
    CHECK(previous == AbortPoller::max_sleep);
}

TEST_CASE("verdict names and which verdicts abort") {
    CHECK_FALSE(AbortPoller::must_abort(Verdict::pending));
    CHECK_FALSE(AbortPoller::must_abort(Verdict::complete));
    CHECK(std::string(AbortPoller::name(Verdict::abort_requested)) == "abort_requested");
    CHECK(std::string(AbortPoller::name(Verdict::comm_error)) == "comm_error");
}
