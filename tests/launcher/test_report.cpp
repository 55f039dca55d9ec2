// The figures of the launcher's summary (report.hpp): replacements by kind, steps replayed, and
// the time lost with simultaneous hangs counted once.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "report.hpp"

using namespace flashrec::launcher;
using flashrec::ft::records::Recovery;

namespace {
Recovery recovery(std::string replacement, int roles, std::int64_t replayed, double ms) {
    Recovery r;
    r.replacement = std::move(replacement);
    for (int i = 0; i < roles; ++i) r.failed_roles.push_back("dp" + std::to_string(i) + ".tp0.pp0");
    r.steps_replayed = replayed;
    r.total_ms = ms;
    return r;
}
}  // namespace

TEST_CASE("replacements by kind; the ranks' own relaunch records count through the launcher's") {
    const auto t = report_totals({recovery("hot", 1, 0, 10), recovery("hot+spawned", 3, 1, 20),
                                  recovery("spawned", 2, 0, 30), recovery("relaunch", 0, 5, 400)},
                                 {{2, 500}}, {}, 4.0);
    CHECK(t.in_job == 6);
    CHECK(t.hot == 2);
    CHECK(t.spawned == 4);
    CHECK(t.steps_replayed == 3);  // 1 in-job + 2 from the relaunch record
    CHECK(t.recovery_ms == doctest::Approx(60));
    CHECK(t.restart_ms == doctest::Approx(500));
    CHECK(t.replay_ms == doctest::Approx(12));
    CHECK(t.lost_ms() == doctest::Approx(572));
}

TEST_CASE("hangs at the same time (a frozen node) cost their overlap once") {
    const auto t = report_totals({}, {}, {{100, 200}, {150, 250}, {240, 260}, {400, 450}}, 0);
    CHECK(t.hang_ms == doctest::Approx(210));  // [100, 260] + [400, 450]
    CHECK(report_totals({}, {}, {}, 3.0).lost_ms() == 0);
}

TEST_CASE("the cost of a failure under protection.every: replay, restore, and what the interval saves") {
    flashrec::ft::records::JobStats stats;
    stats.protection_every = 8;
    stats.median_step_ms = 10;
    stats.snapshots = 50;
    stats.total_exposed_wait_ms = 100;  // 2 ms exposed per snapshot
    const auto c = failure_cost(stats, {recovery("hot", 1, 3, 40), recovery("spawned", 1, 5, 90),
                                        recovery("hot", 1, 0, 20), recovery("relaunch", 0, 7, 4000)});
    CHECK(c.every == 8);
    CHECK(c.replay_mean_ms == doctest::Approx(35));  // 3.5 steps
    CHECK(c.replay_worst_ms == doctest::Approx(80));  // a failure while version v+8 is replicated
    REQUIRE(c.restore_ms);
    CHECK(*c.restore_ms == doctest::Approx(40));  // the median of the in-job repairs, not the relaunch
    CHECK(c.exposed_per_snapshot_ms == doctest::Approx(2));
    CHECK(c.saved_per_step_ms == doctest::Approx(1.75));
    REQUIRE(c.break_even_steps);
    CHECK(*c.break_even_steps == doctest::Approx(20));

    stats.protection_every = 1;  // every step: one step replayed at worst, nothing saved
    const auto every_step = failure_cost(stats, {});
    CHECK(every_step.replay_mean_ms == 0);
    CHECK(every_step.replay_worst_ms == doctest::Approx(10));
    CHECK_FALSE(every_step.restore_ms);
    CHECK_FALSE(every_step.break_even_steps);
}
