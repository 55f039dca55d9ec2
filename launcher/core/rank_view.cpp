#include "rank_view.hpp"

namespace flashrec::launcher {

std::string_view to_string(RankStatus status) {
    switch (status) {
        case RankStatus::active: return "active";
        case RankStatus::exited: return "exited";
        case RankStatus::lost: return "lost";
    }
    return "unknown";
}

std::string_view to_string(IncidentReason reason) {
    switch (reason) {
        case IncidentReason::no_heartbeat: return "no_heartbeat";
        case IncidentReason::stalled: return "stalled";
        case IncidentReason::connection_lost: return "connection_lost";
        case IncidentReason::superseded: return "superseded";
        case IncidentReason::node_silent: return "node_silent";
    }
    return "unknown";
}

std::string_view to_string(DropReason reason) {
    switch (reason) {
        case DropReason::oversize_frame: return "oversize_frame";
        case DropReason::malformed_frame: return "malformed_frame";
        case DropReason::unknown_type: return "unknown_type";
        case DropReason::unsupported_version: return "unsupported_version";
        case DropReason::bad_token: return "bad_token";
        case DropReason::protocol_violation: return "protocol_violation";
        case DropReason::hello_timeout: return "hello_timeout";
        case DropReason::from_lost_node: return "from_lost_node";
        case DropReason::too_many_pending: return "too_many_pending";
    }
    return "unknown";
}

}  // namespace flashrec::launcher
