// protection.every = auto and the expected cost of a failure (runtime/include/flashrec/runtime/interval_choice.hpp).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "flashrec/runtime/interval_choice.hpp"

using namespace flashrec::runtime;

namespace {
IntervalMeasure measured(double step_ms, double protected_step_ms) { return {step_ms, protected_step_ms}; }
}  // namespace

TEST_CASE("snapshot_due_auto: the multiples of k, every multiple of the period whatever k, and one probe step at k = 1") {
    for (std::int64_t k : {1, 2, 4, 8, 16})
        for (std::int64_t v = 0; v < 64; v += 16) CHECK(snapshot_due_auto(v, k, 16));
    int due = 0;
    for (std::int64_t v = 0; v < 32; ++v) due += snapshot_due_auto(v, 1, 16) ? 1 : 0;
    CHECK(due == 30);  // all but 15 and 31: those steps measure the step without a snapshot
    CHECK_FALSE(snapshot_due_auto(15, 1, 16));
    CHECK(snapshot_due_auto(14, 1, 16));
    CHECK(snapshot_due_auto(6, 2, 16));
    CHECK_FALSE(snapshot_due_auto(7, 2, 16));
    CHECK(snapshot_due_auto(24, 8, 16));
    CHECK_FALSE(snapshot_due_auto(20, 8, 16));
    CHECK_FALSE(snapshot_due_auto(8, 16, 16));
    CHECK(auto_start_every(16) == 16);
    CHECK(auto_start_every(4) == 4);
    CHECK(auto_choices(16) == std::vector<std::int64_t>{1, 2, 4, 8, 16});
    CHECK(auto_choices(4) == std::vector<std::int64_t>{1, 2, 4});
}

TEST_CASE("choose_every: the smallest power of two whose exposed cost per step is within the budget") {
    // 10 ms steps, a snapshot adds 2 ms: 20 % at k = 1, 10 % at 2, 5 % at 4, 2.5 % at 8.
    auto c = choose_every(measured(10, 12), 0.03, 16, 2);
    CHECK(c.every == 8);
    CHECK(c.exposed_ms == doctest::Approx(2));
    CHECK(c.overhead == doctest::Approx(0.025));
    CHECK(c.reason.find("smallest k within the budget") != std::string::npos);
    // A cheap snapshot: every step.
    c = choose_every(measured(10, 10.1), 0.03, 16, 2);
    CHECK(c.every == 1);
    // A snapshot that makes the step faster (noise): no cost, every step.
    CHECK(choose_every(measured(10, 9), 0.03, 16, 2).every == 1);
    // Exactly at the budget is within it.
    CHECK(choose_every(measured(10, 11.2), 0.03, 16, 2).every == 4);  // 1.2 / 4 / 10 = 3 %
    // A looser budget, a smaller k.
    CHECK(choose_every(measured(10, 12), 0.10, 16, 2).every == 2);
    CHECK(choose_every(measured(10, 12), 0.10, 16, 4).every == 4);  // 10 % at k = 2: not with the margin
}

TEST_CASE("choose_every: max_every when even it is over the budget, and says so") {
    // 157 ms snapshot on a 20 ms step (1 GiB on an H100): 49 % even at k = 16.
    const auto c = choose_every(measured(20, 177), 0.03, 16, 2);
    CHECK(c.every == 16);
    CHECK(c.overhead == doctest::Approx(157.0 / 16 / 20));
    CHECK(c.reason.find("over the budget even at protection.max_every") != std::string::npos);
    // 157 / 20 = 7.85 steps of exposure: k = 512 is the first power of two within 3 %.
    CHECK(c.reason.find("protection.max_every: 512 would meet it") != std::string::npos);
    CHECK(c.reason.find("up to 511 steps replayed") != std::string::npos);
    // Beyond what max_every may be set to: no suggestion.
    CHECK(choose_every(measured(1, 1000), 0.03, 16, 2).reason.find("would meet it") == std::string::npos);
    CHECK(choose_every(measured(20, 177), 0.03, 64, 2).every == 64);
}

TEST_CASE("choose_every: keeps k while a sample is missing") {
    auto c = choose_every({std::nullopt, 12.0}, 0.03, 16, 2);
    CHECK(c.every == 2);
    CHECK(c.reason.find("not measured yet") != std::string::npos);
    c = choose_every({10.0, std::nullopt}, 0.03, 16, 8);
    CHECK(c.every == 8);
    CHECK(choose_every({}, 0.03, 16, 1).every == 1);
}

TEST_CASE("choose_every: up at once, down only with a margin (noise near the budget does not flip k)") {
    // At k = 8, 2.5 %: k = 4 would be 5 % now; the step got cheaper to snapshot: 1.1 ms.
    // k = 4: 2.75 % <= 3 % but > 2.25 % (the margin): k stays 8.
    auto c = choose_every(measured(10, 11.1), 0.03, 16, 8);
    CHECK(c.every == 8);
    CHECK(c.reason.find("kept") != std::string::npos);
    // 0.8 ms: k = 4 is 2 % <= 2.25 %: down to 4 (k = 2 is 4 %, over).
    c = choose_every(measured(10, 10.8), 0.03, 16, 8);
    CHECK(c.every == 4);
    // A much cheaper snapshot: straight to the smallest k with the margin.
    CHECK(choose_every(measured(10, 10.05), 0.03, 16, 16).every == 1);
    // Up: from 2 to 8 at once when 2 is over the budget.
    CHECK(choose_every(measured(10, 12), 0.03, 16, 2).every == 8);
    // The same measurements give the same k whatever rank computes it (a pure function).
    CHECK(choose_every(measured(10, 12), 0.03, 16, 2).every == choose_every(measured(10, 12), 0.03, 16, 2).every);
}

TEST_CASE("failure_cost: (k - 1) / 2 steps replayed on average, k - 1 at worst, plus the restore") {
    const auto c = failure_cost({8, 12.0, 4.0, 250.0});
    CHECK(c.expected_replayed_steps == doctest::Approx(3.5));
    CHECK(c.worst_replayed_steps == 7);
    CHECK(c.expected_ms == doctest::Approx(250 + 3.5 * 12));
    CHECK(c.worst_ms == doctest::Approx(250 + 7 * 12));
    CHECK(c.every_step_ms_per_step == doctest::Approx(4.0));
    CHECK(c.overhead_ms_per_step == doctest::Approx(0.5));
    CHECK(c.saved_ms_per_step == doctest::Approx(3.5));
    // k = 8 replays 3.5 x 12 = 42 ms more per failure and saves 3.5 ms a step: worth it beyond 12 steps.
    REQUIRE(c.break_even_steps);
    CHECK(*c.break_even_steps == doctest::Approx(12));
}

TEST_CASE("failure_cost: every step replays nothing and saves nothing") {
    const auto c = failure_cost({1, 12.0, 4.0, 250.0});
    CHECK(c.expected_replayed_steps == 0);
    CHECK(c.worst_replayed_steps == 0);
    CHECK(c.expected_ms == doctest::Approx(250));
    CHECK(c.overhead_ms_per_step == doctest::Approx(4));
    CHECK_FALSE(c.break_even_steps);
    // Nothing to save (a free snapshot): no break-even either, whatever k.
    CHECK_FALSE(failure_cost({8, 12.0, 0.0, 0.0}).break_even_steps);
    CHECK(failure_cost({8, 12.0, 0.0, 0.0}).expected_ms == doctest::Approx(42));
}
