// The restart tracker: the warm relaunches (tier 2) and HDF5 restarts (tier 3) this launch has
// used, and the one under way, from its decision to every role back in the step loop, when its
// warm_relaunch / cold_restart record is written with its phases and total_ms. Pure: time passed
// in, effects returned. docs/launcher.md, "Warm relaunch (tier 2)".
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "job_effects.hpp"
#include "job_time.hpp"
#include "recovery_figures.hpp"
#include "death_policy.hpp"

namespace flashrec::launcher {

// What the launcher knew when it decided to restart.
struct RestartStart {
    Restart kind = Restart::warm_relaunch;
    RestartReason reason;
    SteadyTime first_evidence{};        // the first sign of the failure
    SteadyTime detect_end{};            // when the launcher began tearing the dead job down
    SteadyTime teardown_end{};
    std::int64_t steps_done_before = 0;  // steps completed before the job died
    std::optional<std::int64_t> checkpoint_step;  // an HDF5 restart's
    int incident = 0;              // the job's death it answers
    std::string recovered_by;      // what that incident says once this restart completed
};

// A restart that completed: for the report and the metrics.
struct RestartDone {
    int tier = 2;
    double total_ms = 0;
    std::string text;  // "warm relaunch 1 in 1.23 s, resumed at step 40"
    int incident = 0;           // RestartStart's: only a restart that completed recovered it
    std::string recovered_by;
};

class RestartTracker {
public:
    explicit RestartTracker(int warm_allowed) : warm_allowed_(warm_allowed) {}

    int warm_used() const { return warm_used_; }
    int cold_used() const { return cold_used_; }
    // A restart begins (the budget is counted); returns its number.
    int begin(const RestartStart& start, Now now);
    // One is under way: its record is not written yet.
    bool pending() const { return current_ && !current_->logged; }

    // The relaunched attempt: every active role registered at `now`, `launch_ms` after the start;
    // every role in its step loop at `now`, `restore_ms` after registering.
    void registered(double launch_ms, Now now);
    void back_in_loop(double restore_ms, Now now);
    // A step completed: the roles are back in the loop if that was not seen yet (its restore
    // phase then ends here).
    void on_step(Now now);
    // The ranks' own record of the relaunch (or of a restart): true when it belongs to the
    // restart under way (embedded in its record as rank_record).
    bool take_rank_record(const nlohmann::json& record);
    bool wants_rank_record() const { return current_ && !current_->rank_record; }
    // Writes the record once the ranks' record and a step arrived, or a while after resuming.
    std::optional<RestartDone> on_tick(int attempt, Now now, Effects& fx);
    // Writes the record now. A restart that did not fail completed: it has its total_ms (from the
    // first evidence to the roles back in the loop, or to now if that was never seen).
    std::optional<RestartDone> finalize(bool failed, int attempt, Now now, Effects& fx);
    void forget() { current_.reset(); }
    // The restart under way (its record not written yet), if any.
    const RestartStart* under_way() const { return pending() ? &current_->start : nullptr; }

    // What each record written so far costs (for the summary).
    const std::vector<RestartCost>& costs() const { return costs_; }

private:
    // A restore phase from the ranks' record of the restart (-1: it has none).
    static double ranks_restore_ms(const nlohmann::json& rank_record);
    struct Current {
        RestartStart start;
        int number = 0;
        WallTime died{};
        double launch_ms = -1, restore_ms = -1;
        std::optional<SteadyTime> registered_at;  // every active role registered
        std::optional<SteadyTime> resumed_at;     // every role back in the step loop
        std::optional<SteadyTime> first_step_at;  // the first step completed after resuming
        std::optional<nlohmann::json> rank_record;
        bool logged = false;
    };

    int warm_allowed_;
    int warm_used_ = 0, cold_used_ = 0;
    std::optional<Current> current_;
    std::vector<RestartCost> costs_;
};

}  // namespace flashrec::launcher
