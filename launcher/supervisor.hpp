// The running side of flashrec-launch: the control plane, the MPI job as a child process, the
// progress view, failure classification, hang kills, warm relaunches (tier 2), HDF5 restarts
// (tier 3), the event log and the summary. docs/launcher.md describes what it does and writes.
#pragma once
#include <string>
#include "flashrec/ft/contract.hpp"

#include "launch_plan.hpp"

namespace flashrec::launcher {

// flashrec-launch's exit codes (docs/launcher.md, "Exit codes").
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;        // the job failed and no tier could bring it back
inline constexpr int kExitUsage = ft::kExitBadConfig;  // bad command line or train.yaml
// 75/76/77 are the ranks' own requests (ft/contract.hpp) that the launcher could not serve.
inline constexpr int kExitNeedsRelaunch = ft::kExitForRelaunch;  // tier 2 needed, relaunch budget spent
inline constexpr int kExitStateLost = ft::kExitStateLost;        // tier 3 needed, no checkpoint to use
inline constexpr int kExitNoSpares = ft::kExitNoSpare;           // spares exhausted, no checkpoint to use
inline constexpr int kExitRequeued = 79;     // spares exhausted: checkpoint written, Slurm job requeued

struct SupervisorOptions {
    bool resume = false;                    // --resume
    std::string metrics_bind = "127.0.0.1";  // --metrics-bind
};

// Runs the job to its end; returns flashrec-launch's exit code.
int supervise(const Plan& plan, const SupervisorOptions& options);

}  // namespace flashrec::launcher
