#include "incident_book.hpp"

#include <signal.h>

#include <algorithm>

#include "failure_step.hpp"
#include "timeouts.hpp"
#include "flashrec/ft/contract.hpp"

namespace flashrec::launcher {

namespace {
using std::chrono::milliseconds;
// A rank whose control connection was cut while its process lives gets kReconnectWait
// (timeouts.hpp) to reconnect before the cut counts as a failure.

std::string tier_text(const Rule& rule) { return rule.tier ? " (tier " + std::to_string(rule.tier) + ")" : ""; }
}  // namespace

std::optional<KillOnNode> kill_route(const RankIncident& rank, const JobView& job, const NodeBook& nodes,
                                     SteadyTime now) {
    if (job.slurm_job_id.empty() || !job.layout.slurm) return std::nullopt;
    if (!job.direct_launch && rank.hostname == job.local_host) return std::nullopt;
    const std::string node = nodes.node_of_rank(job.layout, rank.hostname, rank.role);
    // A node already lost starts no step (its slurmd is gone or frozen): it goes as a whole.
    if (node.empty() || nodes.is_lost(node)) return std::nullopt;
    // Only a node that shows life (another rank of it sent a heartbeat within half the hang
    // timeout) is asked: a frozen, dead or cut-off one would hold the launcher for
    // kRemoteKillLimit, and goes as a whole anyway. A rank alone on its node cannot be told from
    // its node (under direct launch the node timeout decides first). Any rank's heartbeats count,
    // a stalled one's too (a peer waiting behind the hung rank, or the stalled rank itself); a
    // silent rank's own are older than the hang timeout.
    const auto recent = std::chrono::milliseconds(job.cfg.detection.hang_timeout_ms) / 2;
    const bool node_answers = std::any_of(job.ranks.begin(), job.ranks.end(), [&](const RankInfo& r) {
        return r.hostname == rank.hostname && r.status == RankStatus::active && r.heartbeats > 0 &&
               now - r.last_heartbeat < recent;
    });
    if (!node_answers && rank.hostname != job.local_host) return std::nullopt;
    return KillOnNode{job.slurm_job_id, node};
}

Incident& IncidentBook::add(Incident inc, Now now, Effects& fx) {
    inc.id = static_cast<int>(incidents_.size()) + 1;
    inc.at = now.steady;
    if (!inc.rule) inc.rule = &classify(inc.obs);
    log(fx, failure_record(inc, mpi_errors_));
    note_failure(now.steady);
    incidents_.push_back(std::move(inc));
    return incidents_.back();
}

void IncidentBook::new_attempt() {
    exit_requests_.clear();
    answered_losses_.clear();
    pending_lost_.clear();
    pending_stalls_.clear();
    recovery_notes_.clear();
    first_failure_.reset();
    loop_ended_ = false;
}

bool IncidentBook::repairing(int attempt) const {
    return !pending_lost_.empty() || std::any_of(incidents_.begin(), incidents_.end(), [&](const Incident& i) {
               return i.attempt == attempt && i.rule->tier == 1 && !i.recovered;
           });
}

void IncidentBook::restart_ended(int id, const std::string& by, bool completed) {
    for (auto& inc : incidents_)
        if (inc.id == id) {
            if (completed) inc.recovered_by = by;
            else inc.tried = by + " failed";
        }
}

int IncidentBook::requested_exit_code() const {
    int code = 0;
    for (const auto& [pid, c] : exit_requests_) code = std::max(code, c);
    return code;
}

std::vector<int> IncidentBook::pending_lost_pids() const {
    std::vector<int> pids;
    for (const auto& p : pending_lost_) pids.push_back(p.incident.pid);
    return pids;
}

std::int64_t IncidentBook::step_of(int pid, std::int64_t last_step_tag, std::int64_t last_step) const {
    const auto fired = faults_fired_.find(pid);
    return failure_step(fired != faults_fired_.end() ? std::optional(fired->second.step) : std::nullopt, last_step_tag,
                        last_step);
}

double IncidentBook::since_injection_ms(int pid, WallTime at) const {
    const auto f = faults_fired_.find(pid);
    return f == faults_fired_.end() ? -1 : static_cast<double>(unix_ms(at) * 1000 - f->second.unix_us) / 1000.0;
}

void IncidentBook::on(const ft::records::FaultInjected& fault) {
    // The real cause of the rank's end (a kill, an exit code, a stop) and the time it fired.
    fired_texts_.insert(fault.fault);
    faults_fired_[fault.pid] = fault;
}

void IncidentBook::on(const ft::records::EndingJob& ending) {
    // A rank ends the job on purpose and says with which exit code (the runtime's named codes:
    // 75 relaunch, 76 state lost in memory, 77 no spare, 78 a deterministic error, 81 a restore
    // refused another platform); anything else counts as 1. The highest wins
    // (requested_exit_code): 78 and 81 say no restart can help.
    int code = ending.exit_code;
    if (code != ft::kExitForRelaunch && code != ft::kExitStateLost && code != ft::kExitNoSpare &&
        code != ft::kExitDeterministicError && code != ft::kExitPlatformMismatch)
        code = 1;
    if (ending.pid > 0) exit_requests_[ending.pid] = code;
    answered_losses_.insert(ending.lost_roles.begin(), ending.lost_roles.end());
}

std::optional<ForcedDeath> IncidentBook::on(const RankHung& hung, const JobView& job, NodeWatch& nodes, Now now,
                                            Effects& fx) {
    const auto& inc = hung.incident;
    if (job.old_pids.count(inc.pid) || job.torn_down() || job.interrupt_signal) return std::nullopt;
    if (hung.outcome == KillOutcome::pending) {
        // A rank that waited a long time behind a hung peer (in the all-reduce) looks stalled for
        // the moment between the others' first heartbeat after the repair and its own. Confirm
        // the stall over a few heartbeat periods before killing it.
        pending_stalls_.push_back({hung, now.steady + stall_confirm_,
                                   now.steady + stall_confirm_ + milliseconds(job.cfg.detection.hang_timeout_ms)});
        return std::nullopt;
    }
    if (hung.outcome == KillOutcome::killed) killed_pids_.insert(inc.pid);
    return confirmed_hang(hung, job, nodes, now, fx);
}

std::optional<ForcedDeath> IncidentBook::confirmed_hang(const RankHung& hung, const JobView& job, NodeWatch& nodes,
                                                        Now now, Effects& fx) {
    const auto& inc = hung.incident;
    Incident i;
    i.attempt = job.attempt.index;
    i.obs = {inc.reason == IncidentReason::stalled ? Observed::hang_stalled : Observed::hang_no_heartbeat, 0};
    i.role = inc.role;
    i.pid = inc.pid;
    i.node = nodes.book().node_of_rank(job.layout, inc.hostname, inc.role);
    if (i.node.empty() && is_spare_role(inc.role)) i.node = job.layout.spare_node;
    i.hang = true;
    i.kill = hung.outcome;
    i.step = step_of(inc.pid, inc.last_step_tag, job.last_step);
    i.detection_latency_ms = static_cast<double>(inc.detection_latency.count());
    i.since_injection_ms = since_injection_ms(inc.pid, hung.decided);
    i.detail = std::string(to_string(inc.reason)) + ", last step tag " + std::to_string(inc.last_step_tag) + "; " +
               std::string(to_string(hung.outcome));
    const Incident& recorded = add(i, now, fx);
    log(fx, HangKill{recorded.id, inc.role, inc.pid, inc.hostname, std::string(to_string(hung.outcome)), "SIGKILL",
                     inc.detection_latency.count(),
                     recorded.since_injection_ms >= 0 ? std::optional(round3(recorded.since_injection_ms)) : std::nullopt});
    say(fx, "FAILURE #" + std::to_string(recorded.id) + ": " + inc.role + " (pid " + std::to_string(inc.pid) + ") hung (" +
                std::string(to_string(inc.reason)) + " for " + human_ms(recorded.detection_latency_ms) +
                (recorded.since_injection_ms >= 0 ? ", " + human_ms(recorded.since_injection_ms) + " after the fault" : "") +
                ") -> " +
                (hung.outcome == KillOutcome::killed ? "killed with SIGKILL"
                                                     : "NOT killed: " + std::string(to_string(hung.outcome))) +
                ", " + std::string(recorded.rule->classification) + " (tier " + std::to_string(recorded.rule->tier) + ")");

    // A whole node silent at once is a node failure, not a process failure.
    if (i.node.empty()) return std::nullopt;
    const int on_node = i.node == job.layout.spare_node ? 0 : job.layout.ranks_on_node(i.node);
    const bool all_silent = silent_nodes_.observe(i.node, inc.role, now.steady, on_node);
    const bool remote = hung.outcome == KillOutcome::remote;
    // A rank on another host cannot be killed from here: its node has to go, whatever the other
    // ranks there do.
    if (!(remote && job.layout.slurm) && !all_silent) return std::nullopt;
    Incident n;
    n.attempt = job.attempt.index;
    n.obs = {remote ? Observed::node_silent_remote : Observed::node_silent_local, 0};
    n.role = "*";
    n.node = i.node;
    n.detail = "all " + std::to_string(on_node) + " ranks of " + i.node + " went silent within " +
               human_ms(static_cast<double>(silent_nodes_.window().count()));
    const Incident& node_inc = add(n, now, fx);
    say(fx, "FAILURE #" + std::to_string(node_inc.id) + ": node " + i.node + " silent -> " +
                std::string(node_inc.rule->classification) + ", " + std::string(to_string(node_inc.rule->action)));
    silent_nodes_.clear(i.node);
    if (node_inc.rule->action != Action::replace_node) return std::nullopt;
    if (job.layout.slurm) nodes.book().mark_lost(i.node);
    if (job.mpirun_gone()) return std::nullopt;
    return ForcedDeath{n.obs, n.detail, first_failure_.value_or(now.steady)};
}

void IncidentBook::on(const RankLost& lost, const JobView& job, Now now, Effects& fx) {
    const auto& inc = lost.incident;
    if (job.old_pids.count(inc.pid) || job.mpirun_gone()) return;
    if (job.interrupt_signal) return;  // we asked the job to stop: its ranks leaving is no failure
    if (killed_pids_.count(inc.pid)) {
        log(fx, KillConfirmed{inc.role, inc.pid});
        return;
    }
    if (is_spare_role(inc.role) && (loop_ended_ || released_pids_.count(inc.pid))) {
        // A parked spare leaves without BYE when the job releases it at the end (the leader's
        // job_stats comes just before the release).
        log(fx, ReleasedSpareLeft{inc.role, inc.pid});
        return;
    }
    note_failure(now.steady);
    pending_lost_.push_back({inc, now.steady, now.wall, job.last_step});
}

void IncidentBook::on_recovery(const ft::records::Recovery& r, const std::string& by, const JobView& job,
                               NodeWatch& nodes, std::int64_t steps_done, Now now, Effects& fx) {
    const std::set<std::string> failed(r.failed_roles.begin(), r.failed_roles.end());
    // Under Slurm the node a rank died on is not used again (docs/slurm.md): drained now, its
    // other ranks moved off it at the next relaunch. (The role may already run elsewhere: the
    // node is the one its incident names. An incident still to come, its connection not yet
    // reported closed, does this itself.)
    // A hung rank that was killed alone leaves its node in the job: the process was stuck, its node
    // answered (a node whose every rank fell silent is the node's own incident).
    for (const auto& inc : incidents_)
        if (job.layout.slurm && inc.attempt == job.attempt.index && failed.count(inc.role) && !inc.node.empty() &&
            !(inc.hang && inc.kill == KillOutcome::killed))
            nodes.fail(inc.node, inc.rule->classification, steps_done, fx);
    for (auto& inc : incidents_)
        if (!inc.recovered && inc.attempt == job.attempt.index && failed.count(inc.role)) {
            inc.recovered = true;
            inc.recovered_by = by;
            inc.recovery_ms = r.total_ms;
        }
    recovery_notes_.push_back({failed, now.steady, by, r.total_ms});
    progressed();
}

void IncidentBook::on_tick(const JobView& job, NodeWatch& nodes, Now now, Effects& fx) {
    // A rank stalled behind a peer that is being repaired cannot move until the repair is done
    // (under load that takes longer than the confirmation): its stall is judged after it.
    const bool repair_under_way = repairing(job.attempt.index);
    for (auto it = pending_stalls_.begin(); it != pending_stalls_.end();) {
        const RankIncident inc = it->hung.incident;
        const RankInfo* info = job.rank(inc.role);
        const bool still_stalled = info && info->pid == inc.pid && info->hung && info->status == RankStatus::active;
        if (still_stalled && repair_under_way && now.steady < it->latest)
            it->until = std::min(it->latest, std::max(it->until, now.steady + stall_confirm_));
        if (now.steady < it->until && !job.mpirun_gone()) {
            ++it;
            continue;
        }
        it = pending_stalls_.erase(it);
        if (job.old_pids.count(inc.pid) || job.mpirun_gone()) continue;
        if (!still_stalled) {
            log(fx, StallCleared{inc.role, inc.pid, inc.last_step_tag,
                                 info ? std::optional(info->step_tag) : std::nullopt, stall_confirm_.count()});
            continue;
        }
        // Comes back as a RankHung with the kill's outcome.
        fx.emplace_back(KillRank{inc, kill_route(inc, job, nodes.book(), now.steady)});
    }
    std::erase_if(pending_lost_, [&](const PendingLost& lost) { return settle(lost, job, nodes, now, fx); });
}

const IncidentBook::RecoveryNote* IncidentBook::recovery_of(const std::string& role, SteadyTime since) const {
    const RecoveryNote* latest = nullptr;
    for (const auto& note : recovery_notes_)
        if (note.at >= since && note.roles.count(role)) latest = &note;
    return latest;
}

bool IncidentBook::settle(const PendingLost& lost, const JobView& job, NodeWatch& nodes, Now now, Effects& fx) {
    const auto& inc = lost.incident;
    // A rank whose connection was cut but whose process lives reconnects (HELLO again): that is
    // no failure (issue 15, case 4). A visibly live local process gets time for it.
    if (const RankInfo* info = job.rank(inc.role); info && info->pid == inc.pid && info->status == RankStatus::active) {
        log(fx, RankReconnected{inc.role, inc.pid, round3(ms_between(lost.seen, now.steady))});
        return true;
    }
    const auto waited = now.steady - lost.seen;
    const bool settling = waited < kLostSettle || (waited < kReconnectWait && job.alive_here(inc.hostname, inc.pid));
    if (settling && !job.mpirun_gone()) return false;
    // Ranks leaving a job they asked to end are no failure; the deaths that end answers are
    // (77 names the roles it found no spare for: their nodes are not used again), and so are
    // deaths a spare already repaired in-job (a second death can end the step before the first
    // one's last words had time to arrive).
    const RecoveryNote* repaired = recovery_of(inc.role, lost.seen);
    if (job.interrupt_signal ||
        (job.mpirun_gone() && !exit_requests_.empty() && !answered_losses_.count(inc.role) && !repaired))
        return true;
    Incident i;
    i.attempt = job.attempt.index;
    i.obs = {Observed::connection_lost, 0};
    if (auto e = exit_requests_.find(inc.pid); e != exit_requests_.end()) i.obs = {Observed::exit_code, e->second};
    if (auto f = faults_fired_.find(inc.pid); f != faults_fired_.end()) {
        // The fault's own record names the real cause.
        const auto& fault = f->second;
        if (fault.action == "kill") i.obs = {Observed::signal, SIGKILL};
        else if (fault.action == "exit") i.obs = {Observed::exit_code, fault.exit_code};
        i.since_injection_ms = since_injection_ms(inc.pid, lost.when);
        i.detail = "fault injected: " + fault.fault;
    }
    i.role = inc.role;
    i.pid = inc.pid;
    i.node = nodes.book().node_of_rank(job.layout, inc.hostname, inc.role);
    if (nodes.book().is_lost(i.node)) {
        // Part of its node's loss, which is the failure on record.
        log(fx, RankLostWithNode{inc.role, inc.pid, i.node});
        return true;
    }
    i.step = step_of(inc.pid, inc.last_step_tag, lost.job_step);
    i.detection_latency_ms = static_cast<double>(inc.detection_latency.count());
    // Its recovery may already be done: the record can beat the settle time.
    if (repaired) {
        i.recovered = true;
        i.recovered_by = repaired->by;
        i.recovery_ms = repaired->ms;
    }
    const Incident& recorded = add(i, now, fx);
    if (job.layout.slurm && recorded.rule->tier == 1 && !recorded.node.empty())
        nodes.fail(recorded.node, recorded.rule->classification, std::max<std::int64_t>(recorded.step, 0), fx);
    say(fx, "FAILURE #" + std::to_string(recorded.id) + ": " + inc.role + " (pid " + std::to_string(inc.pid) +
                ") lost in step " + std::to_string(recorded.step) +
                (recorded.since_injection_ms >= 0 ? " (" + human_ms(recorded.since_injection_ms) + " after the fault)" : "") +
                " -> " + std::string(recorded.rule->classification) + ", " + std::string(to_string(recorded.rule->action)) +
                tier_text(*recorded.rule));
    return true;
}

}  // namespace flashrec::launcher
