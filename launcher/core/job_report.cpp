#include "job_report.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "flashrec/runtime/interval_choice.hpp"

namespace flashrec::launcher {

std::string render_metrics(const JobMetrics& m, const std::string& job_name) {
    const std::string job = "{job=\"" + job_name + "\"";
    std::ostringstream out;
    auto metric = [&](const char* name, const char* type, const char* help, double value) {
        out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
            << name << job << "} " << value << "\n";
    };
    metric("flashrec_up", "gauge", "1 while flashrec-launch supervises the job", 1);
    metric("flashrec_steps_completed", "counter", "Training steps completed (newest step reported + 1)",
           static_cast<double>(m.steps));
    metric("flashrec_step_seconds", "gauge", "Mean wall time per step over the last few seconds", m.step_seconds);
    if (!std::isnan(m.loss)) metric("flashrec_loss", "gauge", "Newest loss the trainer reported", m.loss);
    metric("flashrec_failures_total", "counter", "Failure incidents seen (hangs, lost ranks, job deaths)",
           static_cast<double>(m.failures));
    out << "# HELP flashrec_recoveries_total Recoveries completed, by tier (1 in-job, 2 warm relaunch, 3 HDF5)\n"
        << "# TYPE flashrec_recoveries_total counter\n";
    for (int tier : {1, 2, 3}) {
        const auto it = m.recoveries.find(tier);
        out << "flashrec_recoveries_total" << job << ",tier=\"" << tier << "\"} "
            << (it == m.recoveries.end() ? 0 : it->second) << "\n";
    }
    metric("flashrec_last_recovery_seconds", "gauge", "Duration of the newest recovery", m.last_recovery_seconds);
    metric("flashrec_spares_left", "gauge", "Hot spares parked and registered", m.spares_left);
    metric("flashrec_ranks_active", "gauge", "Active ranks connected to the control plane", m.ranks_active);
    metric("flashrec_warm_relaunches_total", "counter", "Warm relaunches started (tier 2)",
           static_cast<double>(m.warm_relaunches));
    metric("flashrec_cold_restarts_total", "counter", "Restarts from HDF5 started (tier 3)",
           static_cast<double>(m.cold_restarts));
    metric("flashrec_steps_replayed_total", "counter", "Steps computed twice because of failures",
           static_cast<double>(m.steps_replayed));
    metric("flashrec_heartbeats_total", "counter", "Heartbeats the controller accepted", static_cast<double>(m.heartbeats));
    out << "# HELP flashrec_control_plane_drops_total Connections the controller dropped, by reason\n"
        << "# TYPE flashrec_control_plane_drops_total counter\n";
    for (std::size_t i = 0; i < kDropReasonCount; ++i)
        out << "flashrec_control_plane_drops_total" << job << ",reason=\"" << to_string(static_cast<DropReason>(i))
            << "\"} " << m.drops[i] << "\n";
    return out.str();
}

std::string JobReport::on_in_job_recovery(const ft::records::Recovery& r, Effects& fx) {
    std::string roles;
    for (const auto& role : r.failed_roles) roles += (roles.empty() ? "" : ",") + role;
    last_recovery_text_ = "tier " + std::to_string(r.tier) + ": " + (roles.empty() ? "?" : roles) + " -> " +
                          r.replacement + " in " + human_ms(r.total_ms) + ", resumed at step " +
                          std::to_string(r.resume_step) + " (" + std::to_string(r.steps_replayed) + " step" +
                          (r.steps_replayed == 1 ? "" : "s") + " replayed)";
    say(fx, "RECOVERED " + last_recovery_text_);
    ++metrics_.recoveries[r.tier];
    metrics_.last_recovery_seconds = r.total_ms / 1000;
    metrics_.steps_replayed += r.steps_replayed;
    return "in-job tier " + std::to_string(r.tier) + " (" + r.replacement + ")";
}

void JobReport::on(const ft::records::CheckpointPublished& c, Effects& fx) {
    ++checkpoints_;
    say(fx, "checkpoint: step " + std::to_string(c.step) + " published in " + c.path);
}

void JobReport::restart_done(int tier, double total_ms, const std::string& text) {
    last_recovery_text_ = text;
    ++metrics_.recoveries[tier];
    metrics_.last_recovery_seconds = total_ms / 1000;
}

void JobReport::observe(const std::vector<RankInfo>& ranks, bool all_registered, std::uint64_t heartbeats,
                        const std::array<std::uint64_t, kDropReasonCount>& drops) {
    int spares = 0, active = 0;
    for (const auto& r : ranks) {
        if (r.status != RankStatus::active) continue;
        if (r.role.rfind("spare:", 0) == 0) ++spares;
        else ++active;
    }
    if (all_registered) metrics_.spares_left = spares;
    metrics_.ranks_active = active;
    metrics_.heartbeats = heartbeats;
    metrics_.drops = drops;
}

void JobReport::progress(std::int64_t steps, double loss, double step_seconds, std::size_t failures) {
    metrics_.steps = steps;
    metrics_.loss = loss;
    if (step_seconds > 0) metrics_.step_seconds = step_seconds;
    metrics_.failures = failures;
}

namespace {

std::string fixed(double value, int digits) {
    char text[64];
    std::snprintf(text, sizeof text, "%.*f", digits, value);
    return text;
}

}  // namespace

std::optional<JobReport::ProtectionFigures> JobReport::protection_figures() const {
    if (!job_stats_ || !job_stats_->protection) return std::nullopt;
    const auto& s = *job_stats_;
    ProtectionFigures f;
    f.every = s.protection_every;
    f.automatic = s.protection_auto;
    f.step_ms = s.unprotected_step_ms.value_or(s.median_step_ms);
    if (s.unprotected_step_ms && s.protected_step_ms)
        f.exposed_ms = std::max(0.0, *s.protected_step_ms - *s.unprotected_step_ms);
    double restore = 0;
    int repairs = 0;
    for (const auto& r : recoveries_)
        if (r.replacement != "relaunch") restore += r.total_ms, ++repairs;
    if (repairs) f.restore_ms = restore / repairs;
    f.cost = runtime::failure_cost({f.every, f.step_ms, f.exposed_ms.value_or(0), f.restore_ms.value_or(0)});
    return f;
}

void JobReport::summary(const JobEnding& end, const std::vector<Incident>& incidents,
                        const std::vector<RestartCost>& restarts, SteadyTime job_start, Effects& fx) {
    std::vector<HangSpan> hangs;
    for (const auto& i : incidents)
        if (i.hang) {
            const double at = ms_between(job_start, i.at);
            hangs.push_back({at - (i.since_injection_ms >= 0 ? i.since_injection_ms : i.detection_latency_ms), at});
        }
    const ReportTotals t = report_totals(recoveries_, restarts, std::move(hangs),
                                         job_stats_ ? job_stats_->median_step_ms : end.median_step_ms);
    metrics_.time_lost_seconds = t.lost_ms() / 1000;
    JobEnd record;
    record.outcome = end.outcome;
    record.exit_code = end.exit_code;
    record.message = end.message;
    record.wall_s = round3(end.wall_ms / 1000);
    record.steps_completed = end.steps_completed;
    record.steps = end.steps;
    record.steps_per_s = round3(end.steps_per_second);
    record.failures = static_cast<std::int64_t>(incidents.size());
    for (const auto& i : incidents)
        record.incidents.push_back({i.id, i.role, std::string(i.rule->classification), i.recovered_by});
    record.replacements_in_job = t.in_job;
    record.hot_spares_used = t.hot;
    record.spawned = t.spawned;
    record.warm_relaunches = end.warm_relaunches;
    record.cold_restarts = end.cold_restarts;
    record.steps_replayed = t.steps_replayed;
    record.time_lost_ms = {round3(t.lost_ms()), round3(t.hang_ms), round3(t.recovery_ms), round3(t.restart_ms),
                           round3(t.replay_ms)};
    record.checkpoints = static_cast<std::int64_t>(checkpoints_);
    log(fx, std::move(record));
    const auto protection = protection_figures();
    if (protection) {
        const auto& c = protection->cost;
        ExpectedFailureCost figures;
        figures.protection_every = protection->every;
        figures.protection_auto = protection->automatic;
        figures.interval_changes = static_cast<std::int64_t>(interval_changes_);
        auto& cost = figures.estimate;
        cost.expected_replayed_steps = c.expected_replayed_steps;
        cost.worst_replayed_steps = c.worst_replayed_steps;
        cost.step_ms = round3(protection->step_ms);
        cost.expected_ms = round3(c.expected_ms);
        cost.worst_ms = round3(c.worst_ms);
        if (protection->restore_ms) cost.restore_ms = round3(*protection->restore_ms);
        if (protection->exposed_ms) {
            cost.snapshot_exposed_ms = round3(*protection->exposed_ms);
            cost.overhead_ms_per_step = round3(c.overhead_ms_per_step);
            cost.saved_ms_per_step = round3(c.saved_ms_per_step);
            if (c.break_even_steps) cost.break_even_steps = round3(*c.break_even_steps);
        }
        log(fx, std::move(figures));
    }

    say(fx, "------------------------------------------------------------------");
    char rate[64] = "";
    if (end.steps_per_second > 0) std::snprintf(rate, sizeof rate, ", %.1f steps/s", end.steps_per_second);
    say(fx, "job " + end.job_name + ": " + end.outcome + ", " + std::to_string(end.steps_completed) + "/" +
                std::to_string(end.steps) + " steps in " + human_ms(end.wall_ms) + rate + " (exit code " +
                std::to_string(end.exit_code) + ")");
    if (!end.message.empty()) say(fx, "  " + end.message);
    say(fx, "failures        " + std::to_string(incidents.size()));
    for (const auto& i : incidents) {
        const std::string who = i.role != "*" ? i.role : !i.node.empty() ? "node " + i.node : std::string("the MPI job");
        std::string line = "  #" + std::to_string(i.id) + " " + who +
                           (i.pid > 0 ? " (pid " + std::to_string(i.pid) + ")" : "") +
                           (i.step >= 0 ? " at step " + std::to_string(i.step) : "") + ": " +
                           std::string(i.rule->classification) + " -> " + std::string(to_string(i.rule->action));
        if (i.hang)
            line += (i.kill == KillOutcome::killed ? ", killed after " : ", found after ") +
                    human_ms(i.since_injection_ms >= 0 ? i.since_injection_ms : i.detection_latency_ms) +
                    (i.kill == KillOutcome::killed ? "" : " (not killed: " + std::string(to_string(i.kill)) + ")");
        if (!i.recovered_by.empty())
            line += "; recovered by " + i.recovered_by + (i.recovery_ms >= 0 ? " in " + human_ms(i.recovery_ms) : "");
        else if (!i.tried.empty())
            line += "; " + i.tried;
        say(fx, line);
    }
    say(fx, "replacements    " + std::to_string(t.in_job) + " in-job (" + std::to_string(t.hot) + " hot spare, " +
                std::to_string(t.spawned) + " spawned); " + std::to_string(end.warm_relaunches) +
                " warm relaunch(es); " + std::to_string(end.cold_restarts) + " HDF5 restart(s)");
    say(fx, "time lost       " + human_ms(t.lost_ms()) + " (hang detection " + human_ms(t.hang_ms) +
                ", in-job recovery " + human_ms(t.recovery_ms) + ", relaunch " + human_ms(t.restart_ms) +
                ", replayed steps " + human_ms(t.replay_ms) + ")");
    say(fx, "steps replayed  " + std::to_string(t.steps_replayed));
    if (protection) {
        const auto& c = protection->cost;
        std::string line = "protection      every " + (protection->every == 1 ? std::string("step") : std::to_string(protection->every) + " steps");
        if (protection->automatic)
            line += " (protection.every = auto: " + std::to_string(interval_changes_) + " change(s)" +
                    (last_interval_ ? ", the last at step " + std::to_string(last_interval_->step) + ": " + last_interval_->reason
                                    : std::string()) + ")";
        say(fx, line);
        say(fx, "failure cost    " + fixed(c.expected_replayed_steps, 1) + " steps replayed x " + fixed(protection->step_ms, 3) +
                    " ms + restore " + (protection->restore_ms ? human_ms(*protection->restore_ms) : std::string("(not measured: no in-job repair)")) +
                    " = " + human_ms(c.expected_ms) + " expected per failure (worst " +
                    std::to_string(c.worst_replayed_steps) + " steps: " + human_ms(c.worst_ms) + ")");
        if (protection->exposed_ms)
            say(fx, "                protection " + fixed(c.overhead_ms_per_step, 3) + " ms/step at k = " +
                        std::to_string(protection->every) + " against " + fixed(c.every_step_ms_per_step, 3) +
                        " ms/step at k = 1" +
                        (c.break_even_steps ? ": saves " + fixed(c.saved_ms_per_step, 3) +
                                                  " ms/step, more than its replays cost while failures are over " +
                                                  fixed(*c.break_even_steps, 0) + " steps apart"
                                            : std::string()));
        else
            say(fx, "                the step without a snapshot was not measured (every step snapshots at k = 1): "
                    "protection.every = auto or k > 1 measures it");
    }
    if (checkpoints_) say(fx, "checkpoints     " + std::to_string(checkpoints_));
    say(fx, "event log       " + end.events_path);
}

}  // namespace flashrec::launcher
