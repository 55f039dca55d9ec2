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

nlohmann::json failure_record(const Incident& inc, const std::map<int, int>& mpi_errors) {
    const auto round3 = [](double v) { return std::round(v * 1000.0) / 1000.0; };
    nlohmann::json fields = {{"incident", inc.id},
                             {"attempt", inc.attempt},
                             {"observed", to_string(inc.obs.what)},
                             {"classification", inc.rule->classification},
                             {"action", to_string(inc.rule->action)},
                             {"tier", inc.rule->tier},
                             {"role", inc.role}};
    if (inc.obs.what == Observed::exit_code || inc.obs.what == Observed::signal || inc.obs.what == Observed::mpi_error)
        fields["value"] = inc.obs.value;
    if (inc.pid > 0) fields["pid"] = inc.pid;
    if (!inc.node.empty()) fields["node"] = inc.node;
    if (!inc.detail.empty()) fields["detail"] = inc.detail;
    if (inc.step >= 0) fields["step"] = inc.step;
    if (inc.detection_latency_ms >= 0) fields["detection_latency_ms"] = round3(inc.detection_latency_ms);
    if (inc.since_injection_ms >= 0) fields["since_injection_ms"] = round3(inc.since_injection_ms);
    if (!mpi_errors.empty()) {
        nlohmann::json classes = nlohmann::json::object();
        for (const auto& [cls, n] : mpi_errors) classes[std::to_string(cls)] = n;
        fields["mpi_error_classes_seen"] = classes;
    }
    return fields;
}

bool SilentNodes::observe(const std::string& node, const std::string& role, IncidentClock::time_point now,
                          int ranks_on_node) {
    auto& recent = recent_[node];
    std::erase_if(recent, [&](const auto& e) { return now - e.second > window_ || e.first == role; });
    recent.emplace_back(role, now);
    return ranks_on_node >= 2 && static_cast<int>(recent.size()) >= ranks_on_node;
}

}  // namespace flashrec::launcher
