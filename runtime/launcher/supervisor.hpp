// The running side of flashrec-launch: the control plane, the MPI job as a child process, the
// progress view, failure classification, hang kills, warm relaunches (tier 2), HDF5 restarts
// (tier 3), the event log and the summary. docs/launcher.md describes what it does and writes.
#pragma once
#include <string>

#include "launch_plan.hpp"

namespace flashrec::launcher {

// flashrec-launch's exit codes (docs/launcher.md, "Exit codes").
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;        // the job failed and no tier could bring it back
inline constexpr int kExitUsage = 2;         // bad command line or train.yaml
inline constexpr int kExitNeedsRelaunch = 75;  // tier 2 was needed but the relaunch budget is spent
inline constexpr int kExitStateLost = 76;    // tier 3 was needed and there is no checkpoint to use
inline constexpr int kExitNoSpares = 77;     // spares exhausted and there is no checkpoint to use
inline constexpr int kExitRequeued = 79;     // spares exhausted: checkpoint written, Slurm job requeued

struct SupervisorOptions {
    bool resume = false;                    // --resume
    std::string metrics_bind = "127.0.0.1";  // --metrics-bind
};

// Runs the job to its end; returns flashrec-launch's exit code.
int supervise(const Plan& plan, const SupervisorOptions& options);

}  // namespace flashrec::launcher
