// What flashrec-launch will run: the validated config, the layout of ranks on nodes, and the exact
// mpirun command line (through tools/fr-mpirun, the one place that holds mpirun's flags).
#pragma once
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "flashrec/runtime/config.hpp"

namespace flashrec::launcher {

// Where each MPI process goes, as the runtime will place it (runtime.cpp: on one machine, a job
// of several nodes runs on virtual nodes "node<k>", ranks_per_node actives each, hot spares on
// the node after them; roles by topology::assign_roles).
struct Layout {
    struct Process {
        int rank = 0;          // MPI world rank at start
        std::string node;      // node name
        std::string role;      // role key ("dp1.tp0.pp0"), or "spare:<i>"
        bool spare = false;
        int spare_index = -1;  // i of role=spare:<i> in the fault grammar
    };
    std::vector<Process> processes;
    std::vector<std::string> active_roles;  // role keys, in role order
    std::vector<std::string> nodes;         // nodes with active ranks, in order
    std::string spare_node;                 // node of the hot spares ("" if none)
    std::vector<std::string> reserve_nodes; // job.spare_nodes: empty nodes kept for replacements
    bool virtual_nodes = false;             // one machine standing in for job.nodes nodes
    std::string node_of_role(const std::string& role) const;
    int ranks_on_node(const std::string& node) const;  // active ranks
};
Layout make_layout(const config::Config& cfg, const std::string& local_host);

// The flavour of one start of the MPI job.
struct LaunchKind {
    bool relaunch = false;  // tier 2: FLASHREC_RELAUNCH=1, restore from node-local snapshots
    bool resume = false;    // --resume: from the newest HDF5 checkpoint
    std::vector<std::string> faults;  // --fault specs still to pass
};

struct Plan {
    config::Config cfg;
    std::filesystem::path config_path;  // absolute
    std::filesystem::path program;      // absolute, executable
    std::string wrapper;                // tools/fr-mpirun (or $FLASHREC_MPIRUN)
    std::vector<std::string> faults;    // --fault specs from the command line, validated
    std::filesystem::path events_path;  // absolute
    Layout layout;
    std::string local_host;

    int process_count() const { return static_cast<int>(layout.processes.size()); }
    // argv of one start: <wrapper> -n N -x VARS... <mpirun_args> <program> <args> --config <yaml> ...
    std::vector<std::string> command(const LaunchKind& kind) const;
};

struct PlanRequest {
    std::string config_path;
    std::vector<std::string> faults;
    std::string events;  // --events
};

// Loads and validates everything; throws flashrec::ConfigError ("file:line: field problem").
Plan make_plan(const PlanRequest& request);

// The path of tools/fr-mpirun: $FLASHREC_MPIRUN, else the one this build was configured with.
std::string mpirun_wrapper();
// The flags the wrapper gives mpirun, found by running it against a stand-in mpirun that prints
// its arguments (so they are read from the wrapper, never copied). nullopt + why if it failed.
std::optional<std::vector<std::string>> wrapper_flags(const std::string& wrapper, std::string& why);

// A command line as a shell would need it typed.
std::string shell_quote(const std::string& word);
std::string shell_join(const std::vector<std::string>& argv);

// The dry-run report: layout, the exact command, the environment, the mpirun flags.
void print_dry_run(const Plan& plan, bool resume, std::ostream& out);

std::string local_hostname();

}  // namespace flashrec::launcher
