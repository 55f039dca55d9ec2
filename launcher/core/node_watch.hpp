// The node book at work: PRRTE losing a daemon (a node lost, or the spawn trap on the spare
// node), nodes given up on (drained under Slurm), relaunches moved off them, roles followed to
// the node they now run on. Pure: time passed in, effects returned.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "job_effects.hpp"
#include "job_inputs.hpp"
#include "job_view.hpp"
#include "job_nodes.hpp"

namespace flashrec::launcher {

class NodeWatch {
public:
    NodeWatch(NodeBook book, const LaunchPlan& plan) : book_(std::move(book)), plan_(plan) {}

    const NodeBook& book() const { return book_; }
    NodeBook& book() { return book_; }

    // PRRTE lost its daemon on a host. `repairing`: an in-job repair is under way; `starting`: not
    // every active role of the attempt registered yet. true: a failure of this attempt, the node
    // lost (or, under Slurm while starting, a suspect: PRRTE names whichever daemon it lost first
    // when srun ends them all because one node failed); false: not one of the job's nodes, known
    // already, or the spawn trap (logged as spawn_daemon_lost).
    bool on(const DaemonLost& lost, const JobView& job, bool repairing, bool starting, std::int64_t steps_done, Now now,
            Effects& fx);
    // Under direct launch, a step that ended before every role registered: when a node cannot
    // start its tasks, srun ends the whole step and names the node only in its own words, so
    // every node of the layout is checked at the attempt's end (a node killed as the step
    // started was otherwise relaunched onto until the restart-loop rule ended the job).
    void failed_start(const JobView& job, Effects& fx);
    // The nodes to check at the attempt's end (TeardownAttempt::check_nodes): every node of the
    // layout when PRRTE named a suspect or a direct start failed, else none.
    std::vector<std::string> nodes_to_check(const JobView& job) const;
    // At the attempt's end: `unreachable`, the checked nodes that did not start a process (nullopt:
    // not checked, PRRTE's word stands). Those are lost; a suspect that answered is not.
    void settle_suspects(const std::optional<std::vector<std::string>>& unreachable, const JobView& job,
                         std::int64_t steps_done, Effects& fx);
    // After an attempt ended, under Slurm: the nodes the job still holds (`held`). A node of the
    // layout Slurm dropped from the job (it found the node dead) is lost in this attempt, though
    // nothing of the MPI job said so (a node killed as a relaunch started its daemons there).
    void left_allocation(const std::vector<std::string>& held, const JobView& job, Effects& fx);
    // An in-job repair spawned a replacement onto the spawn host.
    void spawned(int attempt, SteadyTime at) { last_spawn_ = {attempt, at}; }
    // A failure on `node`: give up on it; under Slurm it is drained (or the skip is logged).
    void fail(const std::string& node, std::string_view classification, std::int64_t steps_done, Effects& fx);
    // Before a relaunch: the layout without the nodes given up on; sets checkpoint_and_exit on
    // `kind` when a node had no spare left and the policy says checkpoint-and-requeue.
    Layout move_off_bad_nodes(const Layout& layout, LaunchKind& kind, const RestartReason& reason, Effects& fx) const;
    // Roles that registered from another node than the layout says (a replacement spawned onto a
    // spare node) move there in `layout`.
    void follow_replacements(Layout& layout, const std::map<std::string, const RankInfo*>& current, Effects& fx) const;

private:
    NodeBook book_;
    const LaunchPlan& plan_;
    bool check_every_node_ = false;  // failed_start: no node is named, all are checked
    // The last in-job repair that spawned a replacement (onto the spawn host): attempt and time.
    std::pair<int, SteadyTime> last_spawn_{-1, {}};
};

}  // namespace flashrec::launcher
