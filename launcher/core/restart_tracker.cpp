#include "restart_tracker.hpp"

#include "timeouts.hpp"

#include <algorithm>

namespace flashrec::launcher {

int RestartTracker::begin(const RestartStart& start, Now now) {
    Current c;
    c.start = start;
    c.number = start.kind == Restart::warm_relaunch ? ++warm_used_ : ++cold_used_;
    c.died = now.wall - std::chrono::duration_cast<WallClock::duration>(now.steady - start.first_evidence);
    current_ = std::move(c);
    return current_->number;
}

double RestartTracker::ranks_restore_ms(const nlohmann::json& rank_record) {
    // The ranks' own time from their plan to their loop (the slowest rank per phase): what the
    // launcher's window from "every role registered" to "every role in its loop" measures, when
    // both fell between two of its looks (the roles' first step arrived before a tick saw them
    // registered, on a busy machine).
    const nlohmann::json* phases = rank_record.contains("phases_ms_max") ? &rank_record["phases_ms_max"]
                                   : rank_record.contains("phases_ms")   ? &rank_record["phases_ms"]
                                                                         : nullptr;
    if (phases == nullptr || !phases->is_object()) return -1;
    double ms = 0;
    bool any = false;
    for (const char* phase : {"exchange", "restore", "resumed"})
        if (phases->contains(phase) && (*phases)[phase].is_number()) {
            ms += (*phases)[phase].get<double>();
            any = true;
        }
    return any ? ms : -1;
}

void RestartTracker::registered(double launch_ms, Now now) {
    if (!pending()) return;
    current_->launch_ms = launch_ms;
    current_->registered_at = now.steady;
}

void RestartTracker::back_in_loop(double restore_ms, Now now) {
    if (!pending() || current_->resumed_at) return;
    current_->restore_ms = restore_ms;
    current_->resumed_at = now.steady;
}

void RestartTracker::on_step(Now now) {
    if (!pending()) return;
    // A step needs every role: they are back in the loop even if no tick saw them there (a
    // relaunch whose few remaining steps ran between two looks once left its record without total_ms).
    if (current_->resumed_at) {
        if (!current_->first_step_at) current_->first_step_at = now.steady;
        return;
    }
    current_->resumed_at = now.steady;
    if (current_->registered_at) current_->restore_ms = ms_between(*current_->registered_at, now.steady);
}

bool RestartTracker::take_rank_record(const nlohmann::json& record) {
    if (!wants_rank_record()) return false;
    current_->rank_record = record;
    return true;
}

std::optional<RestartDone> RestartTracker::on_tick(int attempt, Now now, Effects& fx) {
    if (!pending() || !current_->resumed_at) return std::nullopt;
    if ((current_->rank_record && current_->first_step_at) || now.steady - *current_->resumed_at > kRelaunchRecordWait)
        return finalize(false, attempt, now, fx);
    return std::nullopt;
}

std::optional<RestartDone> RestartTracker::finalize(bool failed, int attempt, Now now, Effects& fx) {
    if (!pending()) return std::nullopt;
    auto& r = *current_;
    r.logged = true;
    if (!failed && !r.resumed_at) r.resumed_at = now.steady;
    const bool warm = r.start.kind == Restart::warm_relaunch;
    const double detect_ms = std::max(0.0, ms_between(r.start.first_evidence, r.start.detect_end));
    const double teardown_ms = ms_between(r.start.detect_end, r.start.teardown_end);
    RestartFigures fig;
    fig.phases_ms.detect = round3(detect_ms);
    fig.phases_ms.teardown = round3(teardown_ms);
    if (r.launch_ms >= 0) fig.phases_ms.launch = round3(r.launch_ms);
    if (r.restore_ms < 0 && r.rank_record) r.restore_ms = ranks_restore_ms(*r.rank_record);
    if (r.restore_ms >= 0) fig.phases_ms.restore = round3(r.restore_ms);
    if (r.resumed_at && r.first_step_at) fig.phases_ms.resumed = round3(ms_between(*r.resumed_at, *r.first_step_at));
    fig.tier = warm ? 2 : 3;
    fig.attempt = attempt;
    fig.reason = r.start.reason;
    fig.outcome = failed ? "failed" : "resumed";
    fig.steps_done_before = r.start.steps_done_before;
    fig.died_unix_ms = unix_ms(r.died);
    fig.checkpoint_step = r.start.checkpoint_step;
    const double total = r.resumed_at ? ms_between(r.start.first_evidence, *r.resumed_at) : -1;
    if (total >= 0) {
        fig.total_ms = round3(total);
        fig.resumed_unix_ms = unix_ms(r.died) + static_cast<std::int64_t>(total);
    }
    std::int64_t restored = -1;
    if (r.rank_record) {
        fig.rank_record = *r.rank_record;
        restored = r.rank_record->value("recovery_version", std::int64_t{-1});
    } else if (r.start.checkpoint_step) {
        restored = *r.start.checkpoint_step;
    }
    std::int64_t replayed = 0;
    if (restored >= 0) {
        replayed = std::max<std::int64_t>(0, r.start.steps_done_before - restored);
        fig.restored_version = restored;
        fig.steps_replayed = replayed;
    }
    if (warm) log(fx, WarmRelaunch{r.number, warm_allowed_, std::move(fig)});
    else log(fx, ColdRestart{r.number, std::move(fig)});
    costs_.push_back({replayed, std::max(0.0, total)});
    if (failed || total < 0) return std::nullopt;
    RestartDone done{warm ? 2 : 3, total,
                     (warm ? "warm relaunch " : "HDF5 restart ") + std::to_string(r.number) + " in " + human_ms(total) +
                         (restored >= 0 ? ", resumed at step " + std::to_string(restored) : std::string()),
                     r.start.incident, r.start.recovered_by};
    say(fx, "RECOVERED (tier " + std::to_string(done.tier) + "): " + done.text + " [detect " + human_ms(detect_ms) +
                ", teardown " + human_ms(teardown_ms) + ", launch " + human_ms(r.launch_ms) + ", restore " +
                human_ms(r.restore_ms) + "]");
    return done;
}

}  // namespace flashrec::launcher
