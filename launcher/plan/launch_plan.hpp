// Making the launch plan (core/launch_layout.hpp holds its plain types): reading and validating
// train.yaml, the Slurm allocation, the newest HDF5 checkpoint, the wrapper's mpirun flags and the
// dry run. Everything here may read files, the environment or run a process.
#pragma once
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "flashrec/runtime/config.hpp"
#include "launch_layout.hpp"

namespace flashrec::launcher {

struct PlanRequest {
    std::string config_path;
    std::vector<std::string> faults;
    std::string events;  // --events
};

// The step of the newest complete HDF5 checkpoint in checkpoint.dir; nullopt with `why` filled
// when there is none or it cannot be read. Never throws.
std::optional<std::int64_t> newest_checkpoint(const config::Config& cfg, std::string& why);

// Loads and validates everything, and reads the Slurm allocation when there is one; throws
// flashrec::ConfigError ("file:line: field problem") or slurm::SlurmError (too few nodes, ...).
LaunchPlan make_launch_plan(const PlanRequest& request);

// The NCCL version this flashrec was built against ("2.32.3"; "" without CUDA): --dry-run and the
// job's first record name it.
const char* built_nccl_version();

// Where the Open MPI of this launcher lives (OPAL_PREFIX for direct launch's tasks):
// FLASHREC_MPI_PREFIX, else the prefix of the libmpi this process runs; "" when neither is known.
std::string mpi_prefix();

// The mpirun wrapper: $FLASHREC_MPIRUN, else fr-mpirun beside this executable (an installed
// launcher), else the source tree's tools/fr-mpirun this build was configured with.
std::string mpirun_wrapper();
// The flags the wrapper gives mpirun, found by running it against a stand-in mpirun that prints
// its arguments (so they are read from the wrapper, never copied). nullopt + why if it failed.
// `variables` are set for the wrapper on top of this process's environment (the transport's).
std::optional<std::vector<std::string>> wrapper_flags(
    const std::string& wrapper, std::string& why,
    const std::vector<std::pair<std::string, std::string>>& variables = {});

// The dry run's protection lines (pure, tests/launcher/test_launch_plan.cpp): how often it
// snapshots; the expected failure cost per k in steps and snapshot times (neither is known
// before the job runs); the start-up replay probe ("" where it does not run).
std::string interval_text(const config::Protection& p);
std::string failure_cost_estimate(const config::Protection& p);
std::string replay_check_text(const config::Protection& p);

// The dry-run report: layout, the exact command, the environment, the mpirun flags.
void print_dry_run(const LaunchPlan& plan, bool resume, std::ostream& out);

std::string local_hostname();
// The local IPv4 address this machine uses to reach `host` (the route's source), or "".
std::string address_towards(const std::string& host);

}  // namespace flashrec::launcher
