// protection.every: auto, and what a failure costs under an interval. Pure functions shared by the
// runtime (the choice, taken collectively at a period boundary) and flashrec-launch (--dry-run and
// the summary); tests/unit/test_interval_choice.cpp.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flashrec::runtime {

// Under auto, k is a power of two up to protection.max_every (the "period" P), and changes only at
// multiples of P: so every multiple of P is snapshotted whatever k is, which is what a checkpoint
// (checkpoint.every_steps a multiple of P) and a replication-phase fault (a multiple of P) need.
// At k = 1 the last version of each period (P - 1 mod P) is not snapshotted: that step measures
// the step without protection, which the choice needs (max_every >= 4, so k = 1 stays k = 1 on
// all the other versions).
constexpr bool snapshot_due_auto(std::int64_t version, std::int64_t every, std::int64_t period) {
    if (version % period == 0) return true;
    if (every == 1) return version % period != period - 1;
    return version % every == 0;
}

// The k auto starts with, after any start, repair or relaunch (every rank the same, without a
// collective): max_every, the cheapest. The snapshot at max_every gives the first sample of a
// step with a snapshot, so the first choice is at 2 x max_every; starting low instead would pay
// a snapshot every other step for a whole period before anything is known.
constexpr std::int64_t auto_start_every(std::int64_t max_every) { return max_every; }

// The allowed values of k under auto: 1, 2, 4, ... max_every.
std::vector<std::int64_t> auto_choices(std::int64_t max_every);

// What the active ranks measured since the last start or repair, combined (the largest of each
// over the ranks: they wait for each other at every step's sync point). nullopt: no sample.
struct IntervalMeasure {
    std::optional<double> step_ms;            // median step that started no snapshot
    std::optional<double> protected_step_ms;  // median step that snapshotted its starting version
};

struct IntervalChoice {
    std::int64_t every = 1;
    double exposed_ms = 0;   // what one snapshot adds to its step (protected - unprotected, >= 0)
    double overhead = 0;     // exposed_ms / (every * step_ms): the expected cost per step at `every`
    std::string reason;
};

// A smaller k than the current one is taken only when its overhead is this fraction of the budget
// or less, so that noise near the budget does not flip k every period.
inline constexpr double kAutoDownMargin = 0.75;
// The largest protection.max_every the config accepts (and so the largest a reason suggests).
inline constexpr std::int64_t kMaxEveryLimit = 1024;

// The smallest allowed k whose exposed protection cost per step, exposed_ms / k, is at most
// budget x step_ms; max_every when none is. Keeps `current` when a sample is missing, and
// moves down only with kAutoDownMargin to spare.
IntervalChoice choose_every(const IntervalMeasure& m, double budget, std::int64_t max_every, std::int64_t current);

// The expected cost of one failure under protection.every = k, assuming it strikes at a uniformly
// random step: (k - 1) / 2 completed steps replayed on average (k - 1 at worst; k when it strikes
// while the interval's first version is still being snapshotted), plus the restore; beside it
// what protection costs per step at k and at k = 1, and how far apart failures must be for k to
// save more than its replays cost.
struct FailureCostInput {
    std::int64_t every = 1;
    double step_ms = 0;     // a step without protection
    double exposed_ms = 0;  // what one snapshot adds to its step
    double restore_ms = 0;  // a repair up to the first step (0: not known)
};
struct FailureCost {
    double expected_replayed_steps = 0;
    std::int64_t worst_replayed_steps = 0;
    double expected_ms = 0;          // restore + expected replay
    double worst_ms = 0;             // restore + worst replay
    double overhead_ms_per_step = 0;      // exposed_ms / k
    double every_step_ms_per_step = 0;    // exposed_ms (k = 1)
    double saved_ms_per_step = 0;         // the difference
    // Steps between failures above which k costs less than k = 1 in all (replay included);
    // nullopt when k saves nothing (k = 1, or nothing to save).
    std::optional<double> break_even_steps;
};
FailureCost failure_cost(const FailureCostInput& in);

}  // namespace flashrec::runtime
