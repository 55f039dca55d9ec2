// The running side of flashrec-launch: the imperative shell around the job's functional core
// (job_core.hpp). It sets up the control plane, the event log and the signals, runs mpirun, and
// loops: what it sees becomes inputs of the core, the core's effects are carried out in one
// place (execute). docs/launcher.md describes what it does and writes.
#pragma once
#include <string>

#include "exit_codes.hpp"
#include "launch_plan.hpp"

namespace flashrec::launcher {

struct SupervisorOptions {
    bool resume = false;                    // --resume
    std::string metrics_bind = "127.0.0.1";  // --metrics-bind
};

// Runs the job to its end; returns flashrec-launch's exit code.
int supervise(const LaunchPlan& plan, const SupervisorOptions& options);

}  // namespace flashrec::launcher
