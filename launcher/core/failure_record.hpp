// Incidents: what the launcher records for each failure it sees (the `failure` record), and the
// rule that turns the ranks of one node going silent together into a node failure. Pure: time is
// passed in, like ft's RankTracker.
#pragma once
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "classification.hpp"
#include "launcher_records.hpp"

namespace flashrec::launcher {

using IncidentClock = std::chrono::steady_clock;

// What became of the SIGKILL for a hung rank.
enum class KillOutcome { killed, refused, remote, gone, pending };
std::string_view to_string(KillOutcome k);

struct Incident {
    int id = 0;
    int attempt = 0;
    Observation obs;
    const Rule* rule = nullptr;
    std::string role;
    int pid = 0;
    std::string node;
    std::string detail;
    std::int64_t step = -1;
    double detection_latency_ms = -1;  // the controller's: since the last heartbeat / tag move
    double since_injection_ms = -1;    // from the fault's fault_injected record, when known
    bool hang = false;
    KillOutcome kill = KillOutcome::killed;  // for a hang: what became of the SIGKILL
    IncidentClock::time_point at{};          // when the launcher recorded it
    bool recovered = false;
    std::string recovered_by;  // "in-job tier 1 (hot)", "warm relaunch 1", ...: only once it completed
    std::string tried;         // a restart for it that failed: "warm relaunch 1 failed" (summary only)
    double recovery_ms = -1;
};

// The event log's `failure` record (docs/launcher.md); `mpi_errors`: error class -> count seen
// in the ranks' mpi_error records so far.
Failure failure_record(const Incident& incident, const std::map<int, int>& mpi_errors);

// Every active rank of a node (at least 2) declared silent within `window` of each other is the
// node's failure, not theirs.
class SilentNodes {
public:
    explicit SilentNodes(std::chrono::milliseconds window) : window_(window) {}
    // `role` on `node` went silent at `now`; true when every one of the node's `ranks_on_node`
    // did within the window (the caller then records the node's incident and calls clear()).
    bool observe(const std::string& node, const std::string& role, IncidentClock::time_point now, int ranks_on_node);
    void clear(const std::string& node) { recent_[node].clear(); }
    std::chrono::milliseconds window() const { return window_; }

private:
    std::chrono::milliseconds window_;
    std::map<std::string, std::vector<std::pair<std::string, IncidentClock::time_point>>> recent_;
};

}  // namespace flashrec::launcher
