// Error classification (DeadPool Table II, adapted to flashrec's three tiers): what the launcher
// saw (a hang, a lost connection, an exit code, a signal, an MPI error class, a whole node going
// silent, the MPI job ending early) -> what it does about it. The table is data: the defaults
// live here, `flashrec-launch --classification` prints it and docs/launcher.md documents it.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace flashrec::launcher {

// ULFM's error classes (MPIX_ERR_PROC_FAILED, _PENDING, MPIX_ERR_REVOKED) as numbers: the core
// reads no MPI header. shell/mpi_error_classes.cpp checks them against Open MPI's at build time.
inline constexpr int kMpiErrProcFailed = 75;
inline constexpr int kMpiErrProcFailedPending = 76;
inline constexpr int kMpiErrRevoked = 77;

// What the launcher does.
enum class Action : std::uint8_t {
    none,              // not a failure (a clean exit)
    replace_in_place,  // in-job ULFM recovery takes over (hot spare or spawn); nothing to do here
    kill_and_replace,  // SIGKILL the process (a hang becomes fail-stop), then as replace_in_place
    replace_node,      // the node is bad: warm relaunch without it (tier 2); under Slurm, drain it
    warm_relaunch,     // the MPI job is gone: tear down, relaunch from node-local snapshots (tier 2)
    hdf5_resume,       // in-memory state is gone: relaunch with --resume from HDF5 (tier 3)
    stop,              // no point retrying (bad configuration, a trainer that refuses to start)
};
std::string_view to_string(Action action);

// What was observed. `value` carries the exit code, signal number or MPI error class.
enum class Observed : std::uint8_t {
    hang_no_heartbeat,   // a rank stopped sending heartbeats for detection.hang_timeout_ms
    hang_stalled,        // heartbeats arrive but the step tag is stuck while others moved on
    connection_lost,     // a rank's control connection closed without BYE: the process died
    node_silent_local,   // every rank of one node went silent together, and the node is this machine
    node_silent_remote,  // the same on another host: the node is unreachable
    node_lost,           // mpirun lost its daemon on a node (PRRTE then ends the whole job)
    exit_code,           // a rank's (or mpirun's) exit code, `value`
    signal,              // killed by signal `value`
    mpi_error,           // a rank reported MPI error class `value`
    job_ended_early,     // mpirun exited before every role finished its step loop
    job_stalled,         // no role made progress for the job-level stall limit
    startup_stuck,       // the attempt's active roles did not all register within the startup limit
};
std::string_view to_string(Observed observed);

struct Observation {
    Observed what = Observed::exit_code;
    int value = 0;
};

struct Rule {
    std::string_view observed;        // as printed: "exit code 75", "signal SIGBUS", ...
    std::string_view classification;  // short name written to the event log
    Action action;
    int tier;                         // 1, 2, 3; 0 when not a recovery
    std::string_view meaning;         // one line for people
};

// The rule that applies to an observation (never fails: unknown cases have a default rule).
const Rule& classify(const Observation& observation);
// Every rule, in the order of the documentation table.
std::span<const Rule> rules();
// The table as aligned text (for --classification).
std::string format_table();

}  // namespace flashrec::launcher
