#include "failure_record.hpp"

#include <cmath>

namespace flashrec::launcher {

std::string_view to_string(KillOutcome k) {
    switch (k) {
        case KillOutcome::killed: return "killed";
        case KillOutcome::refused: return "refused";
        case KillOutcome::remote: return "remote";
        case KillOutcome::gone: return "gone";
        case KillOutcome::pending: return "pending";
    }
    return "?";
}

Failure failure_record(const Incident& inc, const std::map<int, int>& mpi_errors) {
    const auto round3 = [](double v) { return std::round(v * 1000.0) / 1000.0; };
    Failure f;
    f.incident = inc.id;
    f.attempt = inc.attempt;
    f.observed = to_string(inc.obs.what);
    f.classification = inc.rule->classification;
    f.action = to_string(inc.rule->action);
    f.tier = inc.rule->tier;
    f.role = inc.role;
    if (inc.obs.what == Observed::exit_code || inc.obs.what == Observed::signal || inc.obs.what == Observed::mpi_error)
        f.value = inc.obs.value;
    if (inc.pid > 0) f.pid = inc.pid;
    if (!inc.node.empty()) f.node = inc.node;
    if (!inc.detail.empty()) f.detail = inc.detail;
    if (inc.step >= 0) f.step = inc.step;
    if (inc.detection_latency_ms >= 0) f.detection_latency_ms = round3(inc.detection_latency_ms);
    if (inc.since_injection_ms >= 0) f.since_injection_ms = round3(inc.since_injection_ms);
    if (!mpi_errors.empty()) {
        f.mpi_error_classes_seen.emplace();
        for (const auto& [cls, n] : mpi_errors) (*f.mpi_error_classes_seen)[std::to_string(cls)] = n;
    }
    return f;
}

bool SilentNodes::observe(const std::string& node, const std::string& role, IncidentClock::time_point now,
                          int ranks_on_node) {
    auto& recent = recent_[node];
    std::erase_if(recent, [&](const auto& e) { return now - e.second > window_ || e.first == role; });
    recent.emplace_back(role, now);
    return ranks_on_node >= 2 && static_cast<int>(recent.size()) >= ranks_on_node;
}

}  // namespace flashrec::launcher
