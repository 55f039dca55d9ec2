// The job's progress: steps and loss from the leader's step records, the roles' step tags, the
// current attempt's way up (registered, in the step loop), the job-level stall, mpirun lingering
// after every rank left, and the roles' role_finished records, from which alone the job is
// judged finished. Pure: time passed in, effects returned.
#pragma once
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "flashrec/ft/records.hpp"
#include "job_effects.hpp"
#include "job_view.hpp"

namespace flashrec::launcher {

// The current process of each role that registered in this attempt.
std::map<std::string, const RankInfo*> current_ranks(const std::vector<RankInfo>& ranks, SteadyTime attempt_start);

class JobProgress {
public:
    explicit JobProgress(const config::Config& cfg) : cfg_(cfg) {}

    void new_attempt(SteadyTime start);
    void on(const ft::records::Step& step, Now now);
    void on(const ft::records::RoleFinished& finished) {
        finished_[finished.role] = finished.steps;
        last_records_[finished.pid] = LastRecord::role_finished;
    }
    void on(const ft::records::EndingJob& ending) {
        last_records_[ending.pid] = LastRecord::ending_job;
        named_lost_.insert(ending.lost_roles.begin(), ending.lost_roles.end());
    }
    void on(const ft::records::SpareReleased& released) { last_records_[released.pid] = LastRecord::spare_released; }

    // The finish rule: every active role of this attempt sent role_finished with steps == job.steps
    // (docs/launcher.md, "When the job is finished"). Nothing else counts: not mpirun's status,
    // not BYEs, not how soon anything arrived.
    bool finished(const std::vector<std::string>& active_roles) const;

    // What a look at the ranks found (see observe()).
    struct Change {
        bool all_registered = false;  // every active role registered, just now
        bool in_loop = false;         // ... and is in its step loop, just now
        std::optional<ForcedDeath> stalled;  // no role's step tag moved for the stall limit, or the
                                             // active roles did not all register within the startup limit
        bool mpirun_lingers = false;         // every rank left, and mpirun has nothing left to wait for
    };
    // The controller's view while mpirun runs.
    Change observe(const std::map<std::string, const RankInfo*>& current, const JobView& job, Now now, Effects& fx);

    std::int64_t last_step() const { return last_step_; }
    std::int64_t steps_completed() const { return std::max(last_step_ + 1, tag_steps_); }
    double loss() const { return last_loss_; }
    bool progressed() const { return progressed_; }  // a step completed in this attempt
    bool all_registered() const { return all_registered_; }
    SteadyTime registered_at() const { return registered_at_; }
    // Mean step time over the last few seconds (0 when unknown), and steps per second as text.
    double step_seconds() const;
    std::string rate_text() const;
    // Steps per second from the job's first step record to its last (recoveries and relaunches
    // included; 0 before two records with distinct times).
    double overall_steps_per_second() const;
    double median_step_ms() const;  // from the step rate (the leader's job_stats is better)
    // The progress line, when one is due (`force`: at the end, if the step changed).
    std::optional<std::string> progress_line(bool force, Now now, int spares, const std::string& last_recovery);

private:
    void check_ranks_gone(const JobView& job, Now now, Change& change, Effects& fx);
    void check_startup(const std::map<std::string, const RankInfo*>& current, const JobView& job, Now now,
                       Change& change, Effects& fx) const;

    const config::Config& cfg_;
    SteadyTime attempt_start_{};
    std::int64_t last_step_ = -1;  // newest completed step index seen (step records)
    double last_loss_ = NAN;
    bool progressed_ = false;
    std::deque<std::pair<SteadyTime, std::int64_t>> rate_window_;
    std::int64_t tag_steps_ = 0;  // steps completed by every active role, from their step tags
    std::map<std::string, std::int64_t> last_tags_;
    SteadyTime last_progress_time_{};  // any role's tag moved
    SteadyTime last_stall_check_{};    // a longer gap than usual: this process was paused
    bool all_registered_ = false;
    SteadyTime registered_at_{};
    bool in_loop_ = false;
    std::optional<SteadyTime> ranks_gone_since_;  // every rank of the attempt said BYE or was lost
    std::map<std::string, std::int64_t> finished_;  // role -> steps of its role_finished (this attempt)
    // A process's last record before it leaves (this attempt): once every process of the attempt
    // sent one and closed its connection, or is known dead, nothing is left for mpirun to wait for.
    enum class LastRecord : std::uint8_t { role_finished, ending_job, spare_released };
    std::map<std::int32_t, LastRecord> last_records_;  // pid -> its last record
    // The roles the ranks' ending_job records name as dead (ULFM agreed they failed): such a
    // process is accounted for without a record, wherever it ran (a killed node sends none).
    std::set<std::string> named_lost_;
    std::optional<std::pair<SteadyTime, std::int64_t>> first_step_seen_, last_step_seen_;  // the whole job's
    SteadyTime last_print_{};
    std::int64_t last_printed_step_ = -2;
};

}  // namespace flashrec::launcher
