#include "job_progress.hpp"

#include "timeouts.hpp"

#include <algorithm>
#include <cstdio>

namespace flashrec::launcher {

namespace {
using std::chrono::milliseconds;
constexpr auto kProgressEvery = std::chrono::seconds(1);
// mpirun_lingered's "rule": why the launcher ended an mpirun whose ranks had all left.
constexpr const char* kEndedAccountedFor = "every_process_accounted_for";
constexpr const char* kEndedAfterGrace = "grace_expired";
// Once every rank of an attempt said BYE or was lost, mpirun has kMpirunEndGrace (timeouts.hpp)
// to exit by itself; then the launcher ends it (PRRTE was seen waiting 125 s and more on ranks
// that were gone). An attempt that the ranks ended themselves (ending_job) gets no grace once
// every process is accounted for: check_ranks_gone.

bool in_step_loop(ft::wire::Phase p) {
    using ft::wire::Phase;
    return p == Phase::compute || p == Phase::grad_sync || p == Phase::commit_wait || p == Phase::optimizer;
}
}  // namespace

std::map<std::string, const RankInfo*> current_ranks(const std::vector<RankInfo>& ranks, SteadyTime attempt_start) {
    std::map<std::string, const RankInfo*> current;
    for (const auto& r : ranks)
        if (r.registered_at >= attempt_start) current[r.role] = &r;
    return current;
}

void JobProgress::new_attempt(SteadyTime start) {
    attempt_start_ = start;
    progressed_ = false;
    rate_window_.clear();
    tag_steps_ = 0;
    last_tags_.clear();
    last_progress_time_ = start;
    all_registered_ = in_loop_ = false;
    ranks_gone_since_.reset();
    finished_.clear();
    last_records_.clear();
    named_lost_.clear();
}

void JobProgress::on(const ft::records::Step& s, Now now) {
    if (s.loss) last_loss_ = *s.loss;
    if (s.step > last_step_ || !progressed_) {
        if (s.step >= 0) last_step_ = s.step;
        progressed_ = true;
    }
    rate_window_.emplace_back(now.steady, s.step);
    if (!first_step_seen_) first_step_seen_.emplace(now.steady, s.step);
    last_step_seen_.emplace(now.steady, s.step);
    while (rate_window_.size() > 2 && now.steady - rate_window_.front().first > std::chrono::seconds(5))
        rate_window_.pop_front();
    last_progress_time_ = now.steady;
}

bool JobProgress::finished(const std::vector<std::string>& active_roles) const {
    return !active_roles.empty() && std::all_of(active_roles.begin(), active_roles.end(), [&](const std::string& role) {
        const auto it = finished_.find(role);
        return it != finished_.end() && it->second == cfg_.job.steps;
    });
}

JobProgress::Change JobProgress::observe(const std::map<std::string, const RankInfo*>& current, const JobView& job,
                                         Now now, Effects& fx) {
    Change change;
    bool all_registered = true, all_in_loop = true;
    for (const auto& role : job.layout.active_roles) {
        const auto it = current.find(role);
        if (it == current.end()) {
            all_registered = all_in_loop = false;
            break;
        }
        const RankInfo& r = *it->second;
        if (!(in_step_loop(r.phase) || r.phase == ft::wire::Phase::recovery ||
              (r.status != RankStatus::active && r.step_tag > 0)))
            all_in_loop = false;
    }
    if (all_registered && !all_registered_) {
        all_registered_ = change.all_registered = true;
        registered_at_ = now.steady;
    }
    if (all_registered && all_in_loop && !in_loop_) {
        in_loop_ = change.in_loop = true;
        log(fx, JobRunning{job.attempt.index, job.attempt.kind, round3(ms_between(attempt_start_, now.steady)),
                           round3(ms_between(attempt_start_, registered_at_))});
    }
    if (all_registered) {
        std::int64_t least = -1;
        for (const auto& role : job.layout.active_roles) {
            const std::int64_t tag = current.at(role)->step_tag;
            if (tag >= 0) least = least < 0 ? tag : std::min(least, tag);
        }
        if (least >= 0) tag_steps_ = least;
    }
    // Job-level stall: no active role's step tag moved for the stall limit. A stretch in which
    // the launcher itself did not run (as the controller, RankTracker::check) does not count.
    if (last_stall_check_ != SteadyTime{} && now.steady - last_stall_check_ > milliseconds(cfg_.detection.hang_timeout_ms / 2))
        last_progress_time_ = std::min(now.steady, last_progress_time_ + (now.steady - last_stall_check_));
    last_stall_check_ = now.steady;
    for (const auto& role : job.layout.active_roles)
        if (const auto it = current.find(role); it != current.end()) {
            auto& last = last_tags_[role];
            if (it->second->step_tag != last) {
                last = it->second->step_tag;
                last_progress_time_ = now.steady;
            }
        }
    check_ranks_gone(job, now, change, fx);
    check_startup(current, job, now, change, fx);
    const auto stall_limit = timeouts_of(cfg_).stall_limit;
    if (in_loop_ && job.phase == JobPhase::running && now.steady - last_progress_time_ > stall_limit) {
        const std::string detail = "no role's step tag moved for " +
                                   human_ms(ms_between(last_progress_time_, now.steady)) + " (limit " +
                                   human_ms(static_cast<double>(stall_limit.count())) + ")";
        change.stalled = ForcedDeath{{Observed::job_stalled, 0}, detail, last_progress_time_};
        say(fx, "the job is stalled: " + detail + "; ending it");
    }
    return change;
}

void JobProgress::check_startup(const std::map<std::string, const RankInfo*>& current, const JobView& job, Now now,
                                Change& change, Effects& fx) const {
    // A launch whose ranks never all reach the control plane (a node that cannot start its
    // processes, MPI_Init waiting for one) would otherwise wait for Slurm's time limit: nothing
    // else watches a rank that never registered.
    const auto limit = timeouts_of(cfg_).startup_limit;
    if (all_registered_ || job.phase != JobPhase::running || now.steady - attempt_start_ <= limit) return;
    std::map<std::string, std::vector<std::string>> missing;  // node -> roles
    std::size_t count = 0;
    for (const auto& role : job.layout.active_roles)
        if (!current.count(role)) {
            missing[job.layout.node_of_role(role)].push_back(role);
            ++count;
        }
    std::string where;
    for (const auto& [node, roles] : missing)
        where += (where.empty() ? "" : "; ") + node + ": " + std::to_string(roles.size()) + " of " +
                 std::to_string(job.layout.ranks_on_node(node));
    const std::string detail = std::to_string(count) + " of " + std::to_string(job.layout.active_roles.size()) +
                               " active roles did not register within " +
                               human_ms(static_cast<double>(limit.count())) + " of the launch (" + where + ")";
    change.stalled = ForcedDeath{{Observed::startup_stuck, 0}, detail, attempt_start_ + limit};
    const auto active = static_cast<std::int64_t>(job.layout.active_roles.size());
    log(fx, StartupStuck{job.attempt.index, limit.count(), active - static_cast<std::int64_t>(count), active, missing});
    say(fx, "the job did not start: " + detail + "; ending it (detection.startup_timeout_ms)");
}

void JobProgress::check_ranks_gone(const JobView& job, Now now, Change& change, Effects& fx) {
    // A bounded end (issue 15, case 10): every process of this attempt that ever registered has
    // left (BYE) or was lost, and the roles were all there once; mpirun gets kMpirunEndGrace.
    // Not so when the ranks ended the attempt themselves (an ending_job record: a job death) and
    // every process is accounted for: it sent its last record before its connection closed, it
    // is a process of this host that is gone, or its connection was lost and the others'
    // ending_job records name its role dead (under srun a killed node's task kept srun waiting
    // out the grace). Then nothing is left for mpirun to wait for
    // (issue 46: a warm relaunch waited out the grace). A finished job keeps the grace: mpirun's
    // own exit forwards the ranks' last output, which is then the user's result.
    if (!all_registered_ || job.phase != JobPhase::running) return;
    bool any = false, all_gone = true, all_accounted = true, ended_by_ranks = false;
    for (const auto& r : job.ranks) {
        if (r.registered_at < attempt_start_) continue;
        any = true;
        if (r.status == RankStatus::active) all_gone = false;
        // A lost connection is not a dead process: where the process can be seen, it must be gone.
        if (r.status == RankStatus::lost && job.alive_here(r.hostname, r.pid)) all_gone = false;
        const auto record = last_records_.find(r.pid);
        if (record != last_records_.end()) ended_by_ranks |= record->second == LastRecord::ending_job;
        // Lost, and named dead by the others: its node may be gone, and with it any record.
        else if (r.status == RankStatus::lost && named_lost_.count(r.role)) continue;
        // pids_to_watch covers every process of this host whose connection closed.
        else if (r.hostname != job.local_host || job.alive_here(r.hostname, r.pid)) all_accounted = false;
    }
    if (!any || !all_gone) {
        ranks_gone_since_.reset();
        return;
    }
    if (!ranks_gone_since_) ranks_gone_since_ = now.steady;
    const bool nothing_to_wait_for = all_accounted && ended_by_ranks;
    if (!nothing_to_wait_for && now.steady - *ranks_gone_since_ < kMpirunEndGrace) return;
    change.mpirun_lingers = true;
    const auto grace = nothing_to_wait_for ? milliseconds(0) : kMpirunEndGrace;
    log(fx, MpirunLingered{job.attempt.index, job.attempt.pid, nothing_to_wait_for ? kEndedAccountedFor : kEndedAfterGrace,
                           grace.count(), round3(ms_between(*ranks_gone_since_, now.steady))});
    if (nothing_to_wait_for)
        say(fx, "every process of the attempt sent its last record and left, or is gone; ending mpirun (pid " +
                    std::to_string(job.attempt.pid) + "), which has nothing left to wait for");
    else
        say(fx, "every rank has left, but mpirun (pid " + std::to_string(job.attempt.pid) + ") did not exit within " +
                    human_ms(static_cast<double>(kMpirunEndGrace.count())) + "; ending it");
}

double JobProgress::step_seconds() const {
    if (rate_window_.size() < 2) return 0;
    const double dt = ms_between(rate_window_.front().first, rate_window_.back().first) / 1000;
    const auto ds = rate_window_.back().second - rate_window_.front().second;
    return dt > 0 && ds > 0 ? dt / static_cast<double>(ds) : 0;
}

std::string JobProgress::rate_text() const {
    const double seconds = step_seconds();
    if (seconds <= 0) return "-";
    char rate[32];
    std::snprintf(rate, sizeof rate, "%.1f", 1.0 / seconds);
    return rate;
}

double JobProgress::overall_steps_per_second() const {
    if (!first_step_seen_ || !last_step_seen_) return 0;
    const double dt = ms_between(first_step_seen_->first, last_step_seen_->first) / 1000;
    const auto ds = last_step_seen_->second - first_step_seen_->second;
    return dt > 0 && ds > 0 ? static_cast<double>(ds) / dt : 0;
}

double JobProgress::median_step_ms() const {
    if (rate_window_.size() < 2) return 0;
    const double dt = ms_between(rate_window_.front().first, rate_window_.back().first);
    const auto ds = rate_window_.back().second - rate_window_.front().second;
    return ds > 0 ? dt / static_cast<double>(ds) : 0;
}

std::optional<std::string> JobProgress::progress_line(bool force, Now now, int spares, const std::string& last_recovery) {
    if (!cfg_.logging.progress && !force) return std::nullopt;
    if (force && last_step_ == last_printed_step_) return std::nullopt;
    if (!force && (now.steady - last_print_ < kProgressEvery || last_step_ == last_printed_step_)) return std::nullopt;
    if (last_step_ < 0 && !force) return std::nullopt;
    last_print_ = now.steady;
    last_printed_step_ = last_step_;
    char loss[32] = "-";
    if (!std::isnan(last_loss_)) std::snprintf(loss, sizeof loss, "%.6g", last_loss_);
    char line[512];
    std::snprintf(line, sizeof line, "step %lld/%lld  loss %s  %s steps/s  spares %d  last recovery: %s",
                  static_cast<long long>(steps_completed()), static_cast<long long>(cfg_.job.steps), loss,
                  rate_text().c_str(), spares, last_recovery.c_str());
    return std::string(line);
}

}  // namespace flashrec::launcher
