#include "death_policy.hpp"

#include <sys/wait.h>

#include "flashrec/ft/contract.hpp"
#include "wait_status.hpp"
#include "exit_codes.hpp"

namespace flashrec::launcher {

Death observe_death(const DeathEvidence& e) {
    Death d{{Observed::job_ended_early, 0}, "mpirun ended with " + describe_status(e.mpirun_status)};
    if (e.forced) {
        d.observation = *e.forced;
        d.detail = e.forced_detail;
    } else if (!e.lost_nodes.empty()) {
        d.observation = {Observed::node_lost, 0};
        std::string nodes;
        for (const auto& n : e.lost_nodes) nodes += (nodes.empty() ? "" : ", ") + n;
        d.detail = "node " + nodes + " lost; " + d.detail;
    } else if (e.requested_exit_code) {
        d.observation = {Observed::exit_code, e.requested_exit_code};
        d.detail += "; ranks asked for it (exit code " + std::to_string(e.requested_exit_code) + ")";
    } else if (const int code = WIFEXITED(e.mpirun_status) ? WEXITSTATUS(e.mpirun_status) : -1;
               code == ft::kExitBadConfig || code == ft::kExitForRelaunch || code == ft::kExitStateLost ||
               code == ft::kExitNoSpare || code == ft::kExitDeterministicError || code == ft::kExitPlatformMismatch) {
        d.observation = {Observed::exit_code, code};
    }
    return d;
}

namespace {

RestartStep warm(const Budgets& b) {
    if (b.warm_used >= b.warm_allowed) return {Restart::warm_relaunch, "recovery.warm_relaunches spent"};
    return {Restart::warm_relaunch, std::nullopt};
}

// No checkpoint.dir: no step at all (nothing to refuse).
void cold(const Budgets& b, std::vector<RestartStep>& steps) {
    if (!b.checkpoint_dir) return;
    if (b.cold_used >= b.cold_allowed)
        steps.push_back({Restart::cold_restart, "at most " + std::to_string(b.cold_allowed) + " HDF5 restarts per launch"});
    else
        steps.push_back({Restart::cold_restart, std::nullopt});
}

std::string no_checkpoint(const Budgets& b) {
    return b.checkpoint_dir ? std::string() : std::string(" (checkpoint.dir is not set)");
}

}  // namespace

Decision choose_restarts(const Observation& obs, const Budgets& b, const AttemptFacts& attempt) {
    Decision d;
    d.rule = &classify(obs);
    switch (d.rule->action) {
        case Action::stop:
            d.outcome = "failed";
            d.exit_code = obs.what == Observed::exit_code && obs.value == ft::kExitBadConfig ? kExitUsage : kExitFailed;
            d.message = std::string(d.rule->meaning);
            if (obs.what == Observed::exit_code && obs.value == ft::kExitDeterministicError) {
                d.outcome = "deterministic_error";
                d.exit_code = kExitDeterministic;
                d.message = "a deterministic error ended the job (not relaunched: every relaunch would fail the same way)";
            }
            if (obs.what == Observed::exit_code && obs.value == ft::kExitPlatformMismatch) {
                d.outcome = "platform_mismatch";
                d.exit_code = kExitPlatformMismatch;
                d.message = "a restore found a role's state written on another platform and "
                            "recovery.require_same_platform refused it (its platform_mismatch record names the fields)";
            }
            return d;
        case Action::hdf5_resume: {
            // Never after a warm relaunch that found nothing (issue 15, case 2).
            const bool relaunch_found_nothing = attempt.warm_relaunch && !attempt.progressed;
            if (obs.what == Observed::exit_code && obs.value == ft::kExitStateLost && !attempt.nodes_lost &&
                !relaunch_found_nothing) {
                // State lost in memory *in-job* while every node lives: the dead processes' own
                // segments are still in their nodes' /dev/shm, and a warm relaunch reads them.
                d.warm_before_hdf5 = true;
                d.warm_before_hdf5_why = "state lost in-job, but no node was lost: the dead processes' node-local "
                                         "segments may hold it";
                d.warm_restores_from = "node-local segments of dead processes";
            } else if (obs.what == Observed::exit_code && obs.value == ft::kExitNoSpare && attempt.direct_launch &&
                       !relaunch_found_nothing) {
                // No hot spare left and no MPI_Comm_spawn under srun: the survivors' snapshots and
                // ring replicas still hold every role (issue 47, item 5).
                d.warm_before_hdf5 = true;
                d.warm_before_hdf5_why = "no hot spare left under direct launch: the state is intact in the ring "
                                         "replicas, and a new step in the allocation brings hot spares again";
                d.warm_restores_from = "a new step with hot spares; ring replicas";
            }
            if (d.warm_before_hdf5) d.steps.push_back(warm(b));
            cold(b, d.steps);
            if (obs.value == ft::kExitNoSpare) {
                d.outcome = "spares_exhausted";
                d.exit_code = kExitNoSpares;
                d.message = "spares exhausted (no hot spare left, spawn failed or off) and no HDF5 checkpoint to "
                            "restart from" + no_checkpoint(b);
            } else {
                d.outcome = "state_lost";
                d.exit_code = kExitStateLost;
                d.message = "state lost in memory (tier 3 needed) and no HDF5 checkpoint to restart from" + no_checkpoint(b);
            }
            return d;
        }
        default:
            d.steps.push_back(warm(b));
            cold(b, d.steps);
            d.outcome = "relaunch_budget_spent";
            d.exit_code = kExitNeedsRelaunch;
            d.message = "the MPI job died and the warm relaunch budget (recovery.warm_relaunches = " +
                        std::to_string(b.warm_allowed) + ") is spent, " +
                        (b.checkpoint_dir && b.cold_used >= b.cold_allowed
                             ? "and so are the HDF5 restarts (at most " + std::to_string(b.cold_allowed) + " per launch)"
                             : std::string("with no HDF5 checkpoint to fall back to"));
            return d;
    }
}

}  // namespace flashrec::launcher
