#include "interval_auto.hpp"

#include "flashrec/runtime/interval.hpp"
#include "flashrec/runtime/interval_choice.hpp"

namespace flashrec::runtime {

bool IntervalAuto::due(std::int64_t version) const {
    return p_.every_auto() ? snapshot_due_auto(version, every_, p_.max_every) : snapshot_due(version, p_.every);
}

void IntervalAuto::resumed_at(std::int64_t step) {
    before_resume_ = every_;
    every_ = auto_start_every(p_.max_every);
    reported_ = false;
    resumed_at_ = step;
}

void IntervalAuto::step_ended(std::int64_t index, bool protected_, bool snapshotted) {
    const auto now = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - step_start_).count();
    step_ms_.push_back(ms);
    step_start_ = now;
    if (!protected_ || index == resumed_at_) return;
    (snapshotted ? protected_ms_ : unprotected_ms_).push_back(ms);
}

std::vector<double> IntervalAuto::recent_medians() const {
    // The newest samples only: the choice follows the step time as it changes.
    constexpr std::size_t kWindow = 64;
    const auto recent = [](const std::vector<double>& all) {
        if (all.empty()) return -1.0;
        const auto from = all.size() > kWindow ? all.end() - static_cast<std::ptrdiff_t>(kWindow) : all.begin();
        return median(std::vector<double>(from, all.end()));
    };
    return {recent(unprotected_ms_), recent(protected_ms_)};
}

std::optional<ft::records::ProtectionInterval> IntervalAuto::choose(std::int64_t version,
                                                                    const std::vector<double>& measured) {
    IntervalMeasure m;
    if (measured[0] > 0) m.step_ms = measured[0];
    if (measured[1] > 0) m.protected_step_ms = measured[1];
    const auto choice = choose_every(m, p_.overhead_budget, p_.max_every, every_);
    const bool both_measured = m.step_ms && m.protected_step_ms;
    const bool first_measured = both_measured && !reported_;
    if (both_measured) reported_ = true;
    std::optional<ft::records::ProtectionInterval> record;
    if (choice.every != every_ || first_measured)
        record = ft::records::ProtectionInterval{version, choice.every, every_, m.step_ms, m.protected_step_ms,
                                                 choice.exposed_ms, choice.overhead, p_.overhead_budget,
                                                 p_.max_every, choice.reason};
    every_ = choice.every;
    return record;
}

}  // namespace flashrec::runtime
