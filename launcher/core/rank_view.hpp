// What the control plane knows of the ranks, as plain values: a rank's state (RankInfo), an
// incident it reports (RankIncident) and why it drops a connection (DropReason). The server
// (control/controller.hpp) fills them; the core (job_core.hpp) reads them. No I/O.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "flashrec/ft/wire.hpp"

namespace flashrec::launcher {

namespace wire = ft::wire;

using ControlClock = std::chrono::steady_clock;

enum class RankStatus : std::uint8_t { active, exited, lost };
std::string_view to_string(RankStatus status);

enum class IncidentReason : std::uint8_t {
    no_heartbeat,     // silent for hang_timeout (SIGSTOP, frozen node, dead node without a TCP reset)
    stalled,          // heartbeats arrive but the step tag has not moved while another rank's has
    connection_lost,  // the connection closed without BYE
    superseded,       // another process took its role while its connection was open: the
                      // survivors declared it failed (over shm, MPI's in-band detector sees a
                      // stopped or slow process fail before the hang timeout)
    node_silent,      // every rank of its node fell silent for the node timeout while the other
                      // nodes kept talking (NodeLiveness): lost with its node, passed on
};
std::string_view to_string(IncidentReason reason);

// What the controller knows of one role's current process.
struct RankInfo {
    std::string role;
    std::string hostname;
    std::int32_t world_rank = 0;
    std::int32_t pid = 0;
    std::optional<wire::MpiProcess> mpi_process;  // from HELLO: what a loss is passed on as
    RankStatus status = RankStatus::active;
    wire::Phase phase = wire::Phase::idle;
    std::int64_t step_tag = 0;
    ControlClock::time_point registered_at{};
    ControlClock::time_point last_heartbeat{};
    ControlClock::time_point last_tag_change{};
    std::uint64_t heartbeats = 0;
    bool hung = false;  // declared hung; cleared when the tag moves again or the role re-registers
};

struct RankIncident {
    std::string role;
    std::string hostname;
    std::int32_t world_rank = 0;
    std::int32_t pid = 0;
    IncidentReason reason = IncidentReason::no_heartbeat;
    std::int64_t last_step_tag = 0;
    // How long the rank had been stuck when this was noticed: since its last heartbeat
    // (no_heartbeat, connection_lost) or since its tag last moved (stalled).
    std::chrono::milliseconds detection_latency{0};
};

// Why the controller dropped a connection (counted and logged).
enum class DropReason : std::uint8_t {
    oversize_frame,
    malformed_frame,
    unknown_type,
    unsupported_version,
    bad_token,
    protocol_violation,  // anything but HELLO first, or a second HELLO
    hello_timeout,
    from_lost_node,      // a HELLO from a node declared lost (thawed, reconnected): a zombie
    too_many_pending,    // too many connections that have not sent HELLO yet
};
inline constexpr std::size_t kDropReasonCount = static_cast<std::size_t>(DropReason::too_many_pending) + 1;
std::string_view to_string(DropReason reason);

}  // namespace flashrec::launcher
