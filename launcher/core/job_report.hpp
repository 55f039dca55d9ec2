// What the launcher reports about the job: the figures behind GET /metrics, the in-job
// recoveries and checkpoints the ranks announced, and the summary at the end (the job_end record
// and the lines for people). Pure: effects returned; the shell publishes metrics() to the
// metrics server's thread.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rank_view.hpp"
#include "flashrec/ft/records.hpp"
#include "flashrec/runtime/interval_choice.hpp"
#include "failure_record.hpp"
#include "job_effects.hpp"
#include "job_time.hpp"
#include "recovery_figures.hpp"
#include "death_policy.hpp"

namespace flashrec::launcher {

// The figures of GET /metrics (docs/launcher.md, "Metrics").
struct JobMetrics {
    std::int64_t steps = 0;
    double step_seconds = 0;
    double loss = NAN;
    std::uint64_t failures = 0;
    std::map<int, std::uint64_t> recoveries;  // by tier
    double last_recovery_seconds = 0;
    int spares_left = 0;
    int ranks_active = 0;
    std::uint64_t warm_relaunches = 0, cold_restarts = 0;
    std::uint64_t heartbeats = 0;
    std::array<std::uint64_t, kDropReasonCount> drops{};
    std::int64_t steps_replayed = 0;
    double time_lost_seconds = 0;
};
// The Prometheus text exposition of `m` for job `job`.
std::string render_metrics(const JobMetrics& m, const std::string& job);

// What the summary needs besides the report's own records.
struct JobEnding {
    std::string job_name;
    std::string outcome;
    int exit_code = 1;
    std::string message;
    double wall_ms = 0;
    std::int64_t steps_completed = 0, steps = 0;
    int warm_relaunches = 0, cold_restarts = 0;
    double median_step_ms = 0;  // from the step rate, when the leader sent no job_stats
    double steps_per_second = 0;  // from the first step record to the last (0: fewer than two)
    std::string events_path;
};

class JobReport {
public:
    explicit JobReport(int hot_spares) { metrics_.spares_left = hot_spares; }

    // Every recovery record of the ranks (those of a relaunch are counted through the restart's).
    void on(const ft::records::Recovery& r) { recoveries_.push_back(r); }
    // An in-job recovery: says RECOVERED, counts it. Returns its `by` text for the incidents.
    std::string on_in_job_recovery(const ft::records::Recovery& r, Effects& fx);
    void on(const ft::records::CheckpointPublished& c, Effects& fx);
    void on(const ft::records::JobStats& stats) { job_stats_ = stats; }
    // protection.every = auto chose a k: another one, or its first measured choice after a
    // start or repair, which may keep it (the summary says the last choice and why).
    void on(const ft::records::ProtectionInterval& interval) {
        if (interval.every != interval.previous) ++interval_changes_;
        last_interval_ = interval;
    }
    void restart_done(int tier, double total_ms, const std::string& text);
    void restart_started(Restart kind) { ++(kind == Restart::warm_relaunch ? metrics_.warm_relaunches : metrics_.cold_restarts); }
    // The controller's view and the job's progress, as of a tick.
    void observe(const std::vector<RankInfo>& ranks, bool all_registered, std::uint64_t heartbeats,
                 const std::array<std::uint64_t, kDropReasonCount>& drops);
    void progress(std::int64_t steps, double loss, double step_seconds, std::size_t failures);

    const JobMetrics& metrics() const { return metrics_; }
    const std::string& last_recovery() const { return last_recovery_text_; }
    // The job_end record and the summary lines (docs/launcher.md, "Summary at exit").
    void summary(const JobEnding& end, const std::vector<Incident>& incidents, const std::vector<RestartCost>& restarts,
                 SteadyTime job_start, Effects& fx);

    // What protection cost and what a failure costs under it, from the leader's job_stats and
    // the in-job repairs (nullopt: no job_stats, or protection off).
    struct ProtectionFigures {
        std::int64_t every = 1;
        bool automatic = false;
        double step_ms = 0;                  // a step without a snapshot (else the median step)
        std::optional<double> exposed_ms;    // what a snapshot adds to its step (k > 1 only)
        std::optional<double> restore_ms;    // the mean in-job repair (none: no failure)
        runtime::FailureCost cost;
    };
    std::optional<ProtectionFigures> protection_figures() const;

private:
    std::vector<ft::records::Recovery> recoveries_;
    std::size_t checkpoints_ = 0;
    std::optional<ft::records::JobStats> job_stats_;
    std::size_t interval_changes_ = 0;
    std::optional<ft::records::ProtectionInterval> last_interval_;
    std::string last_recovery_text_ = "none";
    JobMetrics metrics_;
};

}  // namespace flashrec::launcher
