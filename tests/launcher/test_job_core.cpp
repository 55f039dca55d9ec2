// Scenario tests of the launcher's functional core (job_core.hpp): scripted inputs, a fake clock,
// and the effects it asks for, checked as values. No process, socket or file is involved: the
// harness plays the shell (it answers StartAttempt, TeardownAttempt and KillRank the way
// supervisor.cpp does) and the control plane (its view of the ranks).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "effect_queue.hpp"
#include "exit_codes.hpp"
#include "job_core.hpp"

using namespace flashrec::launcher;
namespace records = flashrec::ft::records;
using std::chrono::milliseconds;
using json = nlohmann::json;

namespace {

int exited(int code) { return code << 8; }  // wait statuses
int signalled(int sig) { return sig; }

const std::vector<std::string> kRoles = {"dp0.tp0.pp0", "dp1.tp0.pp0", "dp2.tp0.pp0", "dp3.tp0.pp0"};

// dp 4 on 2 nodes of 2 ranks, one hot spare; heartbeats every 100 ms, hangs after 1 s.
LaunchPlan plan_of(int warm_relaunches = 2, std::string checkpoint_dir = "", bool slurm = false, int spare_nodes = 1) {
    LaunchPlan plan;
    auto& cfg = plan.cfg;
    cfg.job.name = "t-core";
    cfg.job.nodes = 2;
    cfg.job.ranks_per_node = 2;
    cfg.job.dp = 4;
    cfg.job.hot_spares = 1;
    cfg.job.steps = 50;
    cfg.recovery.warm_relaunches = warm_relaunches;
    cfg.detection.heartbeat_ms = 100;
    cfg.detection.hang_timeout_ms = 1000;
    cfg.checkpoint.dir = std::move(checkpoint_dir);
    cfg.logging.progress = false;
    plan.local_host = "here";
    plan.events_path = "/nonexistent/t-core.events.jsonl";
    if (slurm) {
        cfg.job.spare_nodes = spare_nodes;
        plan.allocation = flashrec::slurm::split_nodes(spare_nodes ? std::vector<std::string>{"fn1", "fn2", "fn3"}
                                                                    : std::vector<std::string>{"fn1", "fn2"},
                                                       2, spare_nodes);
        plan.allocation->job_id = "42";
    }
    plan.layout = make_layout(cfg, plan.local_host, plan.allocation ? &*plan.allocation : nullptr);
    return plan;
}

// The shell and the control plane, played by the test.
class Harness {
public:
    explicit Harness(LaunchPlan p) : plan(std::move(p)), t0_(SteadyClock::now()), w0_(WallClock::now()) {}

    LaunchPlan plan;
    std::vector<RankInfo> ranks;    // the controller's view
    std::set<int> dead;             // pids whose process is gone
    std::set<std::string> silent;   // roles whose process sends nothing (stopped, frozen, cut off)
    std::optional<std::int64_t> checkpoint;  // what a teardown finds in checkpoint.dir
    std::optional<std::vector<std::string>> allocation;  // what a teardown finds Slurm's job holds
    std::set<std::string> unreachable;  // nodes where the teardown's srun check starts no process
    std::vector<std::vector<std::string>> checked;  // the check_nodes of each teardown that asked
    bool check_runs = true;  // false: the shell could not run the check (no srun)
    Effects effects;                // everything the core asked for, in order
    std::unique_ptr<JobCore> core;

    Now now() const { return {t0_ + elapsed_, w0_ + elapsed_}; }
    void advance(milliseconds by) { elapsed_ += by; }

    void start() {
        core = std::make_unique<JobCore>(plan, plan.local_host, std::nullopt, now());
        run(core->start(false));
    }
    void feed(const Input& input) { run(core->on(input, now())); }
    void tick() {
        Tick t;
        for (const int pid : core->pids_to_watch(ranks))
            if (!dead.count(pid)) t.live_pids.insert(pid);
        t.ranks = ranks;
        t.drops = drops;
        feed(t);
    }
    // Ticks every 10 ms for `span`.
    void run_for(milliseconds span) {
        for (milliseconds t{0}; t < span; t += milliseconds(10)) {
            advance(milliseconds(10));
            tick();
        }
    }

    // The ranks of the current attempt register and enter their step loop (spare parked).
    void register_all(std::int64_t tag = 0) {
        ranks.clear();
        int pid = 1000 * core->attempt().index;
        for (const auto& role : kRoles) ranks.push_back(rank(role, ++pid, tag));
        ranks.push_back(rank("spare:0", ++pid, 0, wire::Phase::idle));
        tick();
    }
    RankInfo rank(const std::string& role, int pid, std::int64_t tag, wire::Phase phase = wire::Phase::compute) {
        RankInfo r;
        r.role = role;
        r.pid = pid;
        r.hostname = plan.layout.slurm ? plan.layout.node_of_role(role) : plan.local_host;
        r.registered_at = now().steady;
        r.last_heartbeat = now().steady;
        r.heartbeats = 1;
        r.phase = phase;
        r.step_tag = tag;
        return r;
    }
    RankInfo& of(const std::string& role) {
        return *std::find_if(ranks.begin(), ranks.end(), [&](const RankInfo& r) { return r.role == role; });
    }
    void steps(std::int64_t from, std::int64_t to) {
        for (std::int64_t s = from; s < to; ++s) {
            advance(milliseconds(5));
            for (auto& r : ranks)
                if (!is_spare_role(r.role) && r.status == RankStatus::active && !silent.count(r.role)) {
                    r.step_tag = s + 1;
                    r.last_heartbeat = now().steady;
                    ++r.heartbeats;
                }
            feed(records::Step{s, 1.0});
        }
        tick();
    }
    // The job ends well with rank 0's `stats`; effects become the launcher's summary.
    void finish_with(const records::JobStats& stats) {
        feed(stats);
        all_finished();
        ranks_exit();
        mpirun_exits(exited(0));
        tick();
        effects = core->summary(now());
    }
    void finished(const std::string& role) { feed(records::RoleFinished{role, of(role).pid, plan.cfg.job.steps, "0123456789abcdef"}); }
    void all_finished() {
        for (const auto& role : kRoles) finished(role);
    }
    // Every rank's process ends: its connection closes (BYE, or lost without one).
    void ranks_exit(RankStatus how = RankStatus::exited) {
        for (auto& r : ranks) {
            r.status = how;
            dead.insert(r.pid);
        }
    }
    RankIncident incident(const std::string& role, IncidentReason reason) {
        const RankInfo& r = of(role);
        return {role, r.hostname, 0, r.pid, reason, r.step_tag, milliseconds(1000)};
    }
    void lose(const std::string& role) {
        of(role).status = RankStatus::lost;
        dead.insert(of(role).pid);
        feed(RankLost{incident(role, IncidentReason::connection_lost)});
    }
    void mpirun_exits(int status) { feed(MpirunExited{status}); }
    // The ranks' record of an in-job repair of `role` by the hot spare.
    void hot_spare_repaired(const std::string& role, double total_ms) {
        records::Recovery r;
        r.failed_roles = {role};
        r.replacement = "hot";
        r.total_ms = total_ms;
        feed(RecoveryRecord{r, r.to_json()});
    }
    // The parked spare (on the spare node) takes `role` in-job, and says so.
    void hot_spare_takes(const std::string& role, double total_ms) {
        RankInfo& spare = of("spare:0");
        spare.role = role;
        spare.phase = wire::Phase::compute;
        hot_spare_repaired(role, total_ms);
    }

    // What the core asked for.
    // Every record of type R the core asked to log (launcher_records.hpp), in order.
    template <class R>
    std::vector<R> logged() const {
        std::vector<R> out;
        for (const auto& e : effects)
            if (const auto* r = std::get_if<LogRecord>(&e))
                if (const auto* x = std::get_if<R>(&r->record)) out.push_back(*x);
        return out;
    }
    bool said(const std::string& text) const {
        return std::any_of(effects.begin(), effects.end(), [&](const Effect& e) {
            const auto* s = std::get_if<Say>(&e);
            return s && s->line.find(text) != std::string::npos;
        });
    }
    template <class T>
    std::vector<T> asked() const {
        std::vector<T> out;
        for (const auto& e : effects)
            if (const auto* x = std::get_if<T>(&e)) out.push_back(*x);
        return out;
    }
    std::vector<Failure> failures(const std::string& observed) const {
        std::vector<Failure> out;
        for (const auto& f : logged<Failure>())
            if (f.observed == observed) out.push_back(f);
        return out;
    }
    std::array<std::uint64_t, kDropReasonCount> drops{};

private:
    // The shell's side of the effects that report back.
    void run(const Effects& fx) {
        check_effect_order(fx);  // every list in every scenario keeps the queue's rule
        for (const auto& e : fx) {
            effects.push_back(e);
            if (std::get_if<StartAttempt>(&e)) {
                ranks.clear();
                dead.clear();
                feed(AttemptStarted{900 + core->attempt().index, {"fr-mpirun"}, now().steady});
            } else if (std::get_if<TeardownAttempt>(&e)) {
                advance(milliseconds(20));
                TeardownDone done;
                done.checkpoint_step = checkpoint;
                if (!checkpoint) done.no_checkpoint_why = "no checkpoint in the test";
                done.allocation_nodes = allocation;
                if (const auto& check = std::get<TeardownAttempt>(e).check_nodes; !check.empty() && check_runs) {
                    checked.push_back(check);
                    std::vector<std::string> out;
                    for (const auto& node : check)
                        if (unreachable.count(node)) out.push_back(node);
                    done.unreachable_nodes = out;
                }
                feed(done);
            } else if (const auto* kill = std::get_if<KillRank>(&e)) {
                dead.insert(kill->incident.pid);
                feed(RankHung{kill->incident, KillOutcome::killed, now().wall});
            }
        }
    }
    SteadyTime t0_;
    WallTime w0_;
    milliseconds elapsed_{0};
};

// A job that runs to step `to` and then dies with `status` (its ranks lost).
void die_at(Harness& h, std::int64_t to, int status) {
    h.register_all();
    h.steps(0, to);
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(status);
    h.tick();
}

// A rank asks for `code` (its ending_job record), then the job dies with it.
void ends_with(Harness& h, int code, const std::string& role, const std::string& why) {
    h.feed(records::EndingJob{code, h.of(role).pid, why, {}});
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(exited(code));
    h.tick();
}

// The current attempt loses `roles` (each classified after its last words), then the job dies
// with `status`.
void die_losing(Harness& h, std::initializer_list<std::string> roles, int status) {
    h.advance(milliseconds(500));
    for (const auto& role : roles) h.lose(role);
    h.run_for(milliseconds(400));
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(status);
    h.tick();
}

// The attempt that was started last runs to the end and finishes.
void run_to_the_end(Harness& h, std::int64_t from) {
    h.register_all(from);
    h.steps(from, h.plan.cfg.job.steps);
    h.all_finished();
    h.ranks_exit();
    h.mpirun_exits(exited(0));
    h.tick();
}

}  // namespace

// ------------------------------------------------------------------------------------------
// the finish rule

TEST_CASE("finish: every active role's role_finished with steps == job.steps, then mpirun exits 0") {
    Harness h(plan_of());
    h.start();
    REQUIRE(h.asked<StartAttempt>().size() == 1);
    run_to_the_end(h, 0);
    CHECK(h.core->phase() == JobPhase::done);
    CHECK(h.core->outcome().name == "finished");
    CHECK(h.core->outcome().exit_code == kExitOk);
    REQUIRE(h.logged<AttemptJudged>().size() == 1);
    CHECK(h.logged<AttemptJudged>()[0].roles_finished == true);
    CHECK_FALSE(h.logged<AttemptJudged>()[0].note.has_value());
    CHECK(h.asked<StartAttempt>().size() == 1);
    CHECK(h.logged<Failure>().empty());
}

TEST_CASE("finish: mpirun exits 0 before the final records arrive; they come, then the connections close") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 50);
    h.mpirun_exits(exited(0));  // its ranks' records and EOFs still on their way
    h.tick();
    CHECK(h.core->phase() == JobPhase::awaiting_final_records);
    // However long they take: the judgement waits for what the connections carry, not for a timer.
    h.advance(milliseconds(5000));
    h.tick();
    CHECK(h.core->phase() == JobPhase::awaiting_final_records);
    CHECK(h.asked<KillLeftovers>().size() == 1);  // the ranks still live: ended, so that their EOF comes
    h.all_finished();
    h.ranks_exit();
    h.tick();
    CHECK(h.core->outcome().name == "finished");
    CHECK(h.logged<AttemptJudged>()[0].roles_finished == true);
    CHECK(h.asked<StartAttempt>().size() == 1);
}

TEST_CASE("finish: the final records arrive, then mpirun exits with a ULFM non-zero status") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 50);
    h.all_finished();
    h.ranks_exit(RankStatus::lost);  // a failure inside MPI_Finalize: no BYE
    h.mpirun_exits(exited(1));
    h.tick();
    CHECK(h.core->outcome().name == "finished");
    CHECK(h.core->outcome().exit_code == kExitOk);
    const auto exit = h.logged<AttemptJudged>().at(0);
    CHECK(exit.roles_finished == true);
    CHECK(exit.exit_code == 1);
    CHECK(exit.note.has_value());
    CHECK(h.asked<StartAttempt>().size() == 1);  // a finished attempt is never relaunched
}

TEST_CASE("finish: one role's record missing when every connection closed is a death, relaunched") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 50);
    for (std::size_t i = 0; i + 1 < kRoles.size(); ++i) h.finished(kRoles[i]);
    h.feed(records::RoleFinished{kRoles.back(), h.of(kRoles.back()).pid, 49, "0"});  // a step short
    h.ranks_exit();
    h.mpirun_exits(exited(0));
    h.tick();
    CHECK(h.logged<AttemptJudged>().at(0).roles_finished == false);
    CHECK(h.failures("job_ended_early").size() == 1);
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    CHECK(h.asked<StartAttempt>()[1].launch.relaunch);
}

TEST_CASE("finish: whatever mpirun's status; records of an earlier attempt do not count for the current one") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 50);
    h.all_finished();  // then mpirun is killed (it lingered): the records count, not its status
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(signalled(SIGKILL));
    h.tick();
    CHECK(h.core->outcome().name == "finished");

    Harness g(plan_of());
    g.start();
    die_at(g, 20, exited(1));
    REQUIRE(g.asked<StartAttempt>().size() == 2);
    // The relaunch: one role of the old attempt "finishes" late; the new attempt does not.
    g.register_all(20);
    g.feed(records::RoleFinished{kRoles[0], 1001, 50, "0"});  // a pid of attempt 1
    g.steps(20, 30);
    g.ranks_exit(RankStatus::lost);
    g.mpirun_exits(exited(1));
    g.tick();
    CHECK(g.logged<AttemptJudged>().at(1).roles_finished == false);
}

TEST_CASE("finish: a connection that never closes (a remote rank) is waited for at most 10 s") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 50);
    h.ranks_exit();
    h.of(kRoles[2]).status = RankStatus::active;
    h.of(kRoles[2]).hostname = "elsewhere";  // not a process this machine can see
    h.mpirun_exits(exited(0));
    h.run_for(milliseconds(9000));
    CHECK(h.core->phase() == JobPhase::awaiting_final_records);
    CHECK(h.asked<KillLeftovers>().empty());
    h.run_for(milliseconds(1100));
    CHECK(h.said("judging from the records that came"));
    CHECK(h.logged<AttemptJudged>().at(0).roles_finished == false);
}

TEST_CASE("no rank ever connected: mpirun's exit status is all there is") {
    Harness ok(plan_of());
    ok.start();
    ok.mpirun_exits(exited(0));
    ok.tick();
    CHECK(ok.core->outcome().name == "finished");
    CHECK(ok.core->outcome().message.find("no rank ever connected") != std::string::npos);

    Harness bad(plan_of());
    bad.start();
    bad.mpirun_exits(exited(2));
    bad.tick();
    CHECK(bad.core->outcome().name == "failed_to_start");
    CHECK(bad.core->outcome().exit_code == kExitUsage);
}

// ------------------------------------------------------------------------------------------
// the restart policy, one scenario per rule

TEST_CASE("policy: a job lost is warm-relaunched; the relaunch record has its phases and total_ms") {
    Harness h(plan_of());
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    CHECK(h.failures("job_ended_early").at(0).classification == "job_lost");
    CHECK(h.asked<StartAttempt>()[1].launch.relaunch);
    CHECK(h.core->attempt().kind == "warm_relaunch");
    h.register_all(20);
    records::Recovery ranks_side;  // the ranks' own record of the relaunch
    ranks_side.replacement = "relaunch";
    ranks_side.recovery_version = 20;
    h.feed(RecoveryRecord{ranks_side, ranks_side.to_json()});
    h.steps(20, 22);
    h.run_for(milliseconds(50));
    const auto rel = h.logged<WarmRelaunch>();
    REQUIRE(rel.size() == 1);
    CHECK(rel[0].figures.outcome == "resumed");
    CHECK(rel[0].figures.total_ms.value_or(-1) > 0);
    // (detect and teardown are always there)
    CHECK(rel[0].figures.phases_ms.launch.has_value());
    CHECK(rel[0].figures.phases_ms.restore.has_value());
    CHECK(rel[0].figures.phases_ms.resumed.has_value());
    CHECK(rel[0].figures.restored_version == 20);
    CHECK(h.said("RECOVERED (tier 2): warm relaunch 1"));
    CHECK(h.core->metrics().recoveries.at(2) == 1);
}

TEST_CASE("policy: a relaunch whose steps all ran between two looks still records total_ms, counted in job_end") {
    Harness h(plan_of());
    h.start();
    die_at(h, 45, signalled(SIGKILL));
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    // No tick between the registration and the end: the roles were never seen in their loop.
    h.advance(milliseconds(300));
    h.steps(45, 50);
    h.ranks.clear();
    for (const auto& role : kRoles) h.ranks.push_back(h.rank(role, 5000 + static_cast<int>(h.ranks.size()), 50));
    h.all_finished();
    h.ranks_exit();
    h.mpirun_exits(exited(0));
    h.tick();
    const auto rel = h.logged<WarmRelaunch>();
    REQUIRE(rel.size() == 1);
    CHECK(rel[0].figures.outcome == "resumed");
    REQUIRE(rel[0].figures.total_ms.has_value());
    const double total = *rel[0].figures.total_ms;
    CHECK(total > 300);
    h.effects.clear();
    const Effects end = h.core->summary(h.now());
    h.effects = end;
    const auto job_end = h.logged<JobEnd>().at(0);
    CHECK(job_end.time_lost_ms.relaunch == doctest::Approx(total));
    CHECK(job_end.outcome == "finished");
}

TEST_CASE("policy: a relaunch's first step before any look saw the roles in their loop ends its restore phase") {
    Harness h(plan_of());
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    h.ranks.clear();
    for (const auto& role : kRoles) h.ranks.push_back(h.rank(role, 3000 + static_cast<int>(h.ranks.size()), 20, wire::Phase::idle));
    h.tick();  // registered, still restoring
    h.advance(milliseconds(40));
    h.steps(20, 23);
    h.run_for(milliseconds(2100));
    const auto rel = h.logged<WarmRelaunch>();
    REQUIRE(rel.size() == 1);
    CHECK(rel[0].figures.phases_ms.restore.value_or(-1) >= 40);
    CHECK(rel[0].figures.total_ms.has_value());
}

TEST_CASE("policy: a relaunch whose roles were in their loop before any look saw them registered: "
          "its restore phase is the ranks' own") {
    Harness h(plan_of());
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    // Registration, restore and the first steps all between two looks (a busy machine).
    h.ranks.clear();
    for (const auto& role : kRoles) h.ranks.push_back(h.rank(role, 4000 + static_cast<int>(h.ranks.size()), 20));
    records::Recovery ranks_side;
    ranks_side.replacement = "relaunch";
    ranks_side.recovery_version = 20;
    ranks_side.phases_ms_max = {{"exchange", 9.0}, {"restore", 2.5}, {"resumed", 6.5}, {"first_step", 10.0}};
    h.feed(RecoveryRecord{ranks_side, ranks_side.to_json()});
    h.advance(milliseconds(5));
    h.feed(records::Step{20, 1.0});
    h.steps(21, 23);
    h.run_for(milliseconds(50));
    const auto rel = h.logged<WarmRelaunch>();
    REQUIRE(rel.size() == 1);
    CHECK(rel[0].figures.phases_ms.launch.has_value());
    CHECK(rel[0].figures.phases_ms.restore.has_value());
    CHECK(rel[0].figures.phases_ms.restore.value_or(-1) == doctest::Approx(18.0));
}

TEST_CASE("policy: warm relaunches spent -> HDF5 restart from the newest checkpoint") {
    Harness h(plan_of(0, "/ckpt"));
    h.checkpoint = 10;
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    CHECK(h.logged<WarmRelaunchRefused>().at(0).why == "recovery.warm_relaunches spent");
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    CHECK(h.asked<StartAttempt>()[1].launch.resume);
    CHECK(h.core->attempt().kind == "cold_restart");
    run_to_the_end(h, 10);
    const auto cold = h.logged<ColdRestart>();
    REQUIRE(cold.size() == 1);
    CHECK(cold[0].figures.checkpoint_step == 10);
    CHECK(cold[0].figures.steps_replayed == 10);
    CHECK(cold[0].figures.total_ms.has_value());
    CHECK(h.core->outcome().name == "finished");
}

TEST_CASE("policy: no relaunch left and no checkpoint -> relaunch_budget_spent (75)") {
    Harness h(plan_of(0));
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    CHECK(h.asked<StartAttempt>().size() == 1);
    CHECK(h.core->outcome().name == "relaunch_budget_spent");
    CHECK(h.core->outcome().exit_code == kExitNeedsRelaunch);
}

TEST_CASE("policy: a checkpoint.dir without a checkpoint refuses the HDF5 restart") {
    Harness h(plan_of(0, "/ckpt"));
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    CHECK(h.logged<ColdRestartRefused>().at(0).why == "no checkpoint in the test");
    CHECK(h.core->outcome().exit_code == kExitNeedsRelaunch);
}

TEST_CASE("policy: at most 2 HDF5 restarts per launch") {
    Harness h(plan_of(0, "/ckpt"));
    h.checkpoint = 5;
    h.start();
    // Each attempt gets further than the one before (progress): the HDF5 budget ends it, not
    // the restart-loop rule (the same failure at the same step: the "restarts" cases below).
    for (int i = 0; i < 3; ++i) die_at(h, 10 + i, signalled(SIGKILL));
    CHECK(h.logged<ColdRestart>().size() == 2);
    CHECK(h.logged<ColdRestartRefused>().back().why == "at most 2 HDF5 restarts per launch");
    CHECK(h.core->outcome().exit_code == kExitNeedsRelaunch);
}

TEST_CASE("policy: state lost in-job (76) with every node alive is warm-relaunched before HDF5") {
    Harness h(plan_of(1, "/ckpt"));
    h.start();
    h.register_all();
    h.steps(0, 20);
    ends_with(h, flashrec::ft::kExitStateLost, kRoles[0], "state lost");
    CHECK(h.failures("exit_code").back().classification == "state_lost");
    CHECK(h.logged<WarmRelaunchBeforeHdf5>().size() == 1);
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    CHECK(h.asked<StartAttempt>()[1].launch.relaunch);
}

TEST_CASE("policy: spares exhausted (77) -> HDF5 restart, or exit 77 without a checkpoint") {
    Harness with(plan_of(2, "/ckpt"));
    with.checkpoint = 10;
    with.start();
    with.register_all();
    with.steps(0, 20);
    ends_with(with, flashrec::ft::kExitNoSpare, kRoles[1], "no spare");
    CHECK(with.failures("exit_code").back().classification == "spares_exhausted");
    CHECK(with.core->attempt().kind == "cold_restart");

    Harness without(plan_of(2));
    without.start();
    die_at(without, 20, exited(77));
    CHECK(without.core->outcome().name == "spares_exhausted");
    CHECK(without.core->outcome().exit_code == kExitNoSpares);
}

TEST_CASE("policy: a bad configuration (exit 2) stops the job, no retry") {
    Harness h(plan_of());
    h.start();
    die_at(h, 0, exited(2));
    CHECK(h.asked<StartAttempt>().size() == 1);
    CHECK(h.core->outcome().name == "failed");
    CHECK(h.core->outcome().exit_code == kExitUsage);
}

// ------------------------------------------------------------------------------------------
// incidents, one scenario per kind

TEST_CASE("incident: a silent rank killed by the shell is a process_hang; its loss is the kill confirmed") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    h.feed(RankHung{h.incident(kRoles[1], IncidentReason::no_heartbeat), KillOutcome::killed, h.now().wall});
    const auto hangs = h.failures("hang_no_heartbeat");
    REQUIRE(hangs.size() == 1);
    CHECK(hangs[0].classification == "process_hang");
    CHECK(h.logged<HangKill>().at(0).result == "killed");
    // ... then the same rank is lost: no second incident.
    h.lose(kRoles[1]);
    h.run_for(milliseconds(500));
    CHECK(h.logged<KillConfirmed>().size() == 1);
    CHECK(h.logged<Failure>().size() == 1);
    // The in-job recovery marks it recovered.
    h.hot_spare_repaired(kRoles[1], 42);
    CHECK(h.said("RECOVERED tier 1: dp1.tp0.pp0 -> hot"));
    h.steps(10, 50);
    h.all_finished();
    h.ranks_exit();
    h.mpirun_exits(exited(0));
    h.tick();
    h.effects = h.core->summary(h.now());
    CHECK(h.logged<JobEnd>().at(0).incidents[0].recovered_by == "in-job tier 1 (hot)");
}

TEST_CASE("incident: a stall is confirmed before the kill, or cleared") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    // Stalled and still stuck after the confirmation time: killed.
    h.of(kRoles[2]).hung = true;
    h.feed(RankHung{h.incident(kRoles[2], IncidentReason::stalled), KillOutcome::pending, h.now().wall});
    CHECK(h.asked<KillRank>().empty());
    h.run_for(milliseconds(400));
    REQUIRE(h.asked<KillRank>().size() == 1);
    CHECK(h.failures("hang_stalled").size() == 1);
    // Stalled, but its tag moved on meanwhile: cleared, no incident.
    h.of(kRoles[3]).hung = true;
    h.feed(RankHung{h.incident(kRoles[3], IncidentReason::stalled), KillOutcome::pending, h.now().wall});
    h.of(kRoles[3]).hung = false;
    h.run_for(milliseconds(400));
    CHECK(h.logged<StallCleared>().size() == 1);
    CHECK(h.logged<Failure>().size() == 1);
}

TEST_CASE("incident: a lost rank is classified after its last words (its fault's record, an MPI error seen)") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    const int killed = h.of(kRoles[0]).pid, exiting = h.of(kRoles[1]).pid, plain = h.of(kRoles[2]).pid;
    h.feed(records::FaultInjected{"role=0:step=10:action=kill", killed, 0, "kill", 0, 10, "forward"});
    h.feed(records::FaultInjected{"role=1:step=10:action=exit:code=3", exiting, 0, "exit", 3, 10, "forward"});
    h.feed(records::MpiErrorSeen{plain, 75, "allreduce"});
    h.lose(kRoles[0]);
    h.lose(kRoles[1]);
    h.lose(kRoles[2]);
    h.run_for(milliseconds(100));
    CHECK(h.logged<Failure>().empty());  // still settling
    h.run_for(milliseconds(300));
    CHECK(h.failures("signal").at(0).value == SIGKILL);
    CHECK(h.failures("exit_code").at(0).value == 3);
    const auto lost = h.failures("connection_lost");
    REQUIRE(lost.size() == 1);
    CHECK(lost[0].step == 10);
    REQUIRE(lost[0].mpi_error_classes_seen.has_value());
    CHECK(lost[0].mpi_error_classes_seen->at("75") == 1);
}

TEST_CASE("incident: a cut connection whose process reconnects is no failure") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.of(kRoles[0]).status = RankStatus::lost;
    h.feed(RankLost{h.incident(kRoles[0], IncidentReason::connection_lost)});
    h.run_for(milliseconds(1000));  // alive here: waits up to 5 s
    h.of(kRoles[0]).status = RankStatus::active;
    h.tick();
    CHECK(h.logged<RankReconnected>().size() == 1);
    CHECK(h.logged<Failure>().empty());
}

TEST_CASE("incident: every rank of a node silent at once is the node's failure (this machine: killed, in-job)") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    // node1 holds dp2 and dp3 (the virtual nodes of one machine).
    h.feed(RankHung{h.incident(kRoles[2], IncidentReason::no_heartbeat), KillOutcome::killed, h.now().wall});
    h.advance(milliseconds(50));
    h.feed(RankHung{h.incident(kRoles[3], IncidentReason::no_heartbeat), KillOutcome::killed, h.now().wall});
    const auto node = h.failures("node_silent_local");
    REQUIRE(node.size() == 1);
    CHECK(node[0].node == "node1");
    CHECK(node[0].classification == "node_hang");
    CHECK(h.failures("hang_no_heartbeat").size() == 2);
    // Its ranks were killed: in-job recovery replaces them, the job goes on.
    CHECK(h.core->phase() == JobPhase::running);
    CHECK(h.asked<SignalJob>().empty());
}

TEST_CASE("incident: a rank on another host that cannot be killed takes its node (Slurm)") {
    Harness h(plan_of(2, "", true));
    h.start();
    h.register_all();
    h.steps(0, 10);
    h.feed(RankHung{h.incident(kRoles[3], IncidentReason::no_heartbeat), KillOutcome::remote, h.now().wall});
    CHECK(h.failures("node_silent_remote").at(0).node == "fn2");
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(signalled(SIGKILL));
    h.tick();
    // fn2 is given up on (drained) and the relaunch moves its ranks to the spare node fn3.
    REQUIRE(h.asked<Drain>().size() == 1);
    CHECK(h.asked<Drain>()[0].node == "fn2");
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    CHECK(h.asked<StartAttempt>()[1].layout.node_of_role(kRoles[3]) == "fn3");
    CHECK(h.logged<NewLayout>().size() == 1);
}

TEST_CASE("incident: no role's tag moving for the stall limit ends the job (job_stalled)") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    // limit: max(2 x hang timeout, (max_epochs x 6 + 1) x phase deadline)
    const auto& rc = h.plan.cfg.recovery;
    const auto limit = milliseconds(std::max<std::int64_t>(2000, (rc.max_epochs * 6LL + 1) * rc.phase_deadline_ms));
    h.run_for(limit + milliseconds(100));
    CHECK(h.said("the job is stalled"));
    CHECK(h.core->phase() == JobPhase::ending);
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(signalled(SIGKILL));
    h.tick();
    CHECK(h.failures("job_stalled").size() == 1);
}

TEST_CASE("incident: a launch whose roles never all register is ended at the startup limit (startup_stuck)") {
    // Issue 29's cluster soak: a node killed as the warm relaunch started its daemons; nothing
    // registered, and nothing else watches a rank that never did: the job waited for scancel.
    Harness h(plan_of(5));
    h.plan.cfg.detection.startup_timeout_ms = 30000;
    h.start();
    h.register_all();
    h.steps(0, 20);
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(signalled(SIGKILL));  // job_lost in step 20: a warm relaunch
    h.tick();
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    // Two of the relaunch's roles register, the others never do.
    h.ranks.push_back(h.rank(kRoles[0], 2001, 0));
    h.ranks.push_back(h.rank(kRoles[1], 2002, 0));
    h.run_for(milliseconds(29900));
    CHECK(h.logged<StartupStuck>().empty());
    CHECK(h.core->phase() == JobPhase::running);
    h.run_for(milliseconds(200));
    const auto stuck = h.logged<StartupStuck>();
    REQUIRE(stuck.size() == 1);
    CHECK(stuck[0].attempt == 2);
    CHECK(stuck[0].registered == 2);
    CHECK(stuck[0].active == static_cast<std::int64_t>(kRoles.size()));
    CHECK(h.said("the job did not start: 2 of 4 active roles did not register within 30.00 s of the launch"));
    CHECK(h.core->phase() == JobPhase::ending);
    CHECK(h.asked<SignalJob>().size() == 1);
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(signalled(SIGKILL));
    h.tick();
    const auto failure = h.failures("startup_stuck");
    REQUIRE(failure.size() == 1);
    CHECK(failure[0].classification == "startup_stuck");
    CHECK(h.asked<StartAttempt>().size() == 3);  // relaunched under the budget
    // A launch that registers in time is never touched, however long it then takes.
    run_to_the_end(h, 20);
    CHECK(h.logged<StartupStuck>().size() == 1);
    CHECK(h.core->outcome().name == "finished");
}

TEST_CASE("incident: mpirun lingering 10 s after every rank left is ended") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 20);
    h.ranks_exit(RankStatus::lost);
    h.run_for(milliseconds(10100));
    CHECK(h.logged<MpirunLingered>().size() == 1);
    CHECK(h.asked<SignalJob>().size() == 1);
    CHECK(h.core->phase() == JobPhase::ending);
}

// Direct launch (slurm.launch: srun): Open MPI 5.0.10 crashes now and then inside MPI_Init under
// srun; a step none of whose ranks connected is started again (twice at most), then judged as before.
LaunchPlan direct_plan_of() {
    LaunchPlan plan = plan_of(2, "", true);
    plan.direct.emplace(std::vector<std::string>{"--with-ft", "ulfm"}, "/nonexistent/t-core.hosts", "");
    return plan;
}

// Issue 47, item 5: under srun the hot spares run out with every role's state intact; a new step
// in the same allocation (a warm relaunch) brings hot spares again, before any HDF5 restart.
TEST_CASE("policy: spares exhausted (77) under direct launch -> a new step (warm relaunch) before HDF5") {
    LaunchPlan plan = direct_plan_of();
    plan.cfg.checkpoint.dir = "/ckpt";
    Harness h(std::move(plan));
    h.checkpoint = 10;
    h.start();
    h.register_all();
    h.steps(0, 20);
    // dp1 dies; the survivors find no spare for it and end the step, naming it.
    const std::string dead_node = h.of(kRoles[1]).hostname;
    h.lose(kRoles[1]);
    for (const auto& role : {kRoles[0], kRoles[2], kRoles[3]})
        h.feed(records::EndingJob{flashrec::ft::kExitNoSpare, h.of(role).pid, "no spare", {kRoles[1]}});
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(exited(flashrec::ft::kExitNoSpare));
    h.tick();
    CHECK(h.failures("exit_code").back().classification == "spares_exhausted");
    // Its death is on record (the others' leaving is not), and its node is not used again.
    const auto lost = h.failures("connection_lost");
    REQUIRE(lost.size() == 1);
    CHECK(lost[0].role == kRoles[1]);
    REQUIRE(h.asked<Drain>().size() == 1);
    CHECK(h.asked<Drain>()[0].node == dead_node);
    REQUIRE(h.logged<WarmRelaunchBeforeHdf5>().size() == 1);
    CHECK(h.logged<WarmRelaunchBeforeHdf5>()[0].why.find("no hot spare left") != std::string::npos);
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    CHECK(h.asked<StartAttempt>()[1].launch.relaunch);
    CHECK(h.core->attempt().kind == "warm_relaunch");
    // That step found nothing to restore (it ended 77 again before a step): HDF5 now.
    h.register_all();
    ends_with(h, flashrec::ft::kExitNoSpare, kRoles[1], "no spare");
    CHECK(h.core->attempt().kind == "cold_restart");
}

// slurm.launch.direct_spares_exhausted: the hot spare took a role in-job; the next step's layout
// still listed the node that role had left, so a doubled-up rank could have gone to a drained node.
TEST_CASE("a role a hot spare took in-job: the active nodes follow it, and a relaunch doubles up onto them") {
    Harness h(direct_plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    h.lose(kRoles[3]);  // on fn2: drained
    h.hot_spare_takes(kRoles[3], 42);  // the spare on fn3
    h.steps(10, 20);
    REQUIRE(h.logged<RoleMoved>().size() == 1);
    CHECK(h.logged<RoleMoved>()[0].to == "fn3");
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(signalled(SIGKILL));
    h.tick();
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    const Layout& next = h.asked<StartAttempt>()[1].layout;
    // fn2 is given up and no free node is left: dp2 doubles up onto the node with the fewest
    // ranks, fn3 (1) rather than fn1 (2).
    CHECK(next.nodes == std::vector<std::string>{"fn1", "fn3"});
    CHECK(next.node_of_role(kRoles[2]) == "fn3");
    CHECK(next.node_of_role(kRoles[3]) == "fn3");
}

TEST_CASE("direct launch: a first step that never came up is started again, then the job runs") {
    Harness h(direct_plan_of());
    h.start();
    h.mpirun_exits(signalled(SIGSEGV));  // a task crashed in MPI_Init; no rank registered
    h.tick();
    const auto retried = h.logged<StartRetried>();
    REQUIRE(retried.size() == 1);
    CHECK(retried[0].attempt == 1);
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    CHECK(h.core->attempt().kind == "start_retry");
    CHECK(h.core->phase() == JobPhase::running);
    run_to_the_end(h, 0);
    CHECK(h.core->outcome().name == "finished");
}

// The direct-launch chaos soak (seed 48, trial 8): a node killed as a new step started. srun ended
// the step ("Task launch for StepId=9.1 failed on node frnode4"), words nothing reads, and every
// later step went to that node again until the restart-loop rule ended the job (80).
TEST_CASE("direct launch: a node dead as a new step starts is found by srun's check of every node, and left out") {
    Harness h(direct_plan_of());
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    REQUIRE(h.asked<StartAttempt>().size() == 2);  // the warm relaunch: a new step
    h.unreachable = {"fn2"};
    h.mpirun_exits(exited(141));  // before any rank of the new step registered
    h.tick();
    REQUIRE(h.checked.size() == 1);
    CHECK(h.checked[0] == std::vector<std::string>{"fn1", "fn2", "fn3"});  // every node of the step
    REQUIRE(h.logged<NodeLost>().size() == 1);
    CHECK(h.logged<NodeLost>()[0].node == "fn2");
    CHECK(h.logged<DaemonLossUnconfirmed>().empty());  // the healthy nodes were never named
    REQUIRE(h.asked<Drain>().size() == 1);
    CHECK(h.asked<Drain>()[0].node == "fn2");
    REQUIRE(h.asked<StartAttempt>().size() == 3);
    const Layout third = h.asked<StartAttempt>()[2].layout;
    CHECK(third.node_of_role(kRoles[2]) != "fn2");
    CHECK(third.node_of_role(kRoles[3]) != "fn2");
    h.unreachable.clear();
    run_to_the_end(h, 20);
    CHECK(h.core->outcome().name == "finished");
}

// A step that ended for another reason once every rank had registered names no node to check.
TEST_CASE("direct launch: a step that dies after every rank registered checks no node") {
    Harness h(direct_plan_of());
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    CHECK(h.checked.empty());
}

TEST_CASE("direct launch: a step that never comes up three times is a job that never started") {
    Harness h(direct_plan_of());
    h.start();
    h.mpirun_exits(exited(75));
    h.tick();
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    h.mpirun_exits(signalled(SIGSEGV));
    h.tick();
    REQUIRE(h.asked<StartAttempt>().size() == 3);
    h.mpirun_exits(signalled(SIGSEGV));
    h.tick();
    CHECK(h.asked<StartAttempt>().size() == 3);
    CHECK(h.logged<StartRetried>().size() == 2);
    CHECK(h.core->outcome().name == "failed_to_start");
}

TEST_CASE("direct launch: a bad config, and any mpirun launch, are not started again") {
    Harness bad(direct_plan_of());
    bad.start();
    bad.mpirun_exits(exited(flashrec::ft::kExitBadConfig));
    bad.tick();
    CHECK(bad.asked<StartAttempt>().size() == 1);
    CHECK(bad.core->outcome().name == "failed_to_start");
    Harness mpirun(plan_of(2, "", true));
    mpirun.start();
    mpirun.mpirun_exits(signalled(SIGSEGV));
    mpirun.tick();
    CHECK(mpirun.asked<StartAttempt>().size() == 1);
    CHECK(mpirun.core->outcome().name == "failed_to_start");
}

// Issue 47, item 4: one hung rank on another node is killed alone, by a step of the Slurm job on
// its node, instead of giving up the whole node.
TEST_CASE("hung rank under direct launch: killed alone on its node through Slurm; repaired in-job; the node stays") {
    Harness h(direct_plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    h.silent = {kRoles[3]};  // stopped; dp2 on the same node fn2 runs on
    h.steps(10, 30);
    h.feed(HangReported{h.incident(kRoles[3], IncidentReason::no_heartbeat)});  // dp3 runs on fn2
    REQUIRE(h.asked<KillRank>().size() == 1);
    const auto route = h.asked<KillRank>()[0].on_node;
    REQUIRE(route.has_value());  // a task of srun's step: never kill(2) from here
    CHECK(route->node == "fn2");
    CHECK(route->job_id == "42");
    CHECK(h.logged<HangKill>().at(0).result == "killed");
    CHECK(h.failures("hang_no_heartbeat").at(0).classification == "process_hang");
    CHECK(h.failures("node_silent_remote").empty());  // fn2's other rank lives: not the node's failure
    h.lose(kRoles[3]);
    h.run_for(milliseconds(500));
    CHECK(h.logged<KillConfirmed>().size() == 1);
    h.hot_spare_repaired(kRoles[3], 42);
    CHECK(h.said("RECOVERED tier 1: dp3.tp0.pp0 -> hot"));
    CHECK(h.asked<Drain>().empty());  // the hung process was the fault, not fn2
    CHECK(h.asked<SignalJob>().empty());
    CHECK(h.core->phase() == JobPhase::running);
    CHECK(h.asked<StartAttempt>().size() == 1);
    // A rank of another node is a task of the step too (slurmstepd's child, not the launcher's).
    h.steps(30, 35);
    h.feed(HangReported{h.incident(kRoles[0], IncidentReason::no_heartbeat)});
    REQUIRE(h.asked<KillRank>().size() == 2);
    REQUIRE(h.asked<KillRank>()[1].on_node.has_value());
    CHECK(h.asked<KillRank>()[1].on_node->node == "fn1");
}

// slurm.launch.rank_hang, CI: the stopped rank's node peer waited behind it one step back (its
// ring exchange), so the same check found it stalled; the node was then taken for silent though
// that peer's heartbeats kept arriving.
TEST_CASE("hung rank whose node peer is judged stalled in the same check: the peer's heartbeats show the node alive") {
    Harness h(direct_plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    h.silent = {kRoles[3]};  // stopped
    h.steps(10, 30);
    h.of(kRoles[2]).hung = true;  // stalled behind it, heartbeats arriving
    h.tick();
    h.feed(HangReported{h.incident(kRoles[3], IncidentReason::no_heartbeat)});
    REQUIRE(h.asked<KillRank>().size() == 1);
    REQUIRE(h.asked<KillRank>()[0].on_node.has_value());
    CHECK(h.asked<KillRank>()[0].on_node->node == "fn2");
    CHECK(h.failures("node_silent_remote").empty());
}

// The same run, later: the peer's stall was confirmed while the hot spare was still taking the
// hung rank's role (2.5 s on the loaded machine), so a healthy rank was killed and, with the hung
// one gone, its node given up.
TEST_CASE("stalled behind a rank being repaired: judged after the repair; a stalled rank's own heartbeats show its node") {
    Harness h(direct_plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    h.silent = {kRoles[3]};
    h.steps(10, 30);
    h.of(kRoles[2]).hung = true;
    h.tick();
    h.feed(HangReported{h.incident(kRoles[3], IncidentReason::no_heartbeat)});
    h.feed(RankHung{h.incident(kRoles[2], IncidentReason::stalled), KillOutcome::pending, h.now().wall});
    h.lose(kRoles[3]);
    h.run_for(milliseconds(800));  // the repair under way: the stall waits
    REQUIRE(h.asked<KillRank>().size() == 1);
    h.hot_spare_repaired(kRoles[3], 900);
    h.of(kRoles[2]).hung = false;  // it moved once the repair was done
    h.of(kRoles[2]).step_tag = 31;
    h.run_for(milliseconds(400));
    CHECK(h.logged<StallCleared>().size() == 1);
    CHECK(h.asked<KillRank>().size() == 1);
    // Stalled again, now for itself, alone on fn2 with its heartbeats arriving: killed there.
    h.of(kRoles[2]).hung = true;
    h.feed(RankHung{h.incident(kRoles[2], IncidentReason::stalled), KillOutcome::pending, h.now().wall});
    for (int i = 0; i < 40; ++i) {
        h.of(kRoles[2]).last_heartbeat = h.now().steady;
        h.run_for(milliseconds(10));
    }
    REQUIRE(h.asked<KillRank>().size() == 2);
    REQUIRE(h.asked<KillRank>()[1].on_node.has_value());
    CHECK(h.asked<KillRank>()[1].on_node->node == "fn2");
    CHECK(h.failures("node_silent_remote").empty());
}

TEST_CASE("a stall is judged at the latest one hang timeout after its confirmation, a repair under way or not") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    h.silent = {kRoles[1]};
    h.steps(10, 20);
    h.feed(HangReported{h.incident(kRoles[1], IncidentReason::no_heartbeat)});
    h.of(kRoles[2]).hung = true;
    h.feed(RankHung{h.incident(kRoles[2], IncidentReason::stalled), KillOutcome::pending, h.now().wall});
    h.run_for(milliseconds(1000));  // the repair never reports: the stall still waits (hang timeout 1 s)
    CHECK(h.asked<KillRank>().size() == 1);
    h.run_for(milliseconds(400));
    CHECK(h.asked<KillRank>().size() == 2);
}

TEST_CASE("hung rank under mpirun in Slurm: kill(2) on this host, a step of the job on another node") {
    LaunchPlan plan = plan_of(2, "", true);
    plan.local_host = "fn1";
    Harness h(std::move(plan));
    h.start();
    h.register_all();
    h.steps(0, 10);
    h.feed(HangReported{h.incident(kRoles[1], IncidentReason::no_heartbeat)});  // fn1: mpirun's child
    h.feed(HangReported{h.incident(kRoles[2], IncidentReason::no_heartbeat)});  // fn2: prted's child
    const auto kills = h.asked<KillRank>();
    REQUIRE(kills.size() == 2);
    CHECK_FALSE(kills[0].on_node.has_value());
    REQUIRE(kills[1].on_node.has_value());
    CHECK(kills[1].on_node->node == "fn2");
    CHECK(h.failures("node_silent_remote").empty());
    CHECK(h.asked<Drain>().empty());
}

TEST_CASE("hung rank whose node's other ranks are silent too: its node is not asked, it goes as a whole") {
    Harness h(direct_plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    h.silent = {kRoles[2], kRoles[3]};  // fn2 frozen: neither of its ranks sends anything
    h.steps(10, 30);
    h.advance(milliseconds(1000));
    h.tick();
    h.feed(HangReported{h.incident(kRoles[3], IncidentReason::no_heartbeat)});
    REQUIRE(h.asked<KillRank>().size() == 1);
    CHECK_FALSE(h.asked<KillRank>()[0].on_node.has_value());  // the shell answers `remote`
}

TEST_CASE("hung rank whose node does not answer the kill: the node goes; its next hung rank is not tried there") {
    Harness h(direct_plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    // srun could not start the kill on fn2 (frozen, dead): the shell answers `remote`.
    h.feed(RankHung{h.incident(kRoles[3], IncidentReason::no_heartbeat), KillOutcome::remote, h.now().wall});
    CHECK(h.failures("node_silent_remote").at(0).node == "fn2");
    h.feed(HangReported{h.incident(kRoles[2], IncidentReason::no_heartbeat)});
    REQUIRE(h.asked<KillRank>().size() == 1);
    CHECK_FALSE(h.asked<KillRank>()[0].on_node.has_value());  // lost: no step starts there
}

// Issue 46, 1: every rank's ending_job was acknowledged and every connection closed within
// 13 ms, then the warm relaunch waited out mpirun's 10 s grace (PRRTE's lingering mpirun).
TEST_CASE("incident: an attempt the ranks ended, every process accounted for: mpirun is ended at once") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 20);
    for (const auto& r : h.ranks) h.feed(records::EndingJob{flashrec::ft::kExitStateLost, r.pid, "state lost", {}});
    h.ranks_exit();
    h.tick();
    const auto lingered = h.logged<MpirunLingered>();
    REQUIRE(lingered.size() == 1);
    CHECK(lingered[0].rule == "every_process_accounted_for");
    CHECK(lingered[0].grace_ms == 0);
    REQUIRE(h.asked<SignalJob>().size() == 1);
    CHECK(h.asked<SignalJob>()[0].signo == SIGKILL);
    CHECK(h.core->phase() == JobPhase::ending);
    h.mpirun_exits(signalled(SIGKILL));
    h.tick();
    CHECK(h.asked<StartAttempt>().size() == 2);  // the warm relaunch the ranks asked for
    CHECK(h.failures("exit_code").size() == 1);
}

TEST_CASE("incident: one process of the attempt left without its last record and lives on: mpirun keeps its grace") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 20);
    for (const auto& r : h.ranks)
        if (r.role != kRoles[1]) h.feed(records::EndingJob{flashrec::ft::kExitStateLost, r.pid, "state lost", {}});
    h.ranks_exit();
    h.dead.erase(h.of(kRoles[1]).pid);  // said BYE, but its process is still there
    h.run_for(milliseconds(9900));
    CHECK(h.logged<MpirunLingered>().empty());
    CHECK(h.asked<SignalJob>().empty());
    h.run_for(milliseconds(200));
    const auto lingered = h.logged<MpirunLingered>();
    REQUIRE(lingered.size() == 1);
    CHECK(lingered[0].rule == "grace_expired");
    CHECK(lingered[0].grace_ms == 10000);
}

// Every process but `lost`'s (and any lost before) leaves with its last record: the ranks'
// ending_job (77) names `named` dead, the spare's is spare_released.
void others_end_naming(Harness& h, const std::string& lost, const std::string& named) {
    for (auto& r : h.ranks) {
        if (r.role == lost || r.status == RankStatus::lost) continue;
        if (is_spare_role(r.role)) h.feed(records::SpareReleased{r.pid});
        else h.feed(records::EndingJob{flashrec::ft::kExitNoSpare, r.pid, "no spare", {named}});
        r.status = RankStatus::exited;
        h.dead.insert(r.pid);
    }
}

// Issue 47: under srun, a killed node's task sends no record; the survivors found no spare and
// ended the step naming its role dead, and srun waited out the 10 s grace for the dead node.
TEST_CASE("incident: a lost process the others' ending_job names dead is accounted for: srun is ended at once") {
    Harness h(direct_plan_of());
    h.start();
    h.register_all();
    h.steps(0, 20);
    h.lose(kRoles[3]);  // on fn2, not this host: its node was killed
    others_end_naming(h, kRoles[3], kRoles[3]);
    h.tick();
    const auto lingered = h.logged<MpirunLingered>();
    REQUIRE(lingered.size() == 1);
    CHECK(lingered[0].rule == "every_process_accounted_for");
    CHECK(lingered[0].grace_ms == 0);
}

TEST_CASE("incident: a lost process nobody named dead keeps srun's grace") {
    Harness h(direct_plan_of());
    h.start();
    h.register_all();
    h.steps(0, 20);
    h.lose(kRoles[3]);
    others_end_naming(h, kRoles[3], kRoles[2]);
    h.run_for(milliseconds(9900));
    CHECK(h.logged<MpirunLingered>().empty());
    h.run_for(milliseconds(200));
    const auto lingered = h.logged<MpirunLingered>();
    REQUIRE(lingered.size() == 1);
    CHECK(lingered[0].rule == "grace_expired");
}

// CI, slurm.launch.direct_spares_exhausted: the hot spare took frnode3's role in 27 ms; 250 ms
// later frnode2's rank died and the survivors ended the step (77). The first death was still
// waiting for its last words, and was then taken for a rank leaving the ended step: no failure
// record, and its node was never drained.
TEST_CASE("direct launch: a death repaired in-job stays a failure when the next death ends the step before it settles") {
    Harness h(direct_plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    h.lose(kRoles[3]);  // on fn2
    h.hot_spare_takes(kRoles[3], 27);  // the spare on fn3
    h.lose(kRoles[1]);  // on fn1, within kLostSettle of the first: no spare left
    others_end_naming(h, kRoles[1], kRoles[1]);
    h.mpirun_exits(exited(flashrec::ft::kExitNoSpare));
    h.tick();
    const auto lost = h.failures("connection_lost");
    REQUIRE(lost.size() == 2);
    CHECK(lost[0].role == kRoles[3]);
    CHECK(lost[1].role == kRoles[1]);
    std::set<std::string> drained;
    for (const auto& d : h.asked<Drain>()) drained.insert(d.node);
    CHECK(drained == std::set<std::string>{"fn1", "fn2"});
}

TEST_CASE("incident: a finished attempt keeps mpirun's grace (its exit forwards the ranks' last output)") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, h.plan.cfg.job.steps);
    h.all_finished();
    h.ranks_exit();
    h.run_for(milliseconds(500));
    CHECK(h.asked<SignalJob>().empty());
    h.mpirun_exits(exited(0));
    h.tick();
    CHECK(h.core->outcome().name == "finished");
}

// Issue 46, 3: a 60-step job of 236 ms printed "- steps/s" at the end.
TEST_CASE("report: a short job's progress line and summary show its rate") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, h.plan.cfg.job.steps);  // 50 steps, 5 ms apart: 49 steps in 245 ms
    records::JobStats stats;
    stats.steps = h.plan.cfg.job.steps;
    h.finish_with(stats);
    CHECK(h.said("step 50/50  loss 1  200.0 steps/s"));
    CHECK(h.said(", 200.0 steps/s (exit code 0)"));
    const auto end = h.logged<JobEnd>();
    REQUIRE(end.size() == 1);
    CHECK(end[0].steps_per_s == doctest::Approx(200.0));
}

// ------------------------------------------------------------------------------------------
// scenarios across parts

TEST_CASE("a hang confirmed, then the same rank lost: one incident, the kill confirmed") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    h.of(kRoles[0]).hung = true;
    h.feed(RankHung{h.incident(kRoles[0], IncidentReason::stalled), KillOutcome::pending, h.now().wall});
    h.run_for(milliseconds(400));
    REQUIRE(h.asked<KillRank>().size() == 1);
    h.lose(kRoles[0]);
    h.run_for(milliseconds(400));
    CHECK(h.logged<Failure>().size() == 1);
    CHECK(h.logged<KillConfirmed>().size() == 1);
    CHECK(h.failures("connection_lost").empty());
}

TEST_CASE("a control-port flood during a repair: drops counted, one incident, the job finishes") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    h.lose(kRoles[1]);
    for (int i = 0; i < 200; ++i) {  // the controller drops the flood's connections meanwhile
        h.drops[static_cast<std::size_t>(DropReason::bad_token)] += 50;
        h.drops[static_cast<std::size_t>(DropReason::too_many_pending)] += 10;
        h.advance(milliseconds(2));
        h.tick();
    }
    h.hot_spare_repaired(kRoles[1], 120);
    h.of(kRoles[1]) = h.rank(kRoles[1], 4242, 10);  // the spare took the role
    h.steps(10, 50);
    h.all_finished();
    h.ranks_exit();
    h.mpirun_exits(exited(0));
    h.tick();
    CHECK(h.logged<Failure>().size() == 1);
    CHECK(h.core->metrics().drops[static_cast<std::size_t>(DropReason::bad_token)] == 10000);
    CHECK(h.core->outcome().name == "finished");
    CHECK(h.asked<StartAttempt>().size() == 1);
}

TEST_CASE("a node lost during a warm relaunch: the relaunch failed, the next one runs without the node") {
    Harness h(plan_of(2, "", true));
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    // The relaunch registers, then PRRTE loses its daemon on fn1 before the roles are back in the loop.
    h.ranks.clear();
    for (const auto& role : kRoles) h.ranks.push_back(h.rank(role, 2000 + static_cast<int>(h.ranks.size()), 20, wire::Phase::idle));
    h.tick();
    h.feed(DaemonLost{"fn1", "lost communication with a remote daemon"});
    CHECK(h.logged<NodeLost>().at(0).node == "fn1");
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(exited(1));
    h.tick();
    const auto rel = h.logged<WarmRelaunch>();
    REQUIRE(rel.size() == 1);
    CHECK(rel[0].figures.outcome == "failed");
    CHECK_FALSE(rel[0].figures.total_ms.has_value());
    CHECK(h.failures("node_lost").at(0).classification == "node_lost");
    REQUIRE(h.asked<StartAttempt>().size() == 3);
    const Layout third = h.asked<StartAttempt>()[2].layout;
    CHECK(third.node_of_role(kRoles[0]) == "fn3");
    CHECK(h.asked<Drain>().at(0).node == "fn1");
    run_to_the_end(h, 20);
    CHECK(h.core->outcome().name == "finished");
    CHECK(h.logged<WarmRelaunch>().size() == 2);
    CHECK(h.logged<WarmRelaunch>()[1].figures.outcome == "resumed");
}

TEST_CASE("a node killed as a relaunch starts: the relaunch is stuck, then Slurm's job no longer holds the node") {
    // Issue 29's cluster soak (slurm-relaunch-node-loss): fn1 killed as the relaunch's daemons
    // started; no rank registered, nothing of the MPI job named the node. Without the startup
    // limit the job hung until scancel; without the job's node list every relaunch went back to
    // fn1 and failed the same way (restart_loop, exit 80).
    Harness h(plan_of(3, "", true));
    h.plan.cfg.detection.startup_timeout_ms = 30000;
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    h.run_for(milliseconds(30100));
    REQUIRE(h.logged<StartupStuck>().size() == 1);
    h.allocation = std::vector<std::string>{"fn2", "fn3"};  // Slurm removed fn1 from the --no-kill job
    h.mpirun_exits(signalled(SIGKILL));
    h.tick();
    CHECK(h.logged<NodeLeftAllocation>().at(0).node == "fn1");
    CHECK(h.said("node fn1 lost: Slurm removed it from the job"));
    CHECK(h.asked<Drain>().at(0).node == "fn1");
    REQUIRE(h.asked<StartAttempt>().size() == 3);
    CHECK(h.asked<StartAttempt>()[2].layout.node_of_role(kRoles[0]) == "fn3");
    run_to_the_end(h, 20);
    CHECK(h.core->outcome().name == "finished");
}

TEST_CASE("PRRTE names a healthy node as a relaunch starts: srun's check finds the dead one, the named one stays") {
    // Issue 29's cluster soak (slurm-relaunch-node-loss, 1 trial in 13): fn2 killed as the
    // relaunch's daemons started; srun ended every daemon of the launch and PRRTE named fn1's.
    // Taking PRRTE's word drained fn1, then each healthy node in turn, and the job ended
    // relaunch_budget_spent with a copy of every role's state alive.
    Harness h(plan_of(2, "", true));
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    h.unreachable = {"fn2"};
    h.feed(DaemonLost{"fn1", "lost communication with a remote daemon"});
    CHECK(h.logged<NodeLost>().empty());
    CHECK(h.logged<DaemonLostStarting>().at(0).node == "fn1");
    h.mpirun_exits(exited(250));
    h.tick();
    REQUIRE(h.checked.size() == 1);
    CHECK(h.checked[0] == std::vector<std::string>{"fn1", "fn2", "fn3"});  // every node of the launch
    REQUIRE(h.logged<NodeLost>().size() == 1);
    CHECK(h.logged<NodeLost>()[0].node == "fn2");
    CHECK(h.logged<DaemonLossUnconfirmed>().at(0).node == "fn1");
    CHECK(h.said("node fn2 lost: srun could not start a process there"));
    REQUIRE(h.asked<Drain>().size() == 1);
    CHECK(h.asked<Drain>()[0].node == "fn2");
    REQUIRE(h.asked<StartAttempt>().size() == 3);
    const Layout third = h.asked<StartAttempt>()[2].layout;
    CHECK(third.node_of_role(kRoles[0]) == "fn1");  // dp0, dp1 stay; dp2, dp3 leave fn2
    CHECK(third.node_of_role(kRoles[2]) == "fn3");
    h.unreachable.clear();
    run_to_the_end(h, 20);
    CHECK(h.core->outcome().name == "finished");
}

TEST_CASE("PRRTE losing a daemon once the roles registered is taken at its word, unchecked") {
    Harness h(plan_of(2, "", true));
    h.start();
    h.register_all();
    h.feed(DaemonLost{"fn1", "lost communication with a remote daemon"});
    CHECK(h.logged<NodeLost>().at(0).node == "fn1");
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(exited(0));
    h.tick();
    CHECK(h.checked.empty());
    CHECK(h.asked<Drain>().at(0).node == "fn1");
}

TEST_CASE("PRRTE losing a daemon as a relaunch starts, and no srun check possible: PRRTE's word stands") {
    Harness h(plan_of(2, "", true));
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    h.check_runs = false;
    h.feed(DaemonLost{"fn1", "lost communication with a remote daemon"});
    h.mpirun_exits(exited(250));
    h.tick();
    REQUIRE(h.logged<NodeLost>().size() == 1);
    CHECK(h.logged<NodeLost>()[0].node == "fn1");
    CHECK(h.said("not checked with srun"));
    CHECK(h.asked<Drain>().at(0).node == "fn1");
}

TEST_CASE("a relaunch none of whose ranks connected did not run, whatever mpirun's exit status") {
    // mpirun exited 0 after PRRTE lost a daemon while starting the relaunch (issue 29's cluster
    // soak): that was judged "finished" by mpirun's exit code, at step 79 of 400.
    Harness h(plan_of(2));
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    h.mpirun_exits(exited(0));
    h.tick();
    CHECK(h.core->outcome().name != "finished");
    CHECK(h.failures("job_ended_early").size() == 2);  // the kill in step 20, and this
    REQUIRE(h.asked<StartAttempt>().size() == 3);
    run_to_the_end(h, 20);
    CHECK(h.core->outcome().name == "finished");
}

TEST_CASE("SIGTERM during a repair: mpirun gets SIGTERM, the lost rank is no failure, the relaunch record says failed") {
    Harness h(plan_of());
    h.start();
    die_at(h, 20, signalled(SIGKILL));  // a warm relaunch under way...
    h.register_all(20);
    h.lose(kRoles[2]);                  // ... and an in-job repair in it
    h.feed(SignalReceived{SIGTERM});
    CHECK(h.core->phase() == JobPhase::stopping);
    CHECK(h.logged<Interrupted>().size() == 1);
    REQUIRE_FALSE(h.asked<SignalJob>().empty());
    CHECK(h.asked<SignalJob>().back().signo == SIGTERM);
    h.run_for(milliseconds(500));
    const std::size_t failures = h.logged<Failure>().size();
    CHECK(failures == 1);  // the first death only
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(signalled(SIGTERM));
    h.tick();
    CHECK(h.core->outcome().name == "interrupted");
    CHECK(h.core->outcome().exit_code == 128 + SIGTERM);
    CHECK(h.logged<WarmRelaunch>().at(0).figures.outcome == "failed");
    CHECK(h.asked<StartAttempt>().size() == 2);
}

TEST_CASE("SIGTERM ignored by the job: killed after the grace; a second signal kills at once") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.feed(SignalReceived{SIGINT});
    h.run_for(milliseconds(5100));
    CHECK(h.said("did not stop within"));
    CHECK(h.asked<SignalJob>().back().signo == SIGKILL);

    Harness g(plan_of());
    g.start();
    g.register_all();
    g.feed(SignalReceived{SIGTERM});
    g.feed(SignalReceived{SIGTERM});
    CHECK(g.said("second signal"));
    CHECK(g.asked<SignalJob>().back().signo == SIGKILL);
    g.feed(SignalReceived{SIGUSR1});
    CHECK(g.logged<SignalIgnored>().at(0).action == "ignored");
}

TEST_CASE("the spawn trap: PRRTE losing its daemon on the spare node during a repair is not a node loss") {
    Harness h(plan_of(2, "", true));
    h.start();
    h.register_all();
    h.steps(0, 10);
    h.lose(kRoles[0]);  // a repair is under way: it spawns onto fn3
    h.feed(DaemonLost{"fn3", "lost communication with a remote daemon"});
    CHECK(h.logged<SpawnDaemonLost>().size() == 1);
    CHECK(h.logged<NodeLost>().empty());
}

TEST_CASE("no spare node left, checkpoint-and-requeue: a relaunch only writes a checkpoint, then the job is requeued") {
    LaunchPlan plan = plan_of(2, "/ckpt", true, 0);
    plan.cfg.slurm.when_spares_exhausted = "checkpoint-and-requeue";
    Harness h(std::move(plan));
    h.checkpoint = 30;
    h.start();
    h.register_all();
    h.steps(0, 30);
    h.feed(DaemonLost{"fn2", "lost communication with a remote daemon"});
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(exited(1));
    h.tick();
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    CHECK(h.asked<StartAttempt>()[1].launch.checkpoint_and_exit);
    CHECK(h.core->attempt().kind == "checkpoint_for_requeue");
    CHECK(h.said("no spare node left for fn2"));
    // The checkpoint-only attempt ends (it does not finish the job's steps).
    die_at(h, 30, exited(0));
    CHECK(h.logged<CheckpointForRequeue>().at(0).step == 30);
    CHECK(h.core->outcome().name == "requeued");
    CHECK(h.core->outcome().exit_code == kExitRequeued);
    REQUIRE(h.asked<Finish>().size() == 1);
    CHECK(h.asked<Finish>()[0].requeue_from == 30);
}

// ------------------------------------------------------------------------------------------
// restarts that cannot loop (issue 29 item 3)

namespace {
const std::string kLate =
    "flashrec::UsageError: protect: buffer 'late' was registered after the step loop started";

// The summary's lines for people.
std::vector<std::string> summary_lines(Harness& h) {
    std::vector<std::string> lines;
    h.effects = h.core->summary(h.now());
    for (const auto& e : h.effects)
        if (const auto* s = std::get_if<Say>(&e)) lines.push_back(s->line);
    return lines;
}
bool any_has(const std::vector<std::string>& lines, const std::string& text) {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
}
}  // namespace

TEST_CASE("restarts: a deterministic error (ending_job 78) ends the job at once, never relaunched") {
    Harness h(plan_of(2, "/ckpt"));
    h.checkpoint = 1;  // even with a checkpoint to restart from
    h.start();
    h.register_all();
    h.steps(0, 2);
    h.feed(records::EndingJob{flashrec::ft::kExitDeterministicError, h.of(kRoles[1]).pid, kLate, {}});
    // mpirun is ended now: no in-job recovery hands the role to a spare that fails the same way.
    REQUIRE_FALSE(h.asked<SignalJob>().empty());
    CHECK(h.asked<SignalJob>().back().signo == SIGKILL);
    CHECK(h.core->phase() == JobPhase::ending);
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(signalled(SIGKILL));
    h.tick();
    CHECK(h.asked<StartAttempt>().size() == 1);
    CHECK(h.logged<WarmRelaunch>().empty());
    CHECK(h.logged<ColdRestart>().empty());
    CHECK(h.core->outcome().name == "deterministic_error");
    CHECK(h.core->outcome().exit_code == kExitDeterministic);
    CHECK(h.core->outcome().exit_code == 78);
    CHECK(h.core->outcome().message.find("dp1.tp0.pp0") != std::string::npos);
    CHECK(h.core->outcome().message.find(kLate) != std::string::npos);
    const auto job = h.failures("exit_code");
    REQUIRE_FALSE(job.empty());
    CHECK(job.back().classification == "deterministic_error");
    CHECK(job.back().action == "stop");
    const auto lines = summary_lines(h);
    CHECK(h.logged<JobEnd>().at(0).outcome == "deterministic_error");
    CHECK(h.logged<JobEnd>().at(0).exit_code == 78);
    CHECK_FALSE(any_has(lines, "recovered"));
}

TEST_CASE("a restore that refuses another platform (ending_job 81) ends the job at once, never relaunched") {
    Harness h(plan_of(2, "/ckpt"));
    h.checkpoint = 1;
    h.start();
    h.register_all();
    h.steps(0, 2);
    const std::string why = "dp1.tp0.pp0: the state restored was written on another platform (cpu_flags)";
    h.feed(records::EndingJob{flashrec::ft::kExitPlatformMismatch, h.of(kRoles[1]).pid, why, {}});
    REQUIRE_FALSE(h.asked<SignalJob>().empty());
    CHECK(h.core->phase() == JobPhase::ending);
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(signalled(SIGKILL));
    h.tick();
    CHECK(h.asked<StartAttempt>().size() == 1);
    CHECK(h.logged<WarmRelaunch>().empty());
    CHECK(h.logged<ColdRestart>().empty());
    CHECK(h.core->outcome().name == "platform_mismatch");
    CHECK(h.core->outcome().exit_code == 81);
    CHECK(h.core->outcome().message.find("cpu_flags") != std::string::npos);
    const auto lines = summary_lines(h);  // logs job_end
    CHECK(h.logged<JobEnd>().at(0).outcome == "platform_mismatch");
    CHECK(h.logged<JobEnd>().at(0).exit_code == 81);
    CHECK_FALSE(any_has(lines, "recovered"));
}

TEST_CASE("restarts: the same failure at the same step after a warm relaunch ends the job (80), replayed steps are no progress") {
    Harness h(plan_of(5));
    h.start();
    die_at(h, 20, signalled(SIGKILL));  // job_lost in step 20
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    // The relaunch restores step 17 and replays up to where the job was: nothing new.
    h.register_all(17);
    h.steps(17, 20);
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(signalled(SIGKILL));
    h.tick();
    CHECK(h.asked<StartAttempt>().size() == 2);  // budget left (5), but no second relaunch
    const auto loop = h.logged<RestartLoop>();
    REQUIRE(loop.size() == 1);
    CHECK(loop[0].same_as == 1);
    CHECK(loop[0].incident == 2);
    CHECK(loop[0].classification == "job_lost");
    CHECK(loop[0].step == 20);
    CHECK(loop[0].newest_step == 19);
    CHECK(loop[0].restart == "warm_relaunch");
    CHECK(h.core->outcome().name == "restart_loop");
    CHECK(h.core->outcome().exit_code == kExitRestartLoop);
    CHECK(h.core->outcome().message.find("job_lost at step 20") != std::string::npos);
}

TEST_CASE("restarts: a relaunch that lost its own ranks before any new step is no loop (mpirun ended otherwise)") {
    // Issue 29's soak (relaunch-node-loss): mpirun SIGKILLed from outside in step 20, then the
    // relaunch's ranks of one node killed before it made a step: mpirun exits 1. Not the same
    // failure: a second relaunch starts (it was "restart loop", exit 80, with every copy alive).
    Harness h(plan_of(5));
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    h.register_all(20);
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(exited(1));
    h.tick();
    CHECK(h.logged<RestartLoop>().empty());
    CHECK(h.asked<StartAttempt>().size() == 3);
    // The same ending again without progress is the loop.
    h.register_all(20);
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(exited(1));
    h.tick();
    REQUIRE(h.logged<RestartLoop>().size() == 1);
    CHECK(h.logged<RestartLoop>()[0].same_as == 2);
    CHECK(h.core->outcome().exit_code == kExitRestartLoop);
}

TEST_CASE("restarts: killed in the loop, then a relaunch that lost ranks before its first step, SIGKILL both times: no loop") {
    // The soak (seed 402, relaunch-node-loss): mpirun SIGKILLed from outside in step 368, then the
    // relaunch lost node0's two ranks before a new step and the launcher ended its lingering
    // mpirun: SIGKILL again, the same step, job_lost. Not the same failure: the first attempt lost
    // no rank and died in its loop. It was "restart loop" (exit 80) with every copy alive.
    Harness h(plan_of(5));
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    h.register_all(20);
    die_losing(h, {kRoles[0], kRoles[1]}, signalled(SIGKILL));
    CHECK(h.logged<RestartLoop>().empty());
    REQUIRE(h.asked<StartAttempt>().size() == 3);
    // The same ending of the next relaunch, again before its first step, is the loop.
    h.register_all(20);
    die_losing(h, {kRoles[0], kRoles[1]}, signalled(SIGKILL));
    REQUIRE(h.logged<RestartLoop>().size() == 1);
    CHECK(h.core->outcome().exit_code == kExitRestartLoop);
}

TEST_CASE("restarts: a job killed in its loop, then a relaunch killed before its first step, the same roles lost: no loop") {
    // The soak (seed 402, trial 190): every process killed at once in step 179 (the launcher saw
    // dp0 and dp1 go before mpirun), then node0's ranks (dp0, dp1) killed as the relaunch started.
    Harness h(plan_of(5));
    h.start();
    h.register_all();
    h.steps(0, 20);
    die_losing(h, {kRoles[0], kRoles[1]}, signalled(SIGKILL));
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    h.register_all(20);
    die_losing(h, {kRoles[0], kRoles[1]}, signalled(SIGKILL));
    CHECK(h.logged<RestartLoop>().empty());
    CHECK(h.asked<StartAttempt>().size() == 3);
}

TEST_CASE("restarts: a relaunch that makes no new step resets nothing; one that does clears the failures seen") {
    // No progress: the relaunch dies before any step. That is not the death in the loop that
    // caused it (a node killed as the relaunch starts, the soak), but the same death of the next
    // relaunch, again before any step, is the loop.
    Harness none(plan_of(5));
    none.start();
    die_at(none, 20, signalled(SIGKILL));
    for (int relaunch = 1; relaunch <= 2; ++relaunch) {
        none.register_all(20);  // back, but no step
        none.ranks_exit(RankStatus::lost);
        none.mpirun_exits(signalled(SIGKILL));
        none.tick();
    }
    CHECK(none.core->outcome().exit_code == kExitRestartLoop);
    CHECK(none.asked<StartAttempt>().size() == 3);
    CHECK(none.logged<RestartLoop>().at(0).same_as == 2);

    // Progress: step 20 completes after the relaunch; the same kind of death (in step 25) is new.
    Harness some(plan_of(5));
    some.start();
    die_at(some, 20, signalled(SIGKILL));
    some.register_all(20);
    some.steps(20, 25);
    some.ranks_exit(RankStatus::lost);
    some.mpirun_exits(signalled(SIGKILL));
    some.tick();
    CHECK(some.logged<RestartLoop>().empty());
    REQUIRE(some.asked<StartAttempt>().size() == 3);
    // ... and that one repeated without progress is the loop, counted from there.
    some.register_all(24);
    some.steps(24, 25);
    some.ranks_exit(RankStatus::lost);
    some.mpirun_exits(signalled(SIGKILL));
    some.tick();
    REQUIRE(some.logged<RestartLoop>().size() == 1);
    CHECK(some.logged<RestartLoop>()[0].step == 25);
    CHECK(some.logged<RestartLoop>()[0].same_as == 2);
    CHECK(some.core->outcome().exit_code == kExitRestartLoop);
}

TEST_CASE("restarts: escalation is no loop: state lost (76) twice at one step goes warm, then HDF5") {
    Harness h(plan_of(2, "/ckpt"));
    h.checkpoint = 10;
    h.start();
    h.register_all();
    h.steps(0, 20);
    ends_with(h, flashrec::ft::kExitStateLost, kRoles[0], "state lost");
    REQUIRE(h.core->attempt().kind == "warm_relaunch");
    h.register_all(20);  // the relaunch found nothing either
    ends_with(h, flashrec::ft::kExitStateLost, kRoles[0], "state lost");
    CHECK(h.logged<RestartLoop>().empty());
    CHECK(h.core->attempt().kind == "cold_restart");
}

TEST_CASE("restarts: no summary says recovered for a relaunch that failed") {
    Harness h(plan_of(1));
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    REQUIRE(h.asked<StartAttempt>().size() == 2);
    // The relaunch registers, then dies before every role was back in its loop.
    h.ranks.clear();
    for (const auto& role : kRoles) h.ranks.push_back(h.rank(role, 2000 + static_cast<int>(h.ranks.size()), 20, wire::Phase::idle));
    h.tick();
    h.feed(records::Step{20, 1.0});  // a new step (progress): not the restart loop ...
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(exited(1));
    h.tick();
    CHECK(h.core->outcome().exit_code == kExitNeedsRelaunch);  // ... the budget (1) ends it
    REQUIRE(h.logged<WarmRelaunch>().size() == 1);
    CHECK(h.logged<WarmRelaunch>()[0].figures.outcome == "failed");
    const auto lines = summary_lines(h);
    const auto incidents = h.logged<JobEnd>().at(0).incidents;
    REQUIRE(incidents.size() == 2);
    CHECK(incidents[0].recovered_by == "");
    CHECK(incidents[1].recovered_by == "");
    CHECK(any_has(lines, "warm relaunch 1 failed"));
    CHECK_FALSE(any_has(lines, "recovered"));
}

TEST_CASE("restarts: a relaunch that completed is what recovered its incident, and only then") {
    Harness h(plan_of());
    h.start();
    die_at(h, 20, signalled(SIGKILL));
    run_to_the_end(h, 20);
    CHECK(h.logged<WarmRelaunch>().at(0).figures.outcome == "resumed");
    summary_lines(h);
    CHECK(h.logged<JobEnd>().at(0).incidents[0].recovered_by == "warm relaunch 1");
}

TEST_CASE("summary: protection.every auto's last choice, and the failure cost in ms from job_stats and the repairs") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 10);
    records::ProtectionInterval choice{32, 8, 4, 10.0, 12.0, 2.0, 0.025, 0.03, 16, "the smallest k within the budget"};
    h.feed(choice);
    h.hot_spare_repaired(kRoles[1], 212);
    h.steps(10, 50);
    records::JobStats s;
    s.role = kRoles[0];
    s.steps = 50;
    s.median_step_ms = 10;
    s.protection = true;
    s.protection_every = 8;
    s.protection_auto = true;
    s.protected_step_ms = 12;
    s.unprotected_step_ms = 10;
    h.finish_with(s);
    CHECK(h.said("protection      every 8 steps (protection.every = auto: 1 change(s), the last at step 32: the "
                 "smallest k within the budget)"));
    // (8 - 1) / 2 = 3.5 steps x 10 ms + the mean in-job repair's 212 ms; worst 7 steps.
    CHECK(h.said("failure cost    3.5 steps replayed x 10.000 ms + restore 212.0 ms = 247.0 ms expected per failure "
                 "(worst 7 steps: 282.0 ms)"));
    // A snapshot exposes 12 - 10 = 2 ms: 0.25 ms/step at k = 8 against 2 at k = 1.
    CHECK(h.said("protection 0.250 ms/step at k = 8 against 2.000 ms/step at k = 1: saves 1.750 ms/step"));
    const auto cost = h.logged<ExpectedFailureCost>();
    REQUIRE(cost.size() == 1);
    CHECK(cost[0].protection_every == 8);
    CHECK(cost[0].protection_auto == true);
    CHECK(cost[0].interval_changes == 1);
    CHECK(cost[0].estimate.expected_ms == doctest::Approx(247));
    CHECK(cost[0].estimate.restore_ms.value_or(-1) == doctest::Approx(212));
}

TEST_CASE("summary: at k = 1 the step without a snapshot is not measured, and the summary says so") {
    Harness h(plan_of());
    h.start();
    h.register_all();
    h.steps(0, 50);
    records::JobStats s;
    s.role = kRoles[0];
    s.steps = 50;
    s.median_step_ms = 10;
    s.protection = true;
    s.protection_every = 1;
    h.finish_with(s);
    CHECK(h.said("protection      every step"));
    CHECK(h.said("failure cost    0.0 steps replayed x 10.000 ms + restore (not measured: no in-job repair)"));
    CHECK(h.said("the step without a snapshot was not measured"));
}

// ------------------------------------------------------------------------------------------
// issue 48: the decisions that were the shell's, the requeue's outcome, the phase table, the
// order of effects

namespace {
// The first attempt starts, its ranks register and make `steps` steps.
void start_and_run(Harness& h, std::int64_t steps) {
    h.start();
    h.register_all();
    h.steps(0, steps);
}
}  // namespace

TEST_CASE("moved decision: a silent rank is killed at once, as the core decides") {
    Harness h(plan_of());
    start_and_run(h, 10);
    h.feed(HangReported{h.incident(kRoles[1], IncidentReason::no_heartbeat)});
    REQUIRE(h.asked<KillRank>().size() == 1);
    CHECK(h.asked<KillRank>()[0].incident.role == kRoles[1]);
    // The harness answers the kill as the shell does: a RankHung with its outcome.
    REQUIRE(h.failures("hang_no_heartbeat").size() == 1);
    CHECK(h.failures("hang_no_heartbeat")[0].classification == "process_hang");
    CHECK(h.logged<HangKill>().at(0).result == "killed");
}

TEST_CASE("moved decision: a stalled rank reported by the control plane is confirmed before the kill") {
    Harness h(plan_of());
    start_and_run(h, 10);
    h.of(kRoles[2]).hung = true;
    h.feed(HangReported{h.incident(kRoles[2], IncidentReason::stalled)});
    CHECK(h.asked<KillRank>().empty());
    h.run_for(milliseconds(400));
    REQUIRE(h.asked<KillRank>().size() == 1);
    CHECK(h.failures("hang_stalled").size() == 1);
}

TEST_CASE("moved decision: a superseded rank alive in this launcher's tree is killed and counted as a hang") {
    Harness h(plan_of());
    start_and_run(h, 10);
    h.feed(RankSuperseded{h.incident(kRoles[1], IncidentReason::superseded), true});
    REQUIRE(h.asked<KillRank>().size() == 1);
    CHECK(h.asked<KillRank>()[0].incident.reason == IncidentReason::superseded);
    CHECK(h.failures("hang_no_heartbeat").size() == 1);
    CHECK(h.failures("connection_lost").empty());
}

TEST_CASE("moved decision: a superseded rank already gone (or elsewhere) is a loss, not a hang") {
    Harness h(plan_of());
    start_and_run(h, 10);
    h.of(kRoles[1]).status = RankStatus::lost;
    h.dead.insert(h.of(kRoles[1]).pid);
    h.feed(RankSuperseded{h.incident(kRoles[1], IncidentReason::superseded), false});
    CHECK(h.asked<KillRank>().empty());
    h.run_for(milliseconds(400));
    CHECK(h.failures("hang_no_heartbeat").empty());
    REQUIRE(h.failures("connection_lost").size() == 1);
    CHECK(h.failures("connection_lost")[0].role == kRoles[1]);
}

namespace {
// No spare node left under checkpoint-and-requeue: the checkpoint-only relaunch wrote step 30.
Harness requeue_job() {
    LaunchPlan plan = plan_of(2, "/ckpt", true, 0);
    plan.cfg.slurm.when_spares_exhausted = "checkpoint-and-requeue";
    return Harness(std::move(plan));
}
void end_for_requeue(Harness& h) {
    h.checkpoint = 30;
    start_and_run(h, 30);
    h.feed(DaemonLost{"fn2", "lost communication with a remote daemon"});
    h.ranks_exit(RankStatus::lost);
    h.mpirun_exits(exited(1));
    h.tick();
    die_at(h, 30, exited(0));
    REQUIRE(h.asked<Finish>().size() == 1);
    REQUIRE(h.asked<Finish>()[0].requeue_from == 30);
}
}  // namespace

TEST_CASE("requeue outcome: Slurm refuses the requeue; job_end and the exit code both say 77 (issue 46 item 2)") {
    Harness h = requeue_job();
    end_for_requeue(h);
    h.feed(RequeueDone{"scontrol: error: Requeue of job 42 is not allowed"});
    h.effects = h.core->summary(h.now());
    const auto end = h.logged<JobEnd>();
    REQUIRE(end.size() == 1);
    CHECK(end[0].outcome == "spares_exhausted");
    CHECK(end[0].exit_code == kExitNoSpares);
    // What the shell exits with (supervise() returns the core's outcome code).
    CHECK(h.core->outcome().exit_code == kExitNoSpares);
    CHECK(end[0].message.find("Slurm refused the requeue") != std::string::npos);
}

TEST_CASE("requeue outcome: Slurm requeues the job; job_end and the exit code both say 79") {
    Harness h = requeue_job();
    end_for_requeue(h);
    h.feed(RequeueDone{});
    h.effects = h.core->summary(h.now());
    const auto end = h.logged<JobEnd>();
    REQUIRE(end.size() == 1);
    CHECK(end[0].outcome == "requeued");
    CHECK(end[0].exit_code == kExitRequeued);
    CHECK(h.core->outcome().exit_code == kExitRequeued);
}

TEST_CASE("phase table: the moves it holds, and no other") {
    using P = JobPhase;
    const P all[] = {P::running, P::ending, P::stopping, P::awaiting_final_records, P::tearing_down, P::done};
    int allowed = 0;
    for (const P from : all)
        for (const P to : all) {
            allowed += phase_move_allowed(from, to);
            if (phase_move_allowed(from, to)) CHECK_NOTHROW(check_phase_move(from, to));
            else CHECK_THROWS_AS(check_phase_move(from, to), IllegalPhaseMove);
        }
    CHECK(allowed == 6 + 9);  // staying put, and the nine moves of the table
    CHECK(phase_move_allowed(P::tearing_down, P::running));
    CHECK_FALSE(phase_move_allowed(P::done, P::running));
    CHECK_FALSE(phase_move_allowed(P::awaiting_final_records, P::running));
    CHECK_FALSE(phase_move_allowed(P::stopping, P::ending));
}

TEST_CASE("phase table: an illegal move is a programming error the core refuses (starting a job that is over)") {
    Harness h(plan_of());
    h.start();
    run_to_the_end(h, 0);
    REQUIRE(h.core->phase() == JobPhase::done);
    CHECK_THROWS_AS(h.core->start(false), IllegalPhaseMove);
    CHECK(h.core->phase() == JobPhase::done);
}

TEST_CASE("effect order: first in, first out; a result's effects queue behind those waiting") {
    EffectQueue q;
    RankIncident incident;
    incident.role = "dp0.tp0.pp0";
    q.push({Say{"a"}, KillRank{incident, std::nullopt}, Say{"b"}});
    std::vector<std::string> done;
    while (auto e = q.pop()) {
        if (const auto* s = std::get_if<Say>(&*e)) done.push_back(s->line);
        if (std::holds_alternative<KillRank>(*e)) {
            done.push_back("kill");
            q.push({Say{"after the kill"}});  // what the core answered to the kill's result
        }
    }
    CHECK(done == std::vector<std::string>{"a", "kill", "b", "after the kill"});
    CHECK(q.empty());
}

TEST_CASE("effect order: an attempt's or the job's boundary comes last, or the list is refused") {
    EffectQueue q;
    CHECK_THROWS_AS(q.push({StartAttempt{}, Say{"late"}}), EffectOrderError);
    CHECK_THROWS_AS(q.push({TeardownAttempt{}, LogRecord{Interrupted{SIGINT}}}), EffectOrderError);
    CHECK_THROWS_AS(q.push({Finish{}, Finish{}}), EffectOrderError);
    CHECK(q.empty());
    CHECK_NOTHROW(q.push({Say{"x"}, TeardownAttempt{}}));
    CHECK_NOTHROW(q.push({LogRecord{Interrupted{SIGINT}}, Finish{}}));
}

TEST_CASE("effect order: a job death carried out through the queue, as the shell does, without re-entry") {
    // The shell's loop over the real queue: an effect's result goes to the core, its effects queue.
    Harness h(plan_of());
    start_and_run(h, 10);
    h.ranks_exit(RankStatus::lost);
    EffectQueue q;
    std::vector<std::string> carried;
    auto feed = [&](const Input& input) { q.push(h.core->on(input, h.now())); };
    feed(MpirunExited{exited(1)});
    feed(Tick{h.ranks, {}, 0, {}});
    while (auto e = q.pop()) {
        if (const auto* r = std::get_if<LogRecord>(&*e)) carried.push_back(std::string(event_of(r->record)));
        if (std::holds_alternative<TeardownAttempt>(*e)) {
            carried.push_back("TeardownAttempt");
            TeardownDone done;
            done.no_checkpoint_why = "no checkpoint in the test";
            feed(done);
        }
        if (const auto* start = std::get_if<StartAttempt>(&*e)) {
            carried.push_back("StartAttempt");
            feed(AttemptStarted{902, {"fr-mpirun"}, h.now().steady});
            CHECK(start->launch.relaunch);
        }
    }
    const auto at = [&](const std::string& name) {
        return std::find(carried.begin(), carried.end(), name) - carried.begin();
    };
    REQUIRE(at("launch") < static_cast<long>(carried.size()));
    CHECK(at("mpirun_exited") < at("TeardownAttempt"));
    CHECK(at("TeardownAttempt") < at("failure"));
    CHECK(at("failure") < at("StartAttempt"));
    CHECK(at("StartAttempt") < at("launch"));
    CHECK(h.core->attempt().index == 2);
}

// The records' JSON is written from their field tables (launcher_records.cpp): exactly the
// table's fields, an optional one only when set, a nullable one as null, nested parts as objects.
TEST_CASE("records: a record's JSON holds its table's fields and no other") {
    const auto keys = [](const json& j) {
        std::vector<std::string> out;
        for (const auto& [k, v] : j.items()) out.push_back(k);
        return out;
    };
    AttemptJudged judged;
    judged.attempt = 2;
    judged.pid = 77;
    judged.status = "exit code 1";
    CHECK(keys(judged.to_json()) == std::vector<std::string>{"attempt", "pid", "roles_finished", "status"});
    judged.exit_code = 1;
    CHECK(judged.to_json() ==
          json{{"attempt", 2}, {"pid", 77}, {"status", "exit code 1"}, {"roles_finished", false}, {"exit_code", 1}});

    HangKill hang{3, "dp1.tp0.pp0", 12, "n1", "killed", "SIGKILL", 1500, std::nullopt};
    CHECK(hang.to_json().at("since_injection_ms").is_null());  // nullable: always there

    RestartFigures fig;
    fig.tier = 2;
    fig.reason = {4, "job_lost", "mpirun exited 1"};
    fig.outcome = "resumed";
    fig.phases_ms.detect = 1.5;
    fig.phases_ms.teardown = 2.5;
    const json warm = WarmRelaunch{1, 2, fig}.to_json();
    // The shared figures sit beside the relaunch's own fields, not under a key of their own.
    CHECK(keys(warm) == std::vector<std::string>{"attempt", "died_unix_ms", "of", "outcome", "phases_ms", "reason",
                                                 "relaunch", "steps_done_before", "tier"});
    CHECK(warm.at("reason") == json{{"incident", 4}, {"classification", "job_lost"}, {"detail", "mpirun exited 1"}});
    CHECK(warm.at("phases_ms") == json{{"detect", 1.5}, {"teardown", 2.5}});
    CHECK_FALSE(ColdRestart{1, fig}.to_json().contains("of"));

    NewLayout layout;
    layout.replaced = {{"fn1", "fn3"}};
    const json relayout = layout.to_json();
    CHECK(relayout.at("policy").is_null());
    CHECK(relayout.at("replaced") == json::array({{{"node", "fn1"}, {"spare_node", "fn3"}}}));
    CHECK(event_of(CoreRecord(layout)) == "relayout");
}
