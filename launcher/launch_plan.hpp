// What flashrec-launch will run: the validated config, the layout of ranks on nodes, and the exact
// mpirun command line (through tools/fr-mpirun, the one place that holds mpirun's flags).
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
#include "flashrec/slurm/allocation.hpp"

namespace flashrec::launcher {

// Where each MPI process goes and which role it takes. On one machine a job of several nodes
// runs on virtual nodes "node<k>", ranks_per_node actives each, hot spares on the node after
// them. Under Slurm the nodes are the allocation's: the first job.nodes active, the others in
// reserve (hot spares on the first of them). Roles by topology::assign_roles at the start; the
// runtime takes them from FLASHREC_ROLE_OF_RANK, so a relaunch can move some and keep the rest.
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
    bool slurm = false;                     // real nodes of a Slurm allocation: mpirun gets a hostfile
    std::string node_of_role(const std::string& role) const;
    int ranks_on_node(const std::string& node) const;  // active ranks
    // Role index of each active process, in rank order ("2,0,1,3"): FLASHREC_ROLE_OF_RANK.
    std::string role_of_rank() const;
    // Where tier-1 replacements are spawned (FLASHREC_SPARE_HOST): the first reserve node; ""
    // when there is none or the nodes are virtual (the runtime then picks).
    std::string spawn_host() const;
    // mpirun --hostfile for --map-by seq: one line per process (rank order), then the reserve
    // nodes, which puts a PRRTE daemon there for MPI_Comm_spawn.
    std::string hostfile() const;
};
// `allocation` is null outside Slurm.
Layout make_layout(const config::Config& cfg, const std::string& local_host,
                   const slurm::Allocation* allocation = nullptr);

// The layout of a relaunch without the `lost` nodes: each one's processes move together to a
// free reserve node; with none left they are spread over the remaining active nodes (fewest
// ranks first, the batch host last), which keeps the job's shape and its results, at the cost
// of speed.
struct Relayout {
    Layout layout;
    std::vector<std::pair<std::string, std::string>> replaced;  // lost node -> spare node
    std::vector<std::string> doubled_up;                        // lost nodes without a spare
};
Relayout replace_nodes(const Layout& layout, const std::set<std::string>& lost);

// The flavour of one start of the MPI job.
struct LaunchKind {
    bool relaunch = false;  // tier 2: FLASHREC_RELAUNCH=1, restore from node-local snapshots
    bool resume = false;    // --resume: from the newest HDF5 checkpoint
    bool checkpoint_and_exit = false;  // after the relaunch: write an HDF5 checkpoint and leave
    std::vector<std::string> faults;  // --fault specs still to pass
};

struct Plan {
    config::Config cfg;
    std::filesystem::path config_path;  // absolute
    std::filesystem::path program;      // absolute, executable
    std::string wrapper;                // tools/fr-mpirun (or $FLASHREC_MPIRUN)
    std::vector<std::string> faults;    // --fault specs from the command line, validated
    std::filesystem::path events_path;  // absolute
    Layout layout;                      // of the first start
    std::string local_host;
    std::optional<slurm::Allocation> allocation;  // inside a Slurm job
    std::string btl_if;  // FLASHREC_BTL_IF for mpirun when it was unset ("" = leave it)
    // cfg.mpi is train.yaml's with the environment's overrides (config::with_environment);
    // these are the variables that tell the wrapper (config::wrapper_variables).
    std::vector<std::pair<std::string, std::string>> wrapper_variables() const;

    int process_count() const { return static_cast<int>(layout.processes.size()); }
    // Where the hostfile of a Slurm start is written (beside the event log).
    std::filesystem::path hostfile_path() const { return events_path.string() + ".hosts"; }
    // What the ranks of one start get in their environment besides the control plane's
    // variables (FLASHREC_ROLE_OF_RANK, ...), set in mpirun's environment, which the ranks inherit.
    std::vector<std::pair<std::string, std::string>> rank_variables(const LaunchKind& kind,
                                                                    const Layout& where) const;
    // argv of one start: <wrapper> -n N [Slurm flags] <mpirun_args> <program> <args>
    // --config <yaml> ...
    std::vector<std::string> command(const LaunchKind& kind, const Layout& where) const;
};

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
Plan make_plan(const PlanRequest& request);

// The NCCL version this flashrec was built against ("2.32.3"; "" without CUDA): --dry-run and the
// job's first record name it.
const char* built_nccl_version();

// The mpirun wrapper: $FLASHREC_MPIRUN, else fr-mpirun beside this executable (an installed
// launcher), else the source tree's tools/fr-mpirun this build was configured with.
std::string mpirun_wrapper();
// The flags the wrapper gives mpirun, found by running it against a stand-in mpirun that prints
// its arguments (so they are read from the wrapper, never copied). nullopt + why if it failed.
// `variables` are set for the wrapper on top of this process's environment (the transport's).
std::optional<std::vector<std::string>> wrapper_flags(
    const std::string& wrapper, std::string& why,
    const std::vector<std::pair<std::string, std::string>>& variables = {});

// A command line as a shell would need it typed.
std::string shell_quote(const std::string& word);
std::string shell_join(const std::vector<std::string>& argv);

// The dry run's protection lines (pure, tests/launcher/test_launch_plan.cpp): how often it
// snapshots; the expected failure cost per k in steps and snapshot times (neither is known
// before the job runs); the start-up replay probe ("" where it does not run).
std::string interval_text(const config::Protection& p);
std::string failure_cost_estimate(const config::Protection& p);
std::string replay_check_text(const config::Protection& p);

// The dry-run report: layout, the exact command, the environment, the mpirun flags.
void print_dry_run(const Plan& plan, bool resume, std::ostream& out);

std::string local_hostname();
std::string short_name(const std::string& host);  // "n3" for "n3.cluster.org"
// The local IPv4 address this machine uses to reach `host` (the route's source), or "".
std::string address_towards(const std::string& host);

}  // namespace flashrec::launcher
