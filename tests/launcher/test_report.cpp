// The figures of the launcher's summary (report.hpp): replacements by kind, steps replayed, and
// the time lost with simultaneous hangs counted once.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "recovery_figures.hpp"

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

