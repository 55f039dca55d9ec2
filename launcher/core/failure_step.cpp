#include "failure_step.hpp"

#include <algorithm>

namespace flashrec::launcher {

std::int64_t failure_step(std::optional<std::int64_t> fault_step, std::int64_t last_step_tag,
                          std::int64_t last_completed_step) {
    if (fault_step && *fault_step >= 0) return *fault_step;
    const std::int64_t after_completed = last_completed_step >= 0 ? last_completed_step + 1 : -1;
    return std::max({last_step_tag, after_completed, std::int64_t{-1}});
}

}  // namespace flashrec::launcher
