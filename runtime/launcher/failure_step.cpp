#include "failure_step.hpp"

#include <algorithm>

#include "flashrec/errors.hpp"
#include "flashrec/runtime/config.hpp"

namespace flashrec::launcher {

std::int64_t failure_step(const std::string& fired_fault, std::int64_t last_step_tag,
                          std::int64_t last_completed_step) {
    if (!fired_fault.empty()) {
        try {
            return config::parse_fault(fired_fault, "fault injected").step;
        } catch (const flashrec::ConfigError&) {
            // Not ours to judge here (the rank fired it): fall back to what the heartbeats say.
        }
    }
    const std::int64_t after_completed = last_completed_step >= 0 ? last_completed_step + 1 : -1;
    return std::max({last_step_tag, after_completed, std::int64_t{-1}});
}

}  // namespace flashrec::launcher
