#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "flashrec/errors.hpp"
#include "flashrec/runtime/recovery_plan.hpp"

using namespace flashrec::recovery;

namespace {
// 4 DP roles on 2 nodes, ring holders 0->2, 1->3, 2->0, 3->1 (node-aware shift 2).
Report survivor(int role, std::int64_t newest, std::int64_t older, int holds, std::int64_t h_newest,
                std::int64_t h_older, std::int64_t step = 10) {
    Report r;
    r.role = role;
    r.node = role < 2 ? "node0" : "node1";
    r.id = role;
    r.step = step;
    r.has_replicated = true;
    r.own = {newest, older};
    r.held.push_back({holds, {h_newest, h_older}});
    return r;
}
Report spare(std::int64_t id) {
    Report r;
    r.node = "node2";
    r.id = id;
    return r;
}
const flashrec::topology::Shape shape{4, 1, 1};
}  // namespace

TEST_CASE("reports survive serialization") {
    const Report r = survivor(2, 9, 8, 0, 9, 8);
    const Report back = deserialize(serialize(r));
    CHECK(back.role == 2);
    CHECK(back.node == "node1");
    CHECK(back.own.newest == 9);
    REQUIRE(back.held.size() == 1);
    CHECK(back.held[0].owner_role == 0);
    CHECK_THROWS_AS(deserialize("garbage"), flashrec::Error);
    CHECK_THROWS_AS(deserialize(""), flashrec::Error);
}

TEST_CASE("one dead role, a hot spare takes it; R is the newest version complete everywhere") {
    // Role 1 died; its replica is on role 3, which has versions 10 and 9 of it.
    const std::vector<Report> reports{survivor(0, 10, 9, 2, 10, 9), survivor(2, 10, 9, 0, 10, 9),
                                      survivor(3, 10, 9, 1, 10, 9), spare(7)};
    const Plan plan = plan_repair(shape, reports);
    CHECK(plan.dead_roles == std::vector<int>{1});
    REQUIRE(plan.replacements.size() == 1);
    CHECK(plan.replacements[0].process == 3);
    CHECK(plan.replacements[0].payload_from == 3);
    CHECK(plan.replacements[0].replicated_from == 0);
    CHECK(plan.version == 10);
    CHECK(plan.steps_replayed == 0);
    CHECK(plan.role_of_process == std::vector<int>{0, 2, 3, 1});
    CHECK(plan.missing_spares == 0);
}

TEST_CASE("a replica that missed the newest version pulls R back by one") {
    // Role 3's copy of role 1 only has 9 (the transfer of 10 was cut by the failure).
    const std::vector<Report> reports{survivor(0, 10, 9, 2, 10, 9), survivor(2, 10, 9, 0, 10, 9),
                                      survivor(3, 10, 9, 1, 9, 8), spare(7)};
    const Plan plan = plan_repair(shape, reports);
    CHECK(plan.version == 9);
    CHECK(plan.steps_replayed == 1);
}

TEST_CASE("owner and its replica holder both dead: the state is lost, and the plan says why") {
    const std::vector<Report> reports{survivor(0, 10, 9, 2, 10, 9), survivor(2, 10, 9, 0, 10, 9),
                                      spare(7), spare(8)};
    const Plan plan = plan_repair(shape, reports);
    CHECK(plan.version == -1);
    CHECK(plan.problem.find("dp1.tp0.pp0") != std::string::npos);
    CHECK(plan.problem.find("what the live processes hold") != std::string::npos);
}

TEST_CASE("owner and ring holder dead on live nodes: survivors there serve the dead roles' own snapshots") {
    // Issue 15 (2): roles 0 and 2 hold each other's copies and died together; role 1 (node0)
    // reads role 0's own snapshot on its node, role 3 (node1) role 2's. Ring copies win where
    // they exist; a node-local copy without the version is no source.
    Report s1 = survivor(1, 10, 9, 3, 10, 9), s3 = survivor(3, 10, 9, 1, 10, 9);
    s1.local.push_back({0, {10, 9}});
    s3.local.push_back({2, {9, 8}});
    const std::vector<Report> reports{s1, s3, spare(7), spare(8)};
    const Plan plan = plan_repair(shape, reports);
    CHECK(plan.version == 9);
    REQUIRE(plan.replacements.size() == 2);
    CHECK(plan.replacements[0].role == 0);
    CHECK(plan.replacements[0].payload_from == 1);
    CHECK(plan.replacements[0].payload_from_local);
    CHECK(plan.replacements[1].role == 2);
    CHECK(plan.replacements[1].payload_from == 3);
    CHECK(plan.replacements[1].payload_from_local);
    CHECK(deserialize(serialize(s1)).local.size() == 1);
    CHECK(deserialize(serialize(s1)).local[0].versions.older == 9);
    // Not in a warm relaunch: there the role's new process on that node reads it as its own.
    CHECK(plan_repair(shape, reports, Mode::relaunch).version == -1);
}

TEST_CASE("more dead roles than spares: the rest is counted as missing") {
    const std::vector<Report> reports{survivor(0, 10, 9, 2, 10, 9), survivor(2, 10, 9, 0, 10, 9)};
    const Plan plan = plan_repair(shape, reports);
    CHECK(plan.dead_roles == std::vector<int>{1, 3});
    CHECK(plan.missing_spares == 2);
}

TEST_CASE("spares are taken in process-id order, whatever their rank") {
    const std::vector<Report> reports{survivor(0, 10, 9, 2, 10, 9), survivor(2, 10, 9, 0, 10, 9),
                                      survivor(3, 10, 9, 1, 10, 9), spare(9), spare(5)};
    const Plan plan = plan_repair(shape, reports);
    REQUIRE(plan.replacements.size() == 1);
    CHECK(plan.replacements[0].process == 4);  // id 5
}

TEST_CASE("warm relaunch: a process holding a role but none of its state is restored in place") {
    // Roles 0 and 1 restarted on a new node: no own snapshots; their replicas are on 2 and 3.
    Report fresh0 = survivor(0, -1, -1, 2, -1, -1, -1), fresh1 = survivor(1, -1, -1, 3, -1, -1, -1);
    fresh0.node = fresh1.node = "node2";
    const std::vector<Report> reports{fresh0, fresh1, survivor(2, 7, 6, 0, 7, 6, -1),
                                      survivor(3, 7, 6, 1, 7, 6, -1)};
    const Plan plan = plan_repair(shape, reports, Mode::relaunch);
    CHECK(plan.version == 7);
    REQUIRE(plan.replacements.size() == 2);
    CHECK(plan.replacements[0].process == 0);
    CHECK(plan.replacements[0].payload_from == 2);
    CHECK(plan.replacements[0].replicated_from == 2);
    CHECK(plan.replacements[1].payload_from == 3);
    CHECK(plan.dead_roles.empty());
    // In-job a live process is never restored in place (it restores from its own snapshots).
    CHECK(plan_repair(shape, reports).version == -1);
}

TEST_CASE("a failure before the first version was committed anywhere: everyone starts again from the initial state") {
    // Issue 15 (1): roles 0 and 2 died while version 0 was being protected; nothing changed state.
    Report s1 = survivor(1, -1, -1, 3, -1, -1, 0), s3 = survivor(3, -1, -1, 1, -1, -1, 0);
    s1.pristine = s3.pristine = true;
    const Plan plan = plan_repair(shape, {s1, s3, spare(7), spare(8)});
    CHECK(plan.initial);
    CHECK(plan.version == 0);
    CHECK(plan.problem.empty());
    CHECK(plan.replacements.size() == 2);
    CHECK(plan.missing_spares == 0);
    // Once an optimizer ran (a survivor is no longer pristine), a lost version stays lost.
    s3.pristine = false;
    CHECK_FALSE(plan_repair(shape, {s1, s3, spare(7), spare(8)}).initial);
    CHECK(plan_repair(shape, {s1, s3, spare(7), spare(8)}).version == -1);
}

TEST_CASE("version 0 committed at a ring holder but not in its live owner's own store: the initial state, not an in-place restore") {
    // Seen under load (ft.recovery_step0): role 1 died in the replication of version 0; role 0's
    // own copy was not committed (its receive was cut short), role 2's copy of it was. In-job a
    // live process cannot be restored in place, so version 0 is not complete for role 0.
    Report s0 = survivor(0, -1, -1, 2, -1, -1, 0), s2 = survivor(2, 0, -1, 0, 0, -1, 0),
           s3 = survivor(3, 0, -1, 1, 0, -1, 0);
    s0.pristine = s2.pristine = s3.pristine = true;
    const Plan plan = plan_repair(shape, {s0, s2, s3, spare(7)});
    CHECK(plan.initial);
    CHECK(plan.version == 0);
    REQUIRE(plan.replacements.size() == 1);
    CHECK(plan.replacements[0].role == 1);
    CHECK(plan.replacements[0].process == 3);
    // Had an optimizer run, the state would be lost (and the plan would say why), never
    // restored into a live process from a holder.
    s2.pristine = false;
    const Plan lost = plan_repair(shape, {s0, s2, s3, spare(7)});
    CHECK(lost.version == -1);
    CHECK(lost.problem.find("no committed snapshot of its own") != std::string::npos);
}

TEST_CASE("pristine survives serialization") {
    Report r = survivor(2, 9, 8, 0, 9, 8);
    r.pristine = true;
    CHECK(deserialize(serialize(r)).pristine);
}

TEST_CASE("warm relaunch after an in-job repair: stale own segments of a role that moved are not needed") {
    // Issue 15 (3): role 2 died at step 490 and its replacement ran elsewhere; the relaunch put
    // role 2 back on node1, where only the dead original's segments [490,489] are. Its ring
    // holder (role 0) has 1074 and 1073; role 1 finished 1073 only.
    const std::vector<Report> reports{survivor(0, 1074, 1073, 2, 1074, 1073, -1),
                                      survivor(1, 1073, 1072, 3, 1073, 1072, -1),
                                      survivor(2, 490, 489, 0, 1074, 1073, -1),
                                      survivor(3, 1074, 1073, 1, 1073, 1072, -1)};
    const Plan in_job = plan_repair(shape, reports);  // in-job rules: a live role must hold it itself
    CHECK(in_job.version == -1);
    // The message names, per version, a role that really lacks it.
    CHECK(in_job.problem.find("version 1074: role dp1.tp0.pp0") != std::string::npos);
    CHECK(in_job.problem.find("version 1073: role dp2.tp0.pp0") != std::string::npos);
    const Plan plan = plan_repair(shape, reports, Mode::relaunch);
    CHECK(plan.version == 1073);
    REQUIRE(plan.replacements.size() == 1);
    CHECK(plan.replacements[0].role == 2);
    CHECK(plan.replacements[0].process == 2);  // restored in place
    CHECK(plan.replacements[0].payload_from == 0);
    CHECK(plan.replacements[0].replicated_from == 0);
    CHECK(plan.dead_roles.empty());
}

TEST_CASE("warm relaunch: a role restored in place is never a source") {
    // Role 0 lacks 7 (only 6 of its own): it is restored from role 2's copy, and role 1's
    // replicated buffers may not come from it.
    const std::vector<Report> reports{survivor(0, 6, 5, 2, 7, 6, -1), survivor(1, -1, -1, 3, -1, -1, -1),
                                      survivor(2, 7, 6, 0, 7, 6, -1), survivor(3, 7, 6, 1, 7, 6, -1)};
    const Plan plan = plan_repair(shape, reports, Mode::relaunch);
    CHECK(plan.version == 7);
    REQUIRE(plan.replacements.size() == 2);
    CHECK(plan.replacements[0].role == 0);
    CHECK(plan.replacements[1].role == 1);
    CHECK(plan.replacements[1].replicated_from == 2);
    CHECK(plan.replacements[1].payload_from == 3);
}

TEST_CASE("the outcome for each process: survivors keep their role, the spare that takes one is recovered") {
    const std::vector<Report> reports{survivor(0, 10, 9, 2, 10, 9), survivor(2, 10, 9, 0, 10, 9),
                                      survivor(3, 10, 9, 1, 10, 9), spare(7), spare(8)};
    const Plan plan = plan_repair(shape, reports);
    REQUIRE(plan.role_of_process == std::vector<int>{0, 2, 3, 1, -1});
    const RepairOutcome kept = outcome_of(plan, 1, 2, "hot");
    CHECK(kept.role == 2);
    CHECK(kept.part == Part::survivor);
    CHECK(kept.tier == 1);
    CHECK(kept.replacement == "hot");
    CHECK(kept.plan.version == 10);
    const RepairOutcome taken = outcome_of(plan, 3, -1, "hot");
    CHECK(taken.role == 1);
    CHECK(taken.part == Part::recovered);
    const RepairOutcome parked = outcome_of(plan, 4, -1, "hot");
    CHECK(parked.role == -1);
    CHECK(parked.part == Part::spare);
    Plan from_hdf5 = plan;
    from_hdf5.from_checkpoint = true;
    CHECK(outcome_of(from_hdf5, 0, 0, "hot").tier == 3);
}

// --- spare admission (issue 29, item 3): a spare takes a role only after its health check ------

namespace {
std::vector<Report> one_dead_role(std::int64_t need, std::vector<Report> spares) {
    std::vector<Report> reports{survivor(0, 10, 9, 2, 10, 9), survivor(2, 10, 9, 0, 10, 9),
                                survivor(3, 10, 9, 1, 10, 9)};
    for (auto& r : reports) r.shm_need = need;
    for (auto& s : spares) reports.push_back(std::move(s));
    return reports;
}
Report spare_with(std::int64_t id, std::int64_t room, std::string unhealthy = {}) {
    Report r = spare(id);
    r.shm_room = room;
    r.unhealthy = std::move(unhealthy);
    return r;
}
}  // namespace

TEST_CASE("admission: a spare short of /dev/shm room is passed over for the next one, and named") {
    const auto reports = one_dead_role(4096, {spare_with(7, 1024), spare_with(8, 1 << 20)});
    const Plan plan = plan_repair(shape, reports);
    CHECK(plan.version == 10);
    CHECK(plan.missing_spares == 0);
    REQUIRE(plan.replacements.size() == 1);
    CHECK(plan.replacements[0].process == 4);  // spare 8, not spare 7
    CHECK(plan.role_of_process == std::vector<int>{0, 2, 3, -1, 1});
    REQUIRE(plan.rejected_spares.size() == 1);
    CHECK(plan.rejected_spares[0].process == 3);
    CHECK(plan.rejected_spares[0].reason.find("1024") != std::string::npos);
    CHECK(plan.rejected_spares[0].reason.find("4096") != std::string::npos);
    CHECK(plan.rejected_spares[0].reason.find("node2") != std::string::npos);
}

TEST_CASE("admission: a spare whose own check failed (its GPU) is passed over") {
    const auto reports = one_dead_role(4096, {spare_with(7, 1 << 20, "its GPU check failed: cudaMalloc: out of memory"),
                                              spare_with(8, 1 << 20)});
    const Plan plan = plan_repair(shape, reports);
    CHECK(plan.role_of_process == std::vector<int>{0, 2, 3, -1, 1});
    REQUIRE(plan.rejected_spares.size() == 1);
    CHECK(plan.rejected_spares[0].reason == "its GPU check failed: cudaMalloc: out of memory");
}

TEST_CASE("admission: no admissible spare left is the out-of-spares path, and spares not needed are not tried") {
    const Plan none = plan_repair(shape, one_dead_role(4096, {spare_with(7, 0), spare_with(8, 100)}));
    CHECK(none.missing_spares == 1);
    CHECK(none.rejected_spares.size() == 2);
    CHECK(none.role_of_process == std::vector<int>{0, 2, 3, -1, -1});
    // The first spare passes: the second, short of room, is never tried (and never named).
    const Plan first = plan_repair(shape, one_dead_role(4096, {spare_with(7, 1 << 20), spare_with(8, 0)}));
    CHECK(first.rejected_spares.empty());
    CHECK(first.role_of_process == std::vector<int>{0, 2, 3, 1, -1});
    // Nobody died: nobody is admitted or rejected.
    std::vector<Report> all{survivor(0, 10, 9, 2, 10, 9), survivor(1, 10, 9, 3, 10, 9), survivor(2, 10, 9, 0, 10, 9),
                            survivor(3, 10, 9, 1, 10, 9), spare_with(7, 0)};
    CHECK(plan_repair(shape, all).rejected_spares.empty());
}

TEST_CASE("admission: an unchecked room (-1) and no need pass; the count of admissible spares decides the spawns") {
    CHECK(admission_problem(spare_with(7, -1), 4096).empty());
    CHECK(admission_problem(spare_with(7, 0), 0).empty());
    CHECK_FALSE(admission_problem(spare_with(7, 4095), 4096).empty());
    CHECK(admission_problem(spare_with(7, 4096), 4096).empty());
    const auto reports = one_dead_role(4096, {spare_with(7, 1024), spare_with(8, 1 << 20), spare_with(9, -1)});
    CHECK(shm_need(reports) == 4096);
    CHECK(admissible_spares(reports) == 2);
    // A spawned process (higher id) takes the role when the hot spare fails admission.
    const Plan plan = plan_repair(shape, one_dead_role(4096, {spare_with(7, 0), spare_with(2000003, 1 << 20)}));
    CHECK(plan.role_of_process == std::vector<int>{0, 2, 3, -1, 1});
    CHECK(plan.rejected_spares.size() == 1);
}

TEST_CASE("admission fields survive serialization, the reason with its spaces") {
    Report r = spare_with(7, 123456, "its GPU check failed: cudaMemset: an illegal memory access");
    const Report back = deserialize(serialize(r));
    CHECK(back.shm_room == 123456);
    CHECK(back.unhealthy == r.unhealthy);
    Report live = survivor(2, 9, 8, 0, 9, 8);
    live.shm_need = 987654;
    const Report live_back = deserialize(serialize(live));
    CHECK(live_back.shm_need == 987654);
    CHECK(live_back.shm_room == -1);
    CHECK(live_back.unhealthy.empty());
}

// The replacement's GPU (Plan::slot_of_role, docs/gpu.md): reports on one node each, with slots.
namespace {
Report at(const std::string& node, int role, int slot) {
    Report r;
    r.node = node;
    r.role = role;
    r.slot = slot;
    return r;
}
}  // namespace

TEST_CASE("slots: a spare on the dead role's node takes the dead role's slot (its GPU is free now)") {
    // node A: roles 0 and 1 in slots 0 and 1, a hot spare in slot 2; role 1 died.
    const std::vector<Report> reports{at("A", 0, 0), at("A", -1, 2)};
    CHECK(slots_after(reports, {0, 1}, 2) == std::vector<int>{0, 1});
}

TEST_CASE("slots: a spare on another node keeps its own slot; live roles keep theirs") {
    // node A: roles 0 and 2 in slots 0 and 1, a spare in slot 2; role 1 died on node B (role 3 there, slot 1).
    const std::vector<Report> reports{at("A", 0, 0), at("A", 2, 1), at("B", 3, 1), at("A", -1, 2)};
    CHECK(slots_after(reports, {0, 2, 3, 1}, 4) == std::vector<int>{0, 2, 1, 1});
}

TEST_CASE("slots: spares that stay spares keep theirs from the replacements on a spare node") {
    // spare node C: spares in slots 0 and 1, the second one taking dead role 1 (the first was
    // rejected, say): slot 1, its own; the one left a spare keeps slot 0.
    const std::vector<Report> reports{at("A", 0, 0), at("C", -1, 0), at("C", -1, 1)};
    CHECK(slots_after(reports, {0, -1, 1}, 2) == std::vector<int>{0, 1});
}

TEST_CASE("slots: a spawned process (no slot yet) and two replacements on one node, in role order") {
    // node A lost roles 0 and 1 (slots 0, 1); role 2 lives in slot 2; a hot spare (slot 3) and a
    // spawned process (slot -1) take roles 1 and 0: role 0 gets slot 0, role 1 slot 1.
    const std::vector<Report> reports{at("A", 2, 2), at("A", -1, 3), at("A", -1, -1)};
    CHECK(slots_after(reports, {2, 1, 0}, 3) == std::vector<int>{0, 1, 2});
}

TEST_CASE("slots: plan_repair fills them, and the slot survives serialization") {
    std::vector<Report> reports;
    for (int role : {0, 2, 3}) {
        Report r = survivor(role, 9, 8, (role + 2) % 4, 9, 8);
        r.slot = role % 2;
        reports.push_back(r);
    }
    Report s = spare(100);
    s.slot = 0;
    reports.push_back(s);
    const Plan plan = plan_repair(shape, reports);
    CHECK(plan.slot_of_role == std::vector<int>{0, 0, 0, 1});  // role 1 on node2 (spare's own slot 0)
    CHECK(deserialize(serialize(s)).slot == 0);
    CHECK(deserialize(serialize(reports[0])).slot == 0);
}
