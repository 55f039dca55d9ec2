#include "flashrec/runtime/interval_choice.hpp"

#include <algorithm>
#include <cstdio>

namespace flashrec::runtime {
namespace {

std::string percent(double fraction) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f%%", fraction * 100);
    return text;
}

}  // namespace

std::vector<std::int64_t> auto_choices(std::int64_t max_every) {
    std::vector<std::int64_t> out;
    for (std::int64_t k = 1; k <= max_every; k *= 2) out.push_back(k);
    return out;
}

IntervalChoice choose_every(const IntervalMeasure& m, double budget, std::int64_t max_every, std::int64_t current) {
    IntervalChoice c;
    c.every = current;
    if (!m.step_ms || !m.protected_step_ms || *m.step_ms <= 0) {
        c.reason = std::string("not measured yet (no ") + (m.protected_step_ms ? "step without" : "step with") +
                   " a snapshot since the start or the last repair): kept";
        return c;
    }
    const double step = *m.step_ms;
    c.exposed_ms = std::max(0.0, *m.protected_step_ms - step);
    const auto overhead = [&](std::int64_t k) { return c.exposed_ms / (static_cast<double>(k) * step); };
    const auto choices = auto_choices(max_every);
    // The smallest k within `limit`; max_every when none is.
    const auto smallest_within = [&](double limit) {
        for (std::int64_t k : choices)
            if (overhead(k) <= limit) return k;
        return max_every;
    };
    const std::int64_t target = smallest_within(budget);
    if (overhead(target) > budget) {
        c.every = max_every;
        // The interval that would meet it, so that the user knows what to set.
        std::int64_t enough = max_every;
        while (overhead(enough) > budget && enough < kMaxEveryLimit) enough *= 2;
        c.reason = "over the budget even at protection.max_every: " + percent(overhead(max_every)) + " > " +
                   percent(budget) +
                   (overhead(enough) <= budget ? "; protection.max_every: " + std::to_string(enough) + " would meet it (" +
                                                     percent(overhead(enough)) + ", up to " +
                                                     std::to_string(enough - 1) + " steps replayed per failure)"
                                               : "");
    } else if (target < current) {
        // Down only with a margin: the smallest k within kAutoDownMargin of the budget, if below current.
        const std::int64_t down = smallest_within(budget * kAutoDownMargin);
        c.every = std::min(down, current);
        c.reason = c.every == current
                       ? "kept: k = " + std::to_string(target) + " is within the budget (" +
                             percent(overhead(target)) + ") but not with the margin (" +
                             percent(budget * kAutoDownMargin) + ")"
                       : "the smallest k within the budget with the margin: " + percent(overhead(c.every)) +
                             " <= " + percent(budget * kAutoDownMargin);
    } else {
        c.every = target;
        c.reason = target == 1 ? "a snapshot every step is within the budget: " + percent(overhead(1)) + " <= " +
                                     percent(budget)
                               : "the smallest k within the budget: " + percent(overhead(target)) + " <= " +
                                     percent(budget) + " (k = " + std::to_string(target / 2) + ": " +
                                     percent(overhead(target / 2)) + ")";
    }
    c.overhead = overhead(c.every);
    return c;
}

FailureCost failure_cost(const FailureCostInput& in) {
    FailureCost f;
    const std::int64_t k = std::max<std::int64_t>(1, in.every);
    f.expected_replayed_steps = static_cast<double>(k - 1) / 2;
    f.worst_replayed_steps = k - 1;
    f.expected_ms = in.restore_ms + f.expected_replayed_steps * in.step_ms;
    f.worst_ms = in.restore_ms + static_cast<double>(f.worst_replayed_steps) * in.step_ms;
    f.every_step_ms_per_step = in.exposed_ms;
    f.overhead_ms_per_step = in.exposed_ms / static_cast<double>(k);
    f.saved_ms_per_step = f.every_step_ms_per_step - f.overhead_ms_per_step;
    if (f.saved_ms_per_step > 0) f.break_even_steps = f.expected_replayed_steps * in.step_ms / f.saved_ms_per_step;
    return f;
}

}  // namespace flashrec::runtime
