// The control plane's server side, inside flashrec-launch: the controller every rank's
// HeartbeatClient (ft/control_plane.hpp) talks to, the rank book-keeping and the hang rules.
// It turns a hang into a report the launcher acts on (it kills the PID: a hang becomes an
// ordinary fail-stop failure). Wire format, security model and hang rules: docs/control-plane.md.
#pragma once
#include "flashrec/ft/wire.hpp"
#include "rank_view.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace flashrec::ft {
class EventLog;
}

namespace flashrec::launcher {

namespace wire = ft::wire;
using ft::EventLog;

// A registered rank, as seen by a connection. The generation tells a superseded process
// (its role was taken over by a newer HELLO) from the current one.
struct RankSlot {
    std::uint32_t index = 0;
    std::uint32_t generation = 0;
};

// Rank bookkeeping and the hang rules. Pure: no I/O, no locks, time passed in, so tests drive
// it with a fake clock. Heartbeats are O(1) and allocate nothing; check() is O(ranks).
class RankTracker {
public:
    explicit RankTracker(std::chrono::milliseconds hang_timeout);

    // A HELLO whose token was already checked. A role seen before is taken over by the newcomer
    // (a replacement process): the old slot goes stale.
    RankSlot register_rank(const wire::Hello& hello, ControlClock::time_point now);
    // false: the slot is stale and its connection should be closed.
    bool heartbeat(RankSlot slot, const wire::Heartbeat& beat, ControlClock::time_point now);
    // A current active rank's info, or nullptr.
    const RankInfo* current(RankSlot slot) const;
    // Marks the rank exited (clean, after BYE) or lost; returns the incident for a loss.
    std::optional<RankIncident> disconnect(RankSlot slot, bool clean, ControlClock::time_point now);
    // Appends an incident for each active rank that became hung since the last call. A gap since
    // the previous call of more than half the hang timeout means this process was not running
    // (descheduled, its host paused): that stretch is not counted as the ranks' silence, and its
    // length is returned (zero otherwise).
    ControlClock::duration check(ControlClock::time_point now, std::vector<RankIncident>& newly_hung);

    std::optional<RankInfo> find(const std::string& role) const;
    std::vector<RankInfo> snapshot() const;
    // The current active ranks on `hostname`.
    std::vector<RankSlot> active_on(const std::string& hostname) const;

private:
    struct Record {
        RankInfo info;
        std::uint32_t generation = 0;
        // Position in the step sequence (2i: in step i, 2i+1: its optimizer); -1 unknown.
        std::int64_t progress = -1;
        std::int64_t last_step = -1;  // the newest tag >= 0, to place a -1
    };
    Record* live(RankSlot slot);

    std::chrono::milliseconds hang_timeout_;
    std::optional<ControlClock::time_point> last_check_;
    std::vector<Record> records_;
    std::unordered_map<std::string, std::uint32_t> index_by_role_;
};

struct ControllerOptions {
    std::string bind_address = "127.0.0.1";  // numeric address or a name that resolves locally
    std::uint16_t port = 0;                    // 0: ephemeral, see Controller::port()
    wire::Token token{};                       // the job's secret (wire::generate_token())
    // Must exceed the longest legitimate step (and the skew between ranks within one).
    std::chrono::milliseconds hang_timeout{30'000};
    std::chrono::milliseconds check_period{100};
    std::chrono::milliseconds hello_timeout{5'000};
    std::size_t max_payload = wire::kDefaultMaxPayload;
    // Connections that have not sent HELLO yet, in total and per source address. When either is
    // reached, the oldest such connection (of that source, if it has any) is dropped to make
    // room: a flood cannot lock out a rank that connects (and sends HELLO at once) meanwhile.
    // Authenticated sessions never count and are never dropped for room.
    std::size_t max_pending_connections = 256;
    std::size_t max_pending_per_source = 64;
    // Where registrations, drops, incidents and the ranks' events go; null: std::clog.
    std::shared_ptr<EventLog> event_log;
    // A registered process whose connection closes without BYE (EOF or reset: its process
    // ended) is passed to every other connected process as PEER_LOST, which they hand to their
    // MPI as a process failure, beside PRRTE's own notices (docs/control-plane.md, "Losses
    // passed on"). train.yaml: detection.pass_on_losses.
    bool pass_on_losses = true;
    // detection.node_timeout_ms (NodeLiveness); zero: off. A node lost by it has every active
    // rank lost (IncidentReason::node_silent, through on_lost and passed on like a closed
    // connection) and a node_lost record; a HELLO from it later is refused (from_lost_node).
    std::chrono::milliseconds node_timeout{0};
    std::chrono::milliseconds heartbeat_period{100};
    // Called once per incident, on the controller's thread (or the thread calling feed_*); keep
    // them short. Exceptions they throw are logged and swallowed.
    std::function<void(const RankIncident&)> on_hung;
    std::function<void(const RankIncident&)> on_lost;
    // A registered process whose role another process (another pid or host) took while its
    // connection was still open. A reconnecting process (same pid) is none.
    std::function<void(const RankIncident&)> on_superseded;
    // Each EVENT a rank sent, after it was logged (the record carries "source": the role).
    std::function<void(const nlohmann::json&)> on_event;
};

// The server side. Binds in the constructor (throws flashrec::Error if it cannot), runs its
// io_context on its own thread, stops and joins in the destructor.
class Controller {
public:
    explicit Controller(ControllerOptions options);
    ~Controller();
    Controller(const Controller&) = delete;
    Controller& operator=(const Controller&) = delete;

    std::uint16_t port() const;
    // "address:port", the value of FLASHREC_CONTROL for the ranks.
    std::string endpoint() const;

    std::optional<RankInfo> rank(const std::string& role) const;
    std::vector<RankInfo> ranks() const;
    std::uint64_t drop_count(DropReason reason) const;
    std::uint64_t heartbeat_count() const;
    // Losses passed on so far (PEER_LOST frames queued, one per recipient).
    std::uint64_t peer_lost_count() const;
    // Holds losses back while the launcher itself ends every process of an attempt (each death
    // would be sent to every other dying process), and lets them through again for the next one.
    // Only with options.pass_on_losses.
    void hold_losses(bool hold);

    // Frames as if they arrived on a connection, bypassing sockets (benchmarks, tests); the
    // socket path runs the same code. Thread-safe. feed_hello checks the token (nullopt: refused).
    std::optional<RankSlot> feed_hello(const wire::Hello& hello);
    bool feed_heartbeat(RankSlot slot, const wire::Heartbeat& beat);
    bool feed_event(RankSlot slot, nlohmann::json record);  // true: accepted
    void feed_bye(RankSlot slot);
    void feed_lost(RankSlot slot);  // as a connection closed by its process's end
    // Runs the hang detector now, on the calling thread (it also runs every check_period).
    void check_now();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace flashrec::launcher
