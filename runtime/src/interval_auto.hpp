// protection.every = auto as the step loop runs it: the k in use, the same on every active role,
// and the step times it is chosen from (kept for job_stats and the recovery record too). The
// choice itself is interval_choice.hpp's (pure); this part keeps its state between choices. A
// part of Runtime::Impl (runtime_impl.hpp).
#pragma once
#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "flashrec/ft/records.hpp"
#include "flashrec/runtime/config.hpp"

namespace flashrec::runtime {

class IntervalAuto {
public:
    explicit IntervalAuto(const config::Protection& protection) : p_(protection) {}

    // The k in use: protection.every, or under auto the one chosen last.
    std::int64_t every_now() const { return p_.every_auto() ? every_ : p_.every; }
    // Whether the loop snapshots `version` (protection.every, or auto's k).
    bool due(std::int64_t version) const;
    // Every resume (a start, a repair, a relaunch) begins at auto_start_every() again: every role
    // the same k without a collective (a replacement has no history of choices).
    void resumed_at(std::int64_t step);
    // The k in use when the last repair began (its recovery record says it).
    std::int64_t every_before_resume() const { return p_.every_auto() ? before_resume_ : p_.every; }

    // The step clock: a step begins now (loop_start, after a rewind).
    void step_begins() { step_start_ = std::chrono::steady_clock::now(); }
    // Step `index` ended now, and the next begins. `protected_`: protection runs; `snapshotted`:
    // the step waited for the snapshot of its starting version. The first step after a resume
    // carries its set-up and is no sample of either kind.
    void step_ended(std::int64_t index, bool protected_, bool snapshotted);
    // The sync point of a snapshotted step waited `ms` for its snapshot (the exposed overhead).
    void waited_for_snapshot(double ms) { exposed_wait_ms_.push_back(ms); }
    const std::vector<double>& step_ms() const { return step_ms_; }  // every completed step's
    const std::vector<double>& exposed_wait_ms() const { return exposed_wait_ms_; }
    const std::vector<double>& protected_ms() const { return protected_ms_; }
    const std::vector<double>& unprotected_ms() const { return unprotected_ms_; }

    // Whether `version` is where auto chooses k (a multiple of max_every).
    bool choice_due(std::int64_t version) const { return p_.every_auto() && version % p_.max_every == 0; }
    // This role's recent medians {without, with a snapshot}; -1: none measured. The caller takes
    // the largest over the active roles (each waits for the slowest at every sync point).
    std::vector<double> recent_medians() const;
    // The choice at `version` from every role's largest medians. Returns the record to emit when
    // k changes or this is the first measured choice since the resume (auto starts at max_every:
    // "over the budget even there" would never be said otherwise).
    std::optional<ft::records::ProtectionInterval> choose(std::int64_t version, const std::vector<double>& measured);

private:
    const config::Protection& p_;
    std::int64_t every_ = 1;
    std::int64_t resumed_at_ = -1;
    std::int64_t before_resume_ = 1;
    bool reported_ = false;  // the first measured choice since the resume was recorded (kept or not)
    std::chrono::steady_clock::time_point step_start_;
    std::vector<double> step_ms_, exposed_wait_ms_;
    // Steps that snapshotted their starting version and steps that did not: what auto chooses from.
    std::vector<double> protected_ms_, unprotected_ms_;
};

}  // namespace flashrec::runtime
