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

}  // namespace flashrec::runtime
