// What the launcher does when the MPI job died as a whole: which observation the death counts as
// (observe_death), then which restarts to try in which order, and what to report when none is
// left (choose_restarts). Pure: no I/O, no clock, like recovery::make_plan; the core (job_core.cpp) applies it.
// docs/launcher.md, "Warm relaunch (tier 2)" and "HDF5 restart (tier 3)".
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "classification.hpp"

namespace flashrec::launcher {

// What the launcher knows when mpirun has exited and the job did not finish.
struct DeathEvidence {
    std::optional<Observation> forced;  // a job-level decision taken before mpirun exited
    std::string forced_detail;
    std::vector<std::string> lost_nodes;  // nodes PRRTE lost its daemon on, in this attempt
    int requested_exit_code = 0;          // the highest 75/76/77/78 the ranks' ending_job records asked for
    int mpirun_status = 0;                // mpirun's wait status
};

struct Death {
    Observation observation;
    std::string detail;  // one line for people and the failure record
};

// In order: a forced decision; a lost node; the ranks' requested exit code; mpirun's own exit
// code when it is one of the ranks' named codes (2, 75, 76, 77, 78); else job_ended_early.
Death observe_death(const DeathEvidence& evidence);

struct Budgets {
    int warm_used = 0, warm_allowed = 0;   // recovery.warm_relaunches
    int cold_used = 0, cold_allowed = 2;   // HDF5 restarts per launch
    bool checkpoint_dir = false;           // checkpoint.dir is set
};

// The attempt that died.
struct AttemptFacts {
    bool warm_relaunch = false;  // it was itself a warm relaunch
    bool progressed = false;     // it completed a step
    bool nodes_lost = false;     // a node was lost in it
    bool direct_launch = false;  // its ranks were tasks of an srun step (no MPI_Comm_spawn)
};

enum class Restart { warm_relaunch, cold_restart };

struct RestartStep {
    Restart kind;
    std::optional<std::string> refused;  // the budget refuses it: why (logged), not tried
};

struct Decision {
    const Rule* rule = nullptr;
    // A warm relaunch is tried before HDF5 (logged as warm_relaunch_before_hdf5, with why): 76
    // in-job with every node alive (it reads the dead processes' node-local segments), or 77
    // under direct launch (the state is intact; a new step brings hot spares again).
    bool warm_before_hdf5 = false;
    std::string warm_before_hdf5_why;
    std::string warm_restores_from;  // for the summary: "warm relaunch 1 (<this>)"
    std::vector<RestartStep> steps;  // in order; the first that starts wins
    // When none starts: the job's outcome, exit code and message.
    std::string outcome;
    int exit_code = 1;
    std::string message;
};

Decision choose_restarts(const Observation& observation, const Budgets& budgets, const AttemptFacts& attempt);

}  // namespace flashrec::launcher
