// The launcher's restart policy alone (restart_policy.hpp): what a job's death counts as, and
// which restarts are tried in which order under which budgets.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <sys/wait.h>

#include "death_policy.hpp"
#include "exit_codes.hpp"

using namespace flashrec::launcher;

namespace {
int exited(int code) { return code << 8; }  // a wait status
int signalled(int sig) { return sig; }
Budgets budgets(int warm_used, int warm_allowed, bool dir = true, int cold_used = 0) {
    Budgets b;
    b.warm_used = warm_used;
    b.warm_allowed = warm_allowed;
    b.cold_used = cold_used;
    b.checkpoint_dir = dir;
    return b;
}
}  // namespace

TEST_CASE("observe_death: forced, then a lost node, then the ranks' request, then mpirun's named code") {
    DeathEvidence e;
    e.mpirun_status = exited(1);
    Death d = observe_death(e);
    CHECK(d.observation.what == Observed::job_ended_early);
    CHECK(d.detail == "mpirun ended with exit code 1");

    e.mpirun_status = exited(76);  // mpirun passing on a rank's 76
    CHECK(observe_death(e).observation.value == 76);
    e.mpirun_status = exited(3);   // a trainer's own exit code is no request
    CHECK(observe_death(e).observation.what == Observed::job_ended_early);

    e.requested_exit_code = 77;
    d = observe_death(e);
    CHECK((d.observation.what == Observed::exit_code && d.observation.value == 77));
    CHECK(d.detail == "mpirun ended with exit code 3; ranks asked for it (exit code 77)");

    e.lost_nodes = {"fn2", "fn3"};
    d = observe_death(e);
    CHECK(d.observation.what == Observed::node_lost);
    CHECK(d.detail == "node fn2, fn3 lost; mpirun ended with exit code 3");

    e.forced = Observation{Observed::job_stalled, 0};
    e.forced_detail = "no role's step tag moved";
    d = observe_death(e);
    CHECK(d.observation.what == Observed::job_stalled);
    CHECK(d.detail == "no role's step tag moved");

    DeathEvidence killed;
    killed.mpirun_status = signalled(9);
    CHECK(observe_death(killed).observation.what == Observed::job_ended_early);
}

TEST_CASE("decide: a job lost is warm-relaunched, then restarted from HDF5, then given up (75)") {
    const Observation lost{Observed::job_ended_early, 0};
    Decision d = choose_restarts(lost, budgets(0, 1), {});
    CHECK(d.rule->classification == "job_lost");
    REQUIRE(d.steps.size() == 2);
    CHECK((d.steps[0].kind == Restart::warm_relaunch && !d.steps[0].refused));
    CHECK((d.steps[1].kind == Restart::cold_restart && !d.steps[1].refused));
    CHECK(d.exit_code == kExitNeedsRelaunch);
    CHECK(d.outcome == "relaunch_budget_spent");

    d = choose_restarts(lost, budgets(1, 1, false), {});  // budget spent, no checkpoint.dir
    REQUIRE(d.steps.size() == 1);
    CHECK(d.steps[0].refused == "recovery.warm_relaunches spent");
    CHECK(d.message.find("recovery.warm_relaunches = 1") != std::string::npos);

    CHECK(d.message.find("no HDF5 checkpoint to fall back to") != std::string::npos);

    d = choose_restarts(lost, budgets(1, 1, true, 2), {});  // both budgets spent
    REQUIRE(d.steps.size() == 2);
    CHECK(d.steps[1].refused == "at most 2 HDF5 restarts per launch");
    // Not "no HDF5 checkpoint" when there was one and both restarts were used (issue 29's soak).
    CHECK(d.message.find("and so are the HDF5 restarts (at most 2 per launch)") != std::string::npos);
    CHECK(d.message.find("no HDF5 checkpoint") == std::string::npos);
}

TEST_CASE("decide: state lost in-job with every node alive tries a warm relaunch before HDF5") {
    const Observation lost{Observed::exit_code, 76};
    Decision d = choose_restarts(lost, budgets(0, 1), {});
    CHECK(d.warm_before_hdf5);
    REQUIRE(d.steps.size() == 2);
    CHECK(d.steps[0].kind == Restart::warm_relaunch);
    CHECK(d.exit_code == kExitStateLost);
    CHECK(d.outcome == "state_lost");

    // Not after a node loss, nor when this attempt was a warm relaunch that completed nothing.
    d = choose_restarts(lost, budgets(0, 1), {false, false, true});
    CHECK_FALSE(d.warm_before_hdf5);
    REQUIRE(d.steps.size() == 1);
    CHECK(d.steps[0].kind == Restart::cold_restart);
    d = choose_restarts(lost, budgets(0, 1), {true, false, false});
    CHECK_FALSE(d.warm_before_hdf5);
    d = choose_restarts(lost, budgets(0, 1), {true, true, false});  // that relaunch made progress
    CHECK(d.warm_before_hdf5);
}

TEST_CASE("decide: spares exhausted under direct launch tries a warm relaunch (a new step) before HDF5") {
    const Observation none_left{Observed::exit_code, 77};
    AttemptFacts direct;
    direct.direct_launch = true;
    Decision d = choose_restarts(none_left, budgets(0, 1), direct);
    CHECK(d.warm_before_hdf5);
    CHECK(d.warm_before_hdf5_why.find("direct launch") != std::string::npos);
    REQUIRE(d.steps.size() == 2);
    CHECK(d.steps[0].kind == Restart::warm_relaunch);
    CHECK(d.steps[1].kind == Restart::cold_restart);
    CHECK(d.outcome == "spares_exhausted");
    // A node lost does not matter (the ring replicas sit on other nodes); a relaunch that found
    // nothing does; under mpirun, 77 means spawn failed or is off: HDF5 as before.
    direct.nodes_lost = true;
    CHECK(choose_restarts(none_left, budgets(0, 1), direct).warm_before_hdf5);
    direct.warm_relaunch = true;
    CHECK_FALSE(choose_restarts(none_left, budgets(0, 1), direct).warm_before_hdf5);
    CHECK_FALSE(choose_restarts(none_left, budgets(0, 1), {}).warm_before_hdf5);
}

TEST_CASE("decide: spares exhausted goes to HDF5 only, and says so without a checkpoint.dir") {
    const Decision d = choose_restarts({Observed::exit_code, 77}, budgets(0, 1, false), {});
    CHECK(d.steps.empty());
    CHECK(d.exit_code == kExitNoSpares);
    CHECK(d.outcome == "spares_exhausted");
    CHECK(d.message.find("(checkpoint.dir is not set)") != std::string::npos);
}

TEST_CASE("decide: a configuration the trainer refused stops (exit 2), nothing is tried") {
    Decision d = choose_restarts({Observed::exit_code, 2}, budgets(0, 5), {});
    CHECK(d.steps.empty());
    CHECK(d.exit_code == kExitUsage);
    CHECK(d.outcome == "failed");
    d = choose_restarts({Observed::signal, 15}, budgets(0, 5), {});  // terminated
    CHECK(d.exit_code == kExitFailed);
}
