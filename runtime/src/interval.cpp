#include "flashrec/runtime/interval.hpp"

#include <algorithm>

namespace flashrec::runtime {

double median(std::vector<double> values) {
    if (values.empty()) return 0.0;
    const auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
    std::nth_element(values.begin(), middle, values.end());
    return *middle;
}

std::optional<double> replay_cost_ms(std::int64_t steps, double median_step_ms) {
    if (steps < 0) return std::nullopt;
    return static_cast<double>(steps) * median_step_ms;
}

std::optional<Divergence> first_divergence(const BufferChecksums& before, const BufferChecksums& replayed) {
    for (const auto& [name, checksum] : before) {
        // An init-capture: clang 14 cannot capture a structured binding itself.
        const auto it = std::find_if(replayed.begin(), replayed.end(),
                                     [&name = name](const auto& b) { return b.first == name; });
        const std::uint64_t now = it == replayed.end() ? 0 : it->second;
        if (it == replayed.end() || now != checksum) return Divergence{name, checksum, now};
    }
    return std::nullopt;
}

std::string replay_probe_refusal(std::int64_t from, std::int64_t to, std::int64_t every_or_auto) {
    const std::string k = every_or_auto == 0 ? "auto" : std::to_string(every_or_auto);
    return "protection.every = " + k + " needs an exact replay, and this trainer's is not: the start-up replay probe "
           "restored version " + std::to_string(from) + ", ran steps " + std::to_string(from) + ".." +
           std::to_string(to - 1) + " again, and version " + std::to_string(to) +
           " hashed differently than in the first pass (its replay_diverged record names the buffer). A repair "
           "would replay up to k steps the same way and end with a wrong result, so the job is refused. A step "
           "must be a pure function of the protect()ed state and step.data_seed(): draw every batch from "
           "step.data_seed() (not from an iterator or a counter that advanced in the first pass), and keep every "
           "state that changes across steps (RNG, step counter, learning-rate schedule) in protect()ed buffers. "
           "protection.every: 1 replays no completed step; protection.replay_check: off skips this probe "
           "(docs/snapshots.md, \"The start-up replay probe\")";
}

}  // namespace flashrec::runtime
