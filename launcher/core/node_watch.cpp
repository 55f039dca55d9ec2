#include "node_watch.hpp"

#include "timeouts.hpp"

#include <algorithm>
#include <set>
#include <utility>

namespace flashrec::launcher {

bool NodeWatch::on(const DaemonLost& lost, const JobView& job, bool repairing, bool starting, std::int64_t steps_done,
                   Now now, Effects& fx) {
    const std::string node = book_.node_of_host(lost.host);
    if (node.empty() || book_.is_lost(node) || book_.given_up(node) || job.torn_down()) return false;
    const bool just_spawned = last_spawn_.first == job.attempt.index && now.steady - last_spawn_.second < kSpawnDaemonGrace;
    if (node == job.layout.spawn_host() && (repairing || just_spawned)) {
        // PRRTE 3.0.13 sometimes loses (or crashes) its daemon on the node a replacement is being
        // (or was just) spawned onto. The node itself is fine: the relaunch that follows puts the
        // replacement there all the same. Were the node really gone, that relaunch would lose it
        // again, this time as a node loss.
        log(fx, SpawnDaemonLost{node, job.attempt.index, lost.evidence});
        say(fx, "mpirun lost its daemon on spare node " + node + " while or just after spawning a replacement there: " +
                    "the MPI job ends; the relaunch puts the replacement on " + node);
        return false;
    }
    if (starting && plan_.allocation) {
        // srun started the launch's daemons as one step; a node that fails it ends them all, and
        // PRRTE reports whichever connection it lost first (issue 29's cluster soak: a healthy
        // node named, the dead one kept, until every spare was drained).
        book_.mark_suspect(node);
        log(fx, DaemonLostStarting{node, job.attempt.index, lost.evidence});
        say(fx, "mpirun lost its daemon on " + node + " while the MPI job was starting: which node failed is " +
                    "checked when the attempt has ended (PRRTE names the first daemon it lost; srun ends them all " +
                    "when one node fails)");
        return true;
    }
    book_.mark_lost(node);
    log(fx, NodeLost{node, job.attempt.index, lost.evidence, steps_done});
    say(fx, "FAILURE: node " + node + " lost: " + lost.evidence);
    return true;
}

namespace {

// Every node of the launch: PRRTE starts a daemon on each (Layout::hostfile).
std::set<std::string> layout_nodes(const Layout& layout) {
    std::set<std::string> used(layout.reserve_nodes.begin(), layout.reserve_nodes.end());
    for (const auto& p : layout.processes) used.insert(p.node);
    if (!layout.spare_node.empty()) used.insert(layout.spare_node);
    return used;
}

}  // namespace

void NodeWatch::failed_start(const JobView& job, Effects& fx) {
    check_every_node_ = true;
    say(fx, "the srun step of attempt " + std::to_string(job.attempt.index) + " ended before every rank connected: " +
                "each of its nodes is checked with srun before the next start");
}

std::vector<std::string> NodeWatch::nodes_to_check(const JobView& job) const {
    if (!book_.any_suspect() && !check_every_node_) return {};
    std::vector<std::string> out;
    for (const auto& node : layout_nodes(job.layout))
        if (!book_.is_lost(node) && !book_.given_up(node)) out.push_back(node);
    return out;
}

void NodeWatch::settle_suspects(const std::optional<std::vector<std::string>>& unreachable, const JobView& job,
                                std::int64_t steps_done, Effects& fx) {
    const std::set<std::string> suspects = book_.take_suspects();
    const bool every_node = std::exchange(check_every_node_, false);
    if (suspects.empty() && !every_node) return;
    const auto lose = [&](const std::string& node, const std::string& evidence) {
        if (book_.is_lost(node) || book_.given_up(node)) return;
        book_.mark_lost(node);
        log(fx, NodeLost{node, job.attempt.index, evidence, steps_done});
        say(fx, "FAILURE: node " + node + " lost: " + evidence);
    };
    if (!unreachable) {
        for (const auto& node : suspects)
            lose(node, "mpirun lost its daemon there as the job started (PRRTE; not checked with srun)");
        return;
    }
    for (const auto& node : *unreachable) lose(node, "srun could not start a process there");
    for (const auto& node : suspects)
        if (std::find(unreachable->begin(), unreachable->end(), node) == unreachable->end()) {
            log(fx, DaemonLossUnconfirmed{node, job.attempt.index});
            say(fx, "PRRTE named " + node + ", but srun starts processes there: " + node + " is not counted lost");
        }
}

void NodeWatch::left_allocation(const std::vector<std::string>& held, const JobView& job, Effects& fx) {
    for (const auto& node : layout_nodes(job.layout)) {
        if (std::find(held.begin(), held.end(), node) != held.end() || book_.is_lost(node) || book_.given_up(node))
            continue;
        book_.mark_lost(node);
        log(fx, NodeLeftAllocation{node, job.attempt.index});
        say(fx, "FAILURE: node " + node + " lost: Slurm removed it from the job (it stopped answering)");
    }
}

void NodeWatch::fail(const std::string& node, std::string_view classification, std::int64_t steps_done, Effects& fx) {
    if (!book_.give_up(node) || !plan_.allocation) return;
    if (!plan_.cfg.slurm.drain_on_failure) {
        log(fx, DrainSkipped{node, "slurm.drain_on_failure is false"});
        return;
    }
    fx.emplace_back(Drain{node, slurm::drain_reason(plan_.cfg.slurm.drain_reason, std::string(classification), steps_done,
                                                    node, plan_.allocation->job_id)});
}

Layout NodeWatch::move_off_bad_nodes(const Layout& layout, LaunchKind& kind, const RestartReason& reason,
                                     Effects& fx) const {
    const std::set<std::string> gone = book_.given_up_in(layout);
    if (gone.empty()) return layout;
    const Relayout r = replace_nodes(layout, gone);
    NewLayout record;
    record.reason = reason;
    record.bad_nodes.assign(gone.begin(), gone.end());
    for (const auto& [from, to] : r.replaced) {
        record.replaced.push_back({from, to});
        say(fx, "spare node " + to + " takes the ranks of " + from);
    }
    const std::string& policy = plan_.cfg.slurm.when_spares_exhausted;
    if (!r.doubled_up.empty()) {
        std::string nodes;
        for (const auto& n : r.doubled_up) nodes += (nodes.empty() ? "" : ", ") + n;
        kind.checkpoint_and_exit = policy == "checkpoint-and-requeue" && kind.relaunch;
        say(fx, "no spare node left for " + nodes + ": slurm.when_spares_exhausted = " + policy + ": its ranks " +
                    (kind.checkpoint_and_exit
                         ? "join the other nodes just long enough to write an HDF5 checkpoint, then the job is requeued"
                         : "run on the other nodes from now on (same results, slower steps)"));
    }
    record.doubled_up = r.doubled_up;
    if (!r.doubled_up.empty()) record.policy = policy;
    record.nodes = r.layout.nodes;
    record.spare_nodes = r.layout.reserve_nodes;
    log(fx, std::move(record));
    return r.layout;
}

void NodeWatch::follow_replacements(Layout& layout, const std::map<std::string, const RankInfo*>& current,
                                    Effects& fx) const {
    if (!layout.slurm) return;
    for (auto& p : layout.processes) {
        const auto it = current.find(p.role);
        if (p.spare || it == current.end()) continue;
        const std::string node = book_.node_of_host(it->second->hostname);
        if (node.empty() || node == p.node) continue;
        log(fx, RoleMoved{p.role, p.node, node, it->second->pid});
        say(fx, p.role + " now runs on " + node + " (was " + p.node + ")");
        const std::string left = p.node;
        p.node = node;
        std::erase(layout.reserve_nodes, node);
        // The active nodes follow (a relaunch doubles ranks up onto them): the node it moved to
        // is one now; the one it left stays one only while another active rank runs there.
        const bool left_empty = layout.ranks_on_node(left) == 0;
        const bool arrived_new = std::find(layout.nodes.begin(), layout.nodes.end(), node) == layout.nodes.end();
        if (left_empty && arrived_new) std::replace(layout.nodes.begin(), layout.nodes.end(), left, node);
        else if (left_empty) std::erase(layout.nodes, left);
        else if (arrived_new) layout.nodes.push_back(node);
    }
}

}  // namespace flashrec::launcher
