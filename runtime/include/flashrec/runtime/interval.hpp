// protection.every: which versions are snapshotted, what a repair's replay costs, and whether a
// replayed version is the one committed before the failure. Pure functions (tests/unit/test_interval.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace flashrec::runtime {

// Version v is the state before step v (after v steps). Under protection.every = k the loop
// snapshots the multiples of k; the version a start or a repair resumes from is snapshotted
// whatever it is (Runtime::Impl::resume), so a repair always finds the newest one committed.
constexpr bool snapshot_due(std::int64_t version, std::int64_t every) {
    return every <= 1 || version % every == 0;
}

// The median of `values` (the upper one of an even count); 0 when empty.
double median(std::vector<double> values);

// What a repair's replay costs: `steps` replayed at `median_step_ms` each; nullopt when the
// steps are not known here (a warm relaunch: -1, the launcher knows how far the old job got).
std::optional<double> replay_cost_ms(std::int64_t steps, double median_step_ms);

// Per-buffer checksums of one version, in layout order (a snapshot header's).
using BufferChecksums = std::vector<std::pair<std::string, std::uint64_t>>;

// The first buffer whose replayed bytes differ from those committed before the failure.
struct Divergence {
    std::string buffer;
    std::uint64_t before = 0, replayed = 0;
};
// nullopt when every buffer of `before` hashes the same in `replayed`; a buffer missing from
// `replayed` (another layout) counts as different, with checksum 0.
std::optional<Divergence> first_divergence(const BufferChecksums& before, const BufferChecksums& replayed);

// The start-up replay probe (protection.replay_check: start; docs/snapshots.md, "The start-up
// replay probe"). A fresh start arms it at the version it starts from; the first version the loop
// snapshots after that is the one compared: the loop waits for it, restores `from` from the own
// snapshot, runs the steps again, and at that version's sync point compares its hashes with the
// first pass's. Any repair before the verdict disarms it (the repair's own check applies).
struct ReplayProbe {
    std::int64_t from = -1;   // the version the job started from (restored for the replay)
    std::int64_t to = -1;     // the version compared; -1 until the loop rewinds
    constexpr bool rewound() const { return to >= 0; }
};
// Whether the loop rewinds now: snapshot `version` was just started (`started`), it is the first
// after the start, and the probe has not rewound yet.
constexpr bool probe_rewinds_at(const ReplayProbe& probe, std::int64_t version, bool started) {
    return started && !probe.rewound() && probe.from >= 0 && version > probe.from;
}
// Whether the sync point of step `index` gives the probe's verdict.
constexpr bool probe_verdict_at(const ReplayProbe& probe, std::int64_t index) {
    return probe.rewound() && index == probe.to;
}
// Why a job whose probe diverged is refused: what makes a replay inexact, and how to check.
std::string replay_probe_refusal(std::int64_t from, std::int64_t to, std::int64_t every_or_auto);

}  // namespace flashrec::runtime
