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

}  // namespace flashrec::runtime
