// What flashrec-launch will run, as plain values: the layout of ranks on nodes, the flavour of one
// start, and the plan (the validated config, the layout, the exact mpirun command line through
// tools/fr-mpirun). Pure: plan/launch_plan.hpp makes a LaunchPlan (files, environment, Slurm).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "direct_launch.hpp"
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

struct LaunchPlan {
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
    // slurm.launch: srun inside an allocation: the ranks are srun's tasks, not mpirun's.
    std::optional<DirectLaunch> direct;
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
    // --config <yaml> ...; under direct launch srun <step options> ... <program> <args> ...
    // (launch.mpirun_args are mpirun's and are not passed).
    std::vector<std::string> command(const LaunchKind& kind, const Layout& where) const;
};

// A command line as a shell would need it typed.
std::string shell_quote(const std::string& word);
std::string shell_join(const std::vector<std::string>& argv);

std::string short_name(const std::string& host);  // "n3" for "n3.cluster.org"

}  // namespace flashrec::launcher
