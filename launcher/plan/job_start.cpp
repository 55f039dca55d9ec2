#include "job_start.hpp"

#include <algorithm>
#include <array>
#include <string_view>
#include <unistd.h>

#include "flashrec/flashrec.hpp"
#include "flashrec/ft/contract.hpp"
#include "flashrec/ft/wire.hpp"

namespace flashrec::launcher {

using json = nlohmann::json;

std::string wire_hostname(std::string name) {
    if (name.size() > ft::wire::kMaxHostnameBytes) name.resize(ft::wire::kMaxHostnameBytes);
    for (char& c : name)
        if (!ft::wire::valid_hostname(std::string_view(&c, 1))) c = '-';
    return name.empty() ? "unknown" : name;
}

std::string control_bind_address(const LaunchPlan& plan, std::vector<std::string>& notes) {
    const std::string& bind = plan.cfg.detection.bind;
    if (!plan.btl_if.empty())
        notes.push_back(std::string("MPI network: ") + ft::env::kBtlIf + "=" + plan.btl_if +
                        " (not set: the subnet of this node's route to the other nodes; set it to pick another network)");
    if (!plan.allocation || !(bind == "127.0.0.1" || bind == "localhost" || bind == "::1")) return bind;
    // Ranks on other nodes cannot reach loopback: listen on the address this node uses to reach
    // the job's other nodes (the token still guards the port).
    for (const auto& node : plan.allocation->nodes) {
        if (short_name(node) == short_name(plan.local_host)) continue;
        const std::string address = address_towards(node);
        if (address.empty()) break;
        notes.push_back("control plane: listening on " + address + " (the route to " + node + "), since detection.bind = " +
                        bind + " cannot be reached from other nodes");
        return address;
    }
    return bind;
}

std::string reachable_endpoint(std::string endpoint) {
    // Ranks on other nodes need the host's address (the Slurm path hands that out).
    if (endpoint.rfind("0.0.0.0:", 0) == 0) return "127.0.0.1" + endpoint.substr(7);
    if (endpoint.rfind("[::]:", 0) == 0) return "[::1]" + endpoint.substr(4);
    return endpoint;
}

JobStart job_start_record(const LaunchPlan& plan, bool resume, const std::string& run_id) {
    const auto& cfg = plan.cfg;
    return {plan.cfg.job.name,
            run_id,
            plan.config_path.string(),
            plan.program.string(),
            flashrec::version(),
            built_nccl_version(),
            static_cast<int>(::getpid()),
            plan.local_host,
            resume,
            plan.faults,
            cfg.job.steps,
            cfg.recovery.warm_relaunches,
            cfg.checkpoint.dir,
            cfg.detection.hang_timeout_ms,
            cfg.detection.heartbeat_ms,
            cfg.mpi.transport,
            plan.events_path.string()};
}

JobLayout layout_record(const LaunchPlan& plan, const std::string& control, const std::optional<std::string>& metrics) {
    const Layout& layout = plan.layout;
    const auto& job = plan.cfg.job;
    JobLayout record;
    record.shape = {job.dp, job.tp, job.pp};
    record.processes = plan.process_count();
    record.active = job.world_size();
    record.placement = job.placement;
    record.virtual_nodes = layout.virtual_nodes;
    for (const auto& node : layout.nodes) {
        JobLayout::Node& entry = record.nodes.emplace_back(JobLayout::Node{node, {}});
        for (const auto& p : layout.processes)
            if (!p.spare && p.node == node) entry.ranks.push_back({p.rank, p.role});
    }
    for (const auto& p : layout.processes)
        if (p.spare) record.hot_spares.push_back({p.rank, p.role, p.node});
    record.spare_nodes = layout.reserve_nodes;
    record.control = control;
    record.metrics = metrics;
    return record;
}

// The job in one line: its shape, its nodes, the control plane, the event log.
std::string announcement(const LaunchPlan& plan, const std::string& control, const std::optional<std::string>& metrics) {
    const auto& job = plan.cfg.job;
    const Layout& layout = plan.layout;
    return "job " + job.name + ": " + std::to_string(job.world_size()) + " rank" + (job.world_size() == 1 ? "" : "s") +
           " (dp " + std::to_string(job.dp) + " x tp " + std::to_string(job.tp) + " x pp " + std::to_string(job.pp) +
           ") on " + std::to_string(job.nodes) + " node" + (job.nodes == 1 ? "" : "s") + " + " +
           std::to_string(job.hot_spares) + " hot spare" + (job.hot_spares == 1 ? "" : "s") +
           (layout.slurm ? " + " + std::to_string(layout.reserve_nodes.size()) + " spare node(s)" +
                               (layout.reserve_nodes.empty() ? "" : " " + shell_join(layout.reserve_nodes)) +
                               " (Slurm job " + plan.allocation->job_id + ")"
                         : std::string()) +
           "; control plane " + control + (metrics ? "; metrics http://" + *metrics + "/metrics" : std::string()) +
           "; event log " + plan.events_path.string();
}

std::vector<std::string> child_environment(const LaunchPlan& plan, char** inherited, const LaunchKind& launch,
                                           const Layout& layout, const ControlAccess& access) {
    std::vector<std::string> env;
    // The variables this launch sets: an inherited value must never reach the ranks.
    static constexpr std::array<std::string_view, 12> kOurs = {
        ft::env::kControl,    ft::env::kToken,      ft::env::kLaunchId,        ft::env::kRelaunch,
        ft::env::kResume,     ft::env::kRoleOfRank, ft::env::kCheckpointAndExit, ft::env::kSpareHost,
        ft::env::kTransport,  ft::env::kDetectorPeriodMs, ft::env::kDetectorTimeoutMs, ft::env::kYieldWhenIdle};
    const auto rank_vars = plan.rank_variables(launch, layout);
    for (char** e = inherited; *e; ++e) {
        const std::string_view entry(*e);
        const auto ours = [&](std::string_view name) {
            return entry.size() > name.size() && entry.substr(0, name.size()) == name && entry[name.size()] == '=';
        };
        // ... and neither must one of the rank variables of this plan (direct launch: the MPI settings).
        const auto set_here = [&](const auto& var) { return ours(var.first); };
        if (std::none_of(kOurs.begin(), kOurs.end(), ours) && std::none_of(rank_vars.begin(), rank_vars.end(), set_here))
            env.emplace_back(entry);
    }
    env.push_back(std::string(ft::env::kControl) + "=" + access.endpoint);
    env.push_back(std::string(ft::env::kToken) + "=" + access.token_hex);
    env.push_back(std::string(ft::env::kLaunchId) + "=" + access.launch_id);
    for (const auto& [name, value] : rank_vars) env.push_back(name + "=" + value);
    if (!plan.btl_if.empty()) env.push_back(std::string(ft::env::kBtlIf) + "=" + plan.btl_if);
    // The transport the wrapper turns into MCA flags (train.yaml's, or the environment's override).
    for (const auto& [name, value] : plan.wrapper_variables()) env.push_back(name + "=" + value);
    return env;
}

}  // namespace flashrec::launcher
