// protection.every's pure decisions (runtime/include/flashrec/runtime/interval.hpp).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "flashrec/runtime/interval.hpp"

using namespace flashrec::runtime;

TEST_CASE("snapshot_due: every version at k = 1, the multiples of k otherwise") {
    for (std::int64_t v = 0; v < 20; ++v) CHECK(snapshot_due(v, 1));
    CHECK(snapshot_due(0, 3));
    CHECK_FALSE(snapshot_due(1, 3));
    CHECK_FALSE(snapshot_due(2, 3));
    CHECK(snapshot_due(3, 3));
    CHECK(snapshot_due(24, 8));
    CHECK_FALSE(snapshot_due(23, 8));
    int due = 0;
    for (std::int64_t v = 0; v < 30; ++v) due += snapshot_due(v, 8) ? 1 : 0;
    CHECK(due == 4);  // 0, 8, 16, 24
}

TEST_CASE("median: the middle value (the upper one of an even count), 0 when empty") {
    CHECK(median({}) == 0.0);
    CHECK(median({7.0}) == 7.0);
    CHECK(median({3.0, 1.0, 2.0}) == 2.0);
    CHECK(median({4.0, 1.0, 3.0, 2.0}) == 3.0);
    CHECK(median({1.0, 1.0, 100.0}) == 1.0);  // one slow step (a repair's) does not move it
}

TEST_CASE("replay_cost_ms: steps x median step time; unknown for a warm relaunch") {
    CHECK(*replay_cost_ms(0, 12.5) == 0.0);
    CHECK(*replay_cost_ms(7, 2.0) == 14.0);
    CHECK_FALSE(replay_cost_ms(-1, 2.0));
}

TEST_CASE("first_divergence names the first buffer whose replayed checksum differs") {
    const BufferChecksums before{{"w", 1}, {"adam_m", 2}, {"adam_v", 3}};
    CHECK_FALSE(first_divergence(before, before));
    const auto d = first_divergence(before, {{"w", 1}, {"adam_m", 9}, {"adam_v", 8}});
    REQUIRE(d);
    CHECK(d->buffer == "adam_m");
    CHECK(d->before == 2);
    CHECK(d->replayed == 9);
    // Order does not matter, a missing buffer does.
    CHECK_FALSE(first_divergence(before, {{"adam_v", 3}, {"w", 1}, {"adam_m", 2}}));
    const auto missing = first_divergence(before, {{"w", 1}, {"adam_v", 3}});
    REQUIRE(missing);
    CHECK(missing->buffer == "adam_m");
    CHECK(missing->replayed == 0);
}

TEST_CASE("the start-up replay probe rewinds at the first snapshot after the start, and judges there once") {
    ReplayProbe disarmed;
    CHECK_FALSE(probe_rewinds_at(disarmed, 4, true));
    ReplayProbe probe{0, -1};
    CHECK_FALSE(probe_rewinds_at(probe, 0, true));   // the version started from is not compared
    CHECK_FALSE(probe_rewinds_at(probe, 3, false));  // no snapshot started at 3 (k = 4)
    CHECK(probe_rewinds_at(probe, 4, true));
    CHECK_FALSE(probe_verdict_at(probe, 4));         // not rewound yet: the first pass
    probe.to = 4;
    CHECK_FALSE(probe_rewinds_at(probe, 4, true));   // once: the replay's snapshot 4 is not a new rewind
    CHECK_FALSE(probe_verdict_at(probe, 3));
    CHECK(probe_verdict_at(probe, 4));
    const ReplayProbe resumed{16, -1};               // --resume from the checkpoint of step 16
    CHECK_FALSE(probe_rewinds_at(resumed, 16, true));
    CHECK(probe_rewinds_at(resumed, 18, true));
}

TEST_CASE("replay_probe_refusal says what makes a replay inexact and how to get past it") {
    const std::string why = replay_probe_refusal(0, 4, 4);
    CHECK(why.find("protection.every = 4") != std::string::npos);
    CHECK(why.find("restored version 0, ran steps 0..3 again, and version 4") != std::string::npos);
    CHECK(why.find("step.data_seed()") != std::string::npos);
    CHECK(why.find("protect()ed buffers") != std::string::npos);
    CHECK(why.find("protection.replay_check: off") != std::string::npos);
    CHECK(replay_probe_refusal(16, 18, 0).find("protection.every = auto") != std::string::npos);
}
