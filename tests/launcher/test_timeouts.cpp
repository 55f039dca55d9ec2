// The timeout hierarchy (timeouts.hpp): the values a config gives every limit, and which limit
// fires first for each kind of failure, computed from them (doctest, no clock).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "timeouts.hpp"

using namespace flashrec::launcher;
using std::chrono::milliseconds;

namespace {

flashrec::config::Config config(int heartbeat_ms, int hang_timeout_ms, int phase_deadline_ms = 10000, int max_epochs = 3) {
    flashrec::config::Config cfg;
    cfg.detection.heartbeat_ms = heartbeat_ms;
    cfg.detection.hang_timeout_ms = hang_timeout_ms;
    cfg.recovery.phase_deadline_ms = phase_deadline_ms;
    cfg.recovery.max_epochs = max_epochs;
    cfg.recovery.warm_relaunches = 2;
    return cfg;
}

const FailureKind& failure(const TimeoutTable& t, const std::string& prefix) {
    const auto it = std::find_if(t.failures.begin(), t.failures.end(),
                                 [&](const FailureKind& f) { return f.failure.rfind(prefix, 0) == 0; });
    REQUIRE(it != t.failures.end());
    return *it;
}

const TimeoutLimit& limit(const TimeoutTable& t, const std::string& name) {
    const auto it = std::find_if(t.limits.begin(), t.limits.end(), [&](const TimeoutLimit& l) { return l.name == name; });
    REQUIRE(it != t.limits.end());
    return *it;
}

}  // namespace

TEST_CASE("the derived limits follow the config (the values the launcher acts on)") {
    const Timeouts t = timeouts_of(config(100, 1000, 10000, 3));
    CHECK(t.check_period == milliseconds(100));
    CHECK(t.stall_confirm == milliseconds(300));
    CHECK(t.node_silent_window == milliseconds(800));
    CHECK(t.stall_limit == milliseconds(190000));  // (6 x 3 + 1) x 10 s > 2 x 1 s
    CHECK(timeouts_of(config(5, 200000, 100, 1)).stall_limit == milliseconds(400000));  // 2 x hang timeout
    CHECK(timeouts_of(config(5, 50)).check_period == milliseconds(10));
    CHECK(t.record_ack_limit == milliseconds(5000));
    CHECK(t.startup_limit == milliseconds(300000));  // detection.startup_timeout_ms's default
}

TEST_CASE("the table names every limit with this config's value") {
    const TimeoutTable table = timeout_table(config(100, 1000, 20000, 3));
    CHECK(limit(table, "heartbeat").value == "100 ms");
    CHECK(limit(table, "hang timeout").value == "1 s");
    CHECK(limit(table, "recovery phase deadline").value == "20 s");
    CHECK(limit(table, "job stall limit").value == "380 s");
    CHECK(limit(table, "warm relaunch budget").value == "2");
    CHECK(limit(table, "lost rank's last words").from == "kLostSettle");
    CHECK(limit(table, "mpirun's end after every rank left").from == "kMpirunEndGrace");
    CHECK(limit(table, "rank's wait for the record ack").from == "ft::kRecordAckLimitMs");
    const std::string text = format_timeout_table(table);
    CHECK(text.find("which fires first") != std::string::npos);
    CHECK(text.find("kReconnectWait") != std::string::npos);
}

TEST_CASE("which fires first, per kind of failure") {
    const TimeoutTable table = timeout_table(config(100, 1000, 10000, 3));
    const auto& killed = failure(table, "process killed");
    CHECK(killed.in_order.front().limit.find("kLostSettle") != std::string::npos);
    CHECK(killed.in_order.front().after == milliseconds(300));
    const auto& hung = failure(table, "process hung");
    CHECK(hung.in_order.front().limit == "hang timeout + check period");
    CHECK(hung.in_order.front().after == milliseconds(1100));
    CHECK(hung.in_order.back().limit == "job stall limit");
    const auto& stuck = failure(table, "stuck recovery phase");
    CHECK(stuck.in_order.front().limit == "recovery phase deadline");
    CHECK(stuck.in_order.front().after == milliseconds(10000));
    CHECK(failure(table, "node lost").in_order.front().after == milliseconds(1100));
    CHECK(failure(table, "step loop stuck").in_order.front().after == milliseconds(300));
    CHECK(failure(table, "launcher lost").in_order.back().after == milliseconds(60000));
    CHECK(failure(table, "start-up stuck").in_order.front().limit == "startup limit");
    CHECK(failure(table, "start-up stuck").in_order.front().after == milliseconds(300000));
    for (const auto& f : table.failures)
        CHECK_MESSAGE(std::is_sorted(f.in_order.begin(), f.in_order.end(),
                                     [](const Candidate& a, const Candidate& b) { return a.after < b.after; }),
                      f.failure);
}

TEST_CASE("the order is computed: a hang timeout shorter than the settle time fires first for a killed process") {
    const TimeoutTable table = timeout_table(config(20, 150));
    const auto& killed = failure(table, "process killed");
    CHECK(killed.in_order.front().limit == "hang timeout + check period");
    CHECK(killed.in_order.front().after == milliseconds(170));
}
