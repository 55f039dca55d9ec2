// What the launcher writes and hands out when the job starts: the job_start and layout records,
// the announcement for people, and the environment of mpirun (which the ranks inherit). Pure
// functions of the plan and the control plane's endpoint.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "launch_plan.hpp"
#include "launcher_records.hpp"

namespace flashrec::launcher {

// The host name as the heartbeat client writes it in HELLO (other characters become '-').
std::string wire_hostname(std::string name);

// What the ranks are told about the control plane.
struct ControlAccess {
    std::string endpoint;   // FLASHREC_CONTROL
    std::string token_hex;  // FLASHREC_TOKEN
    std::string launch_id;  // FLASHREC_LAUNCH_ID: also how a teardown finds the job's processes
};

// Where the control plane listens: detection.bind, but under Slurm a loopback bind becomes the
// address this node uses to reach the job's other nodes. `notes`: lines for people.
std::string control_bind_address(const LaunchPlan& plan, std::vector<std::string>& notes);
// The endpoint as the ranks must dial it: a wildcard bind is reachable on loopback.
std::string reachable_endpoint(std::string endpoint);

JobStart job_start_record(const LaunchPlan& plan, bool resume, const std::string& run_id);
// `metrics`: the metrics endpoint, when it is on.
JobLayout layout_record(const LaunchPlan& plan, const std::string& control, const std::optional<std::string>& metrics);
std::string announcement(const LaunchPlan& plan, const std::string& control, const std::optional<std::string>& metrics);

// mpirun's environment: `inherited` (environ) without any variable this launch sets, then those.
std::vector<std::string> child_environment(const LaunchPlan& plan, char** inherited, const LaunchKind& launch,
                                           const Layout& layout, const ControlAccess& access);

}  // namespace flashrec::launcher
