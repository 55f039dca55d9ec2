#include "recovery_figures.hpp"

#include <algorithm>

namespace flashrec::launcher {

ReportTotals report_totals(const std::vector<ft::records::Recovery>& recoveries,
                           const std::vector<RestartCost>& restarts, std::vector<HangSpan> hangs,
                           double median_step_ms) {
    ReportTotals t;
    for (const auto& r : recoveries) {
        if (r.replacement == "relaunch") continue;
        t.steps_replayed += r.steps_replayed;
        t.recovery_ms += r.total_ms;
        const int n = static_cast<int>(r.failed_roles.size());
        t.in_job += n;
        // One hot spare, the rest spawned, for "hot+spawned".
        if (r.replacement == "hot") t.hot += n;
        if (r.replacement == "spawned") t.spawned += n;
        if (r.replacement == "hot+spawned") t.hot += 1, t.spawned += n - 1;
    }
    for (const auto& r : restarts) {
        t.steps_replayed += r.steps_replayed;
        t.restart_ms += r.total_ms;
    }
    std::sort(hangs.begin(), hangs.end(), [](const HangSpan& a, const HangSpan& b) {
        return a.start_ms != b.start_ms ? a.start_ms < b.start_ms : a.end_ms < b.end_ms;
    });
    double covered_to = -1e300;
    for (const auto& h : hangs) {
        t.hang_ms += std::max(0.0, h.end_ms - std::max(h.start_ms, covered_to));
        covered_to = std::max(covered_to, h.end_ms);
    }
    t.replay_ms = static_cast<double>(t.steps_replayed) * median_step_ms;
    return t;
}

}  // namespace flashrec::launcher
