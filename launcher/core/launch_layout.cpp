#include "launch_layout.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "flashrec/errors.hpp"
#include "flashrec/ft/contract.hpp"
#include "flashrec/runtime/topology.hpp"

namespace flashrec::launcher {

std::string short_name(const std::string& host) { return host.substr(0, host.find('.')); }

std::string Layout::node_of_role(const std::string& role) const {
    for (const auto& p : processes)
        if (p.role == role) return p.node;
    return {};
}

int Layout::ranks_on_node(const std::string& node) const {
    int n = 0;
    for (const auto& p : processes) n += !p.spare && p.node == node;
    return n;
}

std::string Layout::role_of_rank() const {
    std::string out;
    for (const auto& p : processes) {
        if (p.spare) continue;
        const auto index = std::find(active_roles.begin(), active_roles.end(), p.role) - active_roles.begin();
        out += (out.empty() ? "" : ",") + std::to_string(index);
    }
    return out;
}

std::string Layout::spawn_host() const { return slurm && !reserve_nodes.empty() ? reserve_nodes.front() : ""; }

std::string Layout::hostfile() const {
    std::string text;
    for (const auto& p : processes) text += p.node + "\n";
    for (const auto& n : reserve_nodes)
        if (std::none_of(processes.begin(), processes.end(), [&](const Process& p) { return p.node == n; }))
            text += n + "\n";
    return text;
}

Layout make_layout(const config::Config& cfg, const std::string& local_host, const slurm::Allocation* allocation) {
    const auto& job = cfg.job;
    const topology::Shape shape{job.dp, job.tp, job.pp};
    Layout layout;
    layout.slurm = allocation != nullptr;
    layout.virtual_nodes = !layout.slurm && job.nodes > 1;
    auto node_name = [&](int k) {
        if (layout.slurm)
            return k < job.nodes ? allocation->active[static_cast<std::size_t>(k)]
                                 : allocation->spare.empty() ? allocation->active.back() : allocation->spare.front();
        return layout.virtual_nodes ? "node" + std::to_string(k) : local_host;
    };
    std::vector<int> node_of_process;
    for (int r = 0; r < shape.size(); ++r) node_of_process.push_back(std::min(r / job.ranks_per_node, job.nodes));
    const auto roles = topology::assign_roles(shape, node_of_process, topology::parse_placement(job.placement));
    for (int k = 0; k < job.nodes; ++k) layout.nodes.push_back(node_name(k));
    for (int r = 0; r < shape.size(); ++r) layout.active_roles.push_back(topology::role_key(topology::coord_of(shape, r)));
    for (int r = 0; r < shape.size(); ++r)
        layout.processes.push_back({r, node_name(node_of_process[static_cast<std::size_t>(r)]),
                                    topology::role_key(topology::coord_of(shape, roles[static_cast<std::size_t>(r)])),
                                    false, -1});
    if (job.hot_spares > 0) layout.spare_node = node_name(job.nodes);
    for (int i = 0; i < job.hot_spares; ++i)
        layout.processes.push_back({shape.size() + i, layout.spare_node, "spare:" + std::to_string(i), true, i});
    if (layout.slurm) {
        layout.reserve_nodes = allocation->spare;
    } else {
        const int first_reserve = job.nodes + (job.hot_spares > 0 ? 1 : 0);
        for (int i = 0; i < job.spare_nodes; ++i)
            layout.reserve_nodes.push_back(layout.virtual_nodes ? "node" + std::to_string(first_reserve + i)
                                                                : "spare-node" + std::to_string(i));
    }
    return layout;
}

Relayout replace_nodes(const Layout& layout, const std::set<std::string>& lost) {
    Relayout out{layout, {}, {}};
    Layout& l = out.layout;
    std::erase_if(l.reserve_nodes, [&](const std::string& n) { return lost.count(n) > 0; });
    const std::vector<std::string> before = l.nodes;
    for (const auto& node : before) {
        if (!lost.count(node)) continue;
        if (!l.reserve_nodes.empty()) {
            const std::string spare = l.reserve_nodes.front();
            l.reserve_nodes.erase(l.reserve_nodes.begin());
            for (auto& p : l.processes)
                if (p.node == node) p.node = spare;
            std::replace(l.nodes.begin(), l.nodes.end(), node, spare);
            out.replaced.emplace_back(node, spare);
            continue;
        }
        std::erase(l.nodes, node);
        if (l.nodes.empty()) throw Error("every active node of the job is lost (" + node + " was the last)");
        out.doubled_up.push_back(node);
        // Fewest ranks first; among equals the last node, which keeps the batch host (the first
        // node: mpirun and the launcher run there) from taking extra ranks.
        for (auto& p : l.processes) {
            if (p.spare || p.node != node) continue;
            p.node = *std::min_element(l.nodes.rbegin(), l.nodes.rend(), [&](const auto& a, const auto& b) {
                return l.ranks_on_node(a) < l.ranks_on_node(b);
            });
        }
    }
    // Hot spares whose node is gone wait on the first reserve node, else the last active one.
    const std::string spare_home = l.reserve_nodes.empty() ? l.nodes.back() : l.reserve_nodes.front();
    for (auto& p : l.processes)
        if (p.spare && lost.count(p.node)) p.node = spare_home;
    if (lost.count(l.spare_node)) l.spare_node = spare_home;
    return out;
}

std::vector<std::pair<std::string, std::string>> LaunchPlan::rank_variables(const LaunchKind& kind,
                                                                      const Layout& where) const {
    std::vector<std::pair<std::string, std::string>> vars{{ft::env::kRoleOfRank, where.role_of_rank()}};
    if (!where.spawn_host().empty()) vars.emplace_back(ft::env::kSpareHost, where.spawn_host());
    if (kind.relaunch) vars.emplace_back(ft::env::kRelaunch, "1");
    if (kind.checkpoint_and_exit) vars.emplace_back(ft::env::kCheckpointAndExit, "1");
    if (direct && where.slurm) vars.insert(vars.end(), direct->variables().begin(), direct->variables().end());
    return vars;
}

std::vector<std::pair<std::string, std::string>> LaunchPlan::wrapper_variables() const {
    return config::wrapper_variables(cfg.mpi);
}

std::vector<std::string> LaunchPlan::command(const LaunchKind& kind, const Layout& where) const {
    std::vector<std::string> trainer{program.string()};
    trainer.insert(trainer.end(), cfg.launch.args.begin(), cfg.launch.args.end());
    trainer.insert(trainer.end(), {"--config", config_path.string()});
    for (const auto& f : kind.faults) trainer.insert(trainer.end(), {"--fault", f});
    if (kind.resume) trainer.push_back("--resume");
    if (direct && where.slurm) return direct->command(static_cast<int>(where.processes.size()), trainer);

    std::vector<std::string> argv{wrapper, "-n", std::to_string(where.processes.size())};
    // No -x: the ranks inherit mpirun's environment, locally and under Slurm (srun hands it to
    // PRRTE's daemons). -x would also be unsafe: with several -x, PRRTE 3.0.13 corrupted its
    // heap in MPI_Comm_spawn (3 of 6 spawns aborted mpirun on the test cluster, 0 of 6 without).
    if (where.slurm)
        // PRRTE starts its daemons with its own srun: --no-kill keeps that step alive when a node
        // dies, --overlap lets it share the CPUs of a step that runs this launcher (srun
        // flashrec-launch). --map-by seq puts rank i on line i of the hostfile.
        argv.insert(argv.end(), {"--prtemca", "plm_slurm_args", "--no-kill --overlap", "--hostfile",
                                 hostfile_path().string(), "--map-by", "seq"});
    argv.insert(argv.end(), cfg.launch.mpirun_args.begin(), cfg.launch.mpirun_args.end());
    argv.insert(argv.end(), trainer.begin(), trainer.end());
    return argv;
}

std::string shell_quote(const std::string& word) {
    if (word.empty()) return "''";
    bool plain = true;
    for (char c : word)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || std::strchr("@%+=:,./_-^", c))) plain = false;
    if (plain) return word;
    std::string out = "'";
    for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

std::string shell_join(const std::vector<std::string>& argv) {
    std::string out;
    for (const auto& a : argv) out += (out.empty() ? "" : " ") + shell_quote(a);
    return out;
}

}  // namespace flashrec::launcher
