// The control plane's rank side: every trainer rank sends heartbeats (step tag + phase) and
// typed records (records.hpp) over TCP to the controller inside flashrec-launch
// (launcher/control/controller.hpp), which turns a hang into a report the launcher acts on. No MPI here.
// Wire format, security model and hang rules: docs/control-plane.md.
#pragma once
#include "flashrec/ft/wire.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace flashrec::ft {

// What the rank's runtime updates and the heartbeat thread samples.
struct StepProgress {
    std::atomic<std::int64_t> step_tag{0};
    std::atomic<wire::Phase> phase{wire::Phase::idle};
};

struct HeartbeatClientOptions {
    std::string controller;  // "host:port" (FLASHREC_CONTROL); "[v6addr]:port" also accepted
    wire::Token token{};     // FLASHREC_TOKEN
    std::string role;
    std::int32_t world_rank = 0;
    // This process as PMIx names it (PMIX_NAMESPACE, PMIX_RANK): the controller passes it to
    // the job's other processes when this one's connection closes without BYE.
    std::optional<wire::MpiProcess> mpi_process;
    // Another MPI process of the job is gone (the controller's PEER_LOST), on the client's
    // thread; keep it short. Empty: such frames are ignored.
    std::function<void(const wire::MpiProcess&)> on_peer_lost;
    std::chrono::milliseconds period{100};
    std::chrono::milliseconds connect_timeout{2'000};
    // A lost or refused connection is retried (HELLO again) with a backoff up to 1 s, for this
    // long after it was lost; then the client gives up and training goes on without it.
    std::chrono::milliseconds reconnect_for{60'000};
    // How long the destructor waits for BYE to be written before it closes anyway.
    std::chrono::milliseconds bye_timeout{500};
    std::size_t max_queued_event_bytes = 1 << 20;
    // Diagnostics (one line each, rare); empty: std::cerr.
    std::function<void(std::string_view)> log;

    // From FLASHREC_CONTROL and FLASHREC_TOKEN (and PMIx's PMIX_NAMESPACE and PMIX_RANK, when
    // both are there and well formed); nullopt when FLASHREC_CONTROL is unset (no controller:
    // the rank runs without one). Throws flashrec::ConfigError when the first two are malformed.
    static std::optional<HeartbeatClientOptions> from_environment(std::string role, std::int32_t world_rank);
};

// The rank side. Connects, sends HELLO, then a heartbeat every period from its own thread. If
// the controller is unreachable or goes away, it logs once and stops: training never waits for
// or fails because of the control plane.
class HeartbeatClient {
public:
    // `progress` must outlive the client. Throws std::invalid_argument for bad options.
    HeartbeatClient(HeartbeatClientOptions options, const StepProgress& progress);
    // Sends BYE (bounded by bye_timeout) and joins the thread.
    ~HeartbeatClient();
    HeartbeatClient(const HeartbeatClient&) = delete;
    HeartbeatClient& operator=(const HeartbeatClient&) = delete;

    // Queues a record for the event log (a JSON object with a string "event"). Never throws;
    // false when it was dropped: invalid, too large, queue full, or no controller.
    bool send_event(const nlohmann::json& record) noexcept;
    // Waits until every queued event was written to the socket (true), or `limit` passed, or
    // the client gave up (false). For a process about to _exit with a record the launcher acts on.
    bool flush(std::chrono::milliseconds limit) noexcept;
    // Sends this rank's last record (role_finished or ending_job, records.hpp) and waits until
    // the controller acknowledged it (RECORD_ACK: the launcher holds it), at most `limit`.
    // false: no acknowledgement (no controller, it gave up, the record was refused, or the
    // limit passed); a reconnection resends nothing.
    bool send_final(const nlohmann::json& record, std::chrono::milliseconds limit) noexcept;
    // Connected or still connecting; false once it gave up.
    bool active() const noexcept;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// "host:port" or "[v6]:port" → host and port; nullopt if malformed.
std::optional<std::pair<std::string, std::uint16_t>> parse_host_port(std::string_view text);

}  // namespace flashrec::ft
