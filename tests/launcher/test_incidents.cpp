// The launcher's incidents (incidents.hpp): the failure record's fields, and a whole node going
// silent told from single ranks going silent, on a fake clock.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "failure_record.hpp"

using namespace flashrec::launcher;
using namespace std::chrono_literals;

TEST_CASE("a node is silent when all its ranks went silent within the window") {
    SilentNodes nodes(800ms);
    const IncidentClock::time_point t0{};
    CHECK_FALSE(nodes.observe("node1", "dp2.tp0.pp0", t0, 2));
    CHECK(nodes.observe("node1", "dp3.tp0.pp0", t0 + 700ms, 2));
    nodes.clear("node1");
    // Too far apart: two single hangs, not a node.
    CHECK_FALSE(nodes.observe("node1", "dp2.tp0.pp0", t0 + 2s, 2));
    CHECK_FALSE(nodes.observe("node1", "dp3.tp0.pp0", t0 + 3s, 2));
    // The same role twice is one rank, not two.
    CHECK_FALSE(nodes.observe("node2", "dp4.tp0.pp0", t0, 2));
    CHECK_FALSE(nodes.observe("node2", "dp4.tp0.pp0", t0 + 10ms, 2));
    // A node of one rank (or the spare node, 0) is never a node failure here.
    CHECK_FALSE(nodes.observe("node3", "dp6.tp0.pp0", t0, 1));
    CHECK_FALSE(nodes.observe("spare", "spare:0", t0, 0));
}

TEST_CASE("the failure record carries what is known, and only that") {
    Incident i;
    i.id = 3;
    i.attempt = 1;
    i.obs = {Observed::signal, 9};
    i.rule = &classify(i.obs);
    i.role = "dp1.tp0.pp0";
    i.pid = 42;
    i.step = 20;
    i.since_injection_ms = 5.1966;
    auto f = failure_record(i, {{16, 3}});
    CHECK(f.classification == "process_killed");
    CHECK(f.action == "replace_in_place");
    CHECK(f.value == 9);
    CHECK(f.step == 20);
    CHECK(f.since_injection_ms == 5.197);
    REQUIRE(f.mpi_error_classes_seen.has_value());
    CHECK(f.mpi_error_classes_seen->at("16") == 3);
    CHECK_FALSE(f.node.has_value());
    CHECK_FALSE(f.detection_latency_ms.has_value());
    CHECK_FALSE(f.to_json().contains("node"));  // what is not known is not written

    Incident job;
    job.obs = {Observed::job_ended_early, 0};
    job.rule = &classify(job.obs);
    job.role = "*";
    f = failure_record(job, {});
    CHECK_FALSE(f.value.has_value());
    CHECK_FALSE(f.step.has_value());
    CHECK_FALSE(f.mpi_error_classes_seen.has_value());
    CHECK_FALSE(f.to_json().contains("mpi_error_classes_seen"));
    CHECK(to_string(KillOutcome::remote) == "remote");
}
