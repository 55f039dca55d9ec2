// The typed records ranks send to flashrec-launch (ft/records.hpp): every record survives
// to_json -> from_json unchanged, and malformed input is refused with an error that names the
// record and the field.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "flashrec/ft/records.hpp"

using namespace flashrec::ft::records;
using json = nlohmann::json;

namespace {

template <typename R>
void round_trip(const R& r) {
    const json j = r.to_json();
    CHECK(j.at("event") == R::kEvent);
    CHECK(j.at("v") == kVersion);
    CHECK(R::from_json(j) == r);
    // Through text, as the wire and the event log carry it.
    CHECK(R::from_json(json::parse(j.dump())) == r);
    CHECK(is_typed(R::kEvent));
    CHECK_NOTHROW(validate(j));
}

// The error's text, with its event and field checked.
template <typename R>
std::string refused(const json& j, const std::string& field) {
    try {
        (void)R::from_json(j);
    } catch (const RecordError& e) {
        CHECK(e.event() == R::kEvent);
        CHECK(e.field() == field);
        CHECK_THROWS_AS(validate(j), RecordError);  // the controller's check says the same
        return e.what();
    }
    FAIL("accepted: " << j.dump());
    return {};
}

Recovery sample_recovery() {
    Recovery r;
    r.tier = 1;
    r.epoch = 2;
    r.failed_roles = {"dp1.tp0.pp0", "dp3.tp0.pp0"};
    r.replacement = "hot+spawned";
    r.recovery_version = r.resume_step = 20;
    r.steps_replayed = 1;
    r.bytes_restored_per_replacement = 21064;
    r.phases_ms = {{"revoke", 0.09}, {"shrink", 0.46}, {"first_step", 1.25}};
    r.total_ms = 6.71;
    r.phases_ms_by_role = {{"dp0.tp0.pp0", r.phases_ms}, {"dp1.tp0.pp0", {{"restore", 3.5}}}};
    r.phases_ms_max = {{"revoke", 0.1}};
    r.slowest_role = "dp1.tp0.pp0";
    r.phases_ms_slowest = {{"restore", 3.5}};
    r.failure_noticed_unix_us = 1795332954043679;
    r.back_in_loop_unix_us = 1795332954050000;
    r.first_step_ms = 1.25;
    r.slots_made_ahead = 4;
    r.notice_to_loop_ms = 6.321;
    r.protection_every = 8;
    r.replay_ms = 12.5;
    return r;
}

}  // namespace

TEST_CASE("every record survives a round trip") {
    round_trip(Step{41, 2.5});
    round_trip(Step{0, std::nullopt});
    round_trip(FaultInjected{"role=1:step=20:phase=allreduce:action=kill", 4242, 1795513922872178, "kill", 0, 20,
                             "allreduce"});
    round_trip(FaultInjected{"role=2:step=3:action=exit:code=9", 7, 1, "exit", 9, 3, "forward"});
    round_trip(CheckpointPublished{10, "/ck/step-10", 5, 123456, 0.25});
    round_trip(CheckpointResumed{10, "/ck"});
    round_trip(EndingJob{77, 99, "no spare for role dp0.tp0.pp0 at step 3", {"dp0.tp0.pp0"}});
    round_trip(RoleFinished{"dp1.tp0.pp1", 4242, 300, "691abae2d49685ec"});
    round_trip(MpiErrorSeen{12, 75, "MPI_Allreduce(gradients)"});
    round_trip(SpareReleased{31});
    round_trip(sample_recovery());
    Recovery bare = sample_recovery();
    bare.notice_to_loop_ms.reset();
    bare.failed_roles.clear();
    bare.replay_ms.reset();  // a warm relaunch: steps_replayed is -1
    round_trip(bare);
    round_trip(ReplayDiverged{"dp1.tp0.pp0", "node1.dp0.tp0.pp0@dp1.tp0.pp0", 24, 16, "adam_m", "1a2b3c4d5e6f7a8b",
                              "0011223344556677"});
    round_trip(ReplayProbe{0, 4, 4, true, 0.25, 12.5});
    round_trip(ReplayProbe{16, 18, 2, false, 1.0, 3.0});
    CHECK(is_typed("replay_probe"));
    json probe = ReplayProbe{0, 4, 4, false, 0.25, 12.5}.to_json();
    probe.erase("passed");
    CHECK_THROWS_AS(validate(probe), RecordError);
    round_trip(PlatformMismatch{"dp1.tp0.pp0", 77, "in_job", 12, "0.1.0",
                                {{"cpu_flags", "0123456789abcdef", "fedcba9876543210"}}, false});
    round_trip(PlatformMismatch{"dp0.tp0.pp0", 78, "relaunch", 0, "0.1.0", {}, true});
    round_trip(SpareRejected{"spare:4", "node3", "/dev/shm has 1024 bytes free, the role's slots need 4096", 2});
    JobStats s;
    s.role = "dp0.tp0.pp0";
    s.steps = 60;
    s.median_step_ms = 1.08;
    s.protection = true;
    s.state_bytes = 1 << 20;
    s.snapshots = 60;
    s.replication_GBps = 1.5;
    s.snapshot_d2h_GBps = 22.5;
    s.protection_every = 4;
    round_trip(s);
    s.protection_auto = true;
    s.protected_step_ms = 12.5;
    s.unprotected_step_ms = 10.25;
    s.mean_step_ms = 10.5;
    round_trip(s);
    round_trip(ProtectionInterval{32, 8, 2, 10.0, 12.0, 2.0, 0.025, 0.03, 16, "the smallest k within the budget"});
    round_trip(ProtectionInterval{16, 2, 2, std::nullopt, 12.0, 0, 0, 0.03, 16, "not measured yet"});
}

TEST_CASE("fields added later read back with their defaults from older records") {
    json j = sample_recovery().to_json();
    j.erase("protection_every");
    j.erase("replay_ms");
    const Recovery old = Recovery::from_json(j);
    CHECK(old.protection_every == 1);
    CHECK_FALSE(old.replay_ms);
    JobStats s;
    j = s.to_json();
    j.erase("protection_every");
    j.erase("protection_auto");
    CHECK(JobStats::from_json(j).protection_every == 1);
    CHECK_FALSE(JobStats::from_json(j).protection_auto);
    CHECK(is_typed("protection_interval"));
    j = ProtectionInterval{32, 8, 2, 10.0, 12.0, 2.0, 0.025, 0.03, 16, "r"}.to_json();
    j.erase("reason");
    CHECK_THROWS_AS(validate(j), RecordError);
    j = ReplayDiverged{"dp0.tp0.pp0", "k", 8, 0, "w", "a", "b"}.to_json();
    CHECK(is_typed("replay_diverged"));
    CHECK(is_typed("platform_mismatch"));
    CHECK(is_typed("spare_rejected"));
    json m = PlatformMismatch{"dp0.tp0.pp0", 1, "in_job", 0, "0.1.0", {{"cpu_model", "a", "b"}}, true}.to_json();
    m["differences"][0].erase("here");
    CHECK_THROWS_AS(validate(m), RecordError);
    j.erase("buffer");
    CHECK_THROWS_AS(validate(j), RecordError);
}

TEST_CASE("a step without a loss (or a NaN one) reads back as none") {
    CHECK(Step{3, std::nan("")}.to_json().at("loss").is_null());
    CHECK_FALSE(Step::from_json(Step{3, std::nan("")}.to_json()).loss);
}

TEST_CASE("an ending_job's reason is cut to 2000 bytes on the wire") {
    const json j = EndingJob{75, 1, std::string(5000, 'x'), {}}.to_json();
    CHECK(j.at("why").get<std::string>().size() == 2000);
}

TEST_CASE("malformed records are refused, naming the record and the field") {
    json j = EndingJob{76, 99, "why", {}}.to_json();
    j.erase("exit_code");
    CHECK(refused<EndingJob>(j, "exit_code") == "record 'ending_job', field 'exit_code': missing");

    j = EndingJob{76, 99, "why", {}}.to_json();
    j["exit_code"] = "76";
    CHECK(refused<EndingJob>(j, "exit_code").find("expected an integer, got \"76\"") != std::string::npos);

    j = Step{1, 1.0}.to_json();
    j.erase("v");
    CHECK(refused<Step>(j, "v").find("missing") != std::string::npos);
    j["v"] = 2;
    CHECK(refused<Step>(j, "v").find("version 2 is not the one this flashrec reads (1)") != std::string::npos);

    j = FaultInjected{"f", 1, 2, "kill", 0, 3, "forward"}.to_json();
    j["action"] = "explode";
    CHECK(refused<FaultInjected>(j, "action").find("expected kill, exit or stop") != std::string::npos);
    j["action"] = "exit";  // an exit needs its code
    CHECK(refused<FaultInjected>(j, "exit_code") == "record 'fault_injected', field 'exit_code': missing");

    j = sample_recovery().to_json();
    j["failed_roles"] = json::array({"dp0.tp0.pp0", 3});
    CHECK(refused<Recovery>(j, "failed_roles").find("expected an array of strings") != std::string::npos);
    j = sample_recovery().to_json();
    j["phases_ms_by_role"]["dp1.tp0.pp0"]["restore"] = "slow";
    refused<Recovery>(j, "phases_ms_by_role.dp1.tp0.pp0.restore");

    j = MpiErrorSeen{1, 2, "op"}.to_json();
    j["error_class"] = 1e12;
    refused<MpiErrorSeen>(j, "error_class");
    j["error_class"] = std::int64_t{1} << 40;
    CHECK(refused<MpiErrorSeen>(j, "error_class").find("out of range") != std::string::npos);

    CHECK_THROWS_AS((void)JobStats::from_json(json::array()), RecordError);
}

TEST_CASE("validate() checks only the records it knows") {
    CHECK_NOTHROW(validate({{"event", "loss"}, {"step", "anything"}}));  // a trainer's own event
    CHECK_NOTHROW(validate({{"event", "snapshot_rejected"}}));
    CHECK_FALSE(is_typed("loss"));
    CHECK_THROWS_AS(validate({{"event", "recovery"}, {"v", 1}}), RecordError);
    CHECK_THROWS_AS(validate({{"no_event", 1}}), RecordError);
}

TEST_CASE("the stderr line for runs without a launcher") {
    CHECK(event_line(SpareReleased{5}.to_json()) == R"(flashrec-event: {"event":"spare_released","pid":5,"v":1})");
}
