// The step the summary names for a lost or hung rank (failure_step.hpp).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "failure_step.hpp"

using flashrec::launcher::failure_step;

TEST_CASE("a fault the rank fired names its step exactly") {
    // The demo's case: killed in step 20 before its heartbeat ever carried a tag beyond 0.
    CHECK(failure_step(20, 0, 19) == 20);
    CHECK(failure_step(7, 0, -1) == 7);
    // Even when the job's progress is already past it (the leader's events came first).
    CHECK(failure_step(3, 0, 5) == 3);
}

TEST_CASE("a stale heartbeat tag does not win over the job's progress") {
    CHECK(failure_step(std::nullopt, 0, 19) == 20);   // killed by hand in step 20, tag still 0
    CHECK(failure_step(std::nullopt, -1, 19) == 20);  // last heartbeat in an optimizer phase
    CHECK(failure_step(std::nullopt, 21, 19) == 21);  // the rank's own tag is newer
}

TEST_CASE("before any progress") {
    CHECK(failure_step(std::nullopt, 0, -1) == 0);
    CHECK(failure_step(std::nullopt, -1, -1) == -1);  // nothing known: the summary names no step
}

TEST_CASE("a fault step that makes no sense falls back to the heartbeats") {
    CHECK(failure_step(-5, 4, 2) == 4);
}
