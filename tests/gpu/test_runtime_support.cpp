// What the runtime's GPU path decides without a device (label unit, runs everywhere):
//   - a host pointer is host memory, and finding that out creates no CUDA context (a CPU-only
//     trainer built with CUDA never gets one: cuda_in_use() stays false);
//   - the DP sharding the NCCL path uses is the runtime's (Runtime::shard_range);
//   - an NCCL wait whose before_poll hook sets the abort flag ends with abort_requested, the
//     way DeviceDpCollectives wires a FailureChannel into NcclComm's poll loop.
// The same detection on a device (device memory recognized, host memory not) is in
// test_runtime_device.cpp (label gpu).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <vector>

#include "flashrec/gpu/abort_poller.hpp"
#include "flashrec/gpu/device.hpp"
#include "flashrec/gpu/dp_collectives.hpp"
#include "flashrec/gpu/handles.hpp"

using namespace flashrec::gpu;

TEST_CASE("host memory is host memory, and asking creates no CUDA context") {
    std::vector<float> host(1000, 1.0f);
    static double global_value = 0;
    CHECK_FALSE(cuda_in_use());  // a fresh process: nothing made a context
    CHECK(device_memory_of(host.data()) == -1);
    CHECK(device_memory_of(&global_value) == -1);
    CHECK(device_memory_of(nullptr) == -1);
    CHECK_FALSE(cuda_in_use());  // still none: the question did not make one
}

TEST_CASE("no device at all: CUDA is not in use, whatever the pointer") {
    ::setenv("CUDA_VISIBLE_DEVICES", "", 1);  // before any CUDA call that counts devices
    if (device_count_or_zero() != 0) {
        MESSAGE("CUDA was initialized before CUDA_VISIBLE_DEVICES was cleared; not checked");
        return;
    }
    std::vector<int> host(4);
    CHECK_FALSE(cuda_in_use());
    CHECK(device_memory_of(host.data()) == -1);
}

TEST_CASE("the DP parts tile the array in rank order, as Runtime::shard_range does") {
    for (std::size_t count : {0u, 1u, 5u, 7u, 64u, 1001u}) {
        for (int parts : {1, 2, 3, 4, 8}) {
            std::size_t next = 0;
            for (int j = 0; j < parts; ++j) {
                const auto [first, last] = dp_part(count, parts, j);
                CHECK(first == next);
                CHECK(last >= first);
                // Runtime::shard_range: {count * me / d, count * (me + 1) / d}
                CHECK(first == count * static_cast<std::size_t>(j) / static_cast<std::size_t>(parts));
                next = last;
            }
            CHECK(next == count);
        }
    }
}

TEST_CASE("a poll hook that sets the abort flag ends a wait that would never complete") {
    // NcclComm calls NcclOptions::before_poll at the start of each round's status query, so
    // a FailureChannel can raise the flag; the next check of the flag aborts.
    std::atomic<bool> abort_flag{false};
    int rounds = 0;
    const auto status_with_hook = [&] {
        if (++rounds == 50) abort_flag.store(true);  // "a peer failed" on the 50th round
        return ncclInProgress;
    };
    AbortPoller poller(status_with_hook, &abort_flag, std::nullopt);
    const auto verdict = poll_until_settled(poller, [] { return false; },
                                            [](std::chrono::microseconds) {});
    CHECK(verdict == AbortPoller::Verdict::abort_requested);
    CHECK(AbortPoller::must_abort(verdict));
    CHECK(rounds == 50);
}
