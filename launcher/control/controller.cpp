#include "controller.hpp"
#include "launcher_records.hpp"
#include "node_liveness.hpp"

#include <map>

#include "flashrec/errors.hpp"
#include "flashrec/ft/event_log.hpp"
#include "flashrec/ft/io_loop.hpp"
#include "flashrec/ft/records.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <deque>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <unordered_map>

namespace flashrec::launcher {

namespace asio = boost::asio;
namespace records = ft::records;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using ft::resolve_address;
using ft::run_io_loop;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

namespace {

// The controller's event log stops recording dropped connections after this many, so a
// hostile flood cannot fill the disk; they are still counted (Controller::drop_count).
constexpr std::uint64_t kMaxLoggedDrops = 1000;
constexpr std::size_t kReadChunkBytes = 4096;
constexpr milliseconds kAcceptRetryDelay{100};

bool is_step_phase(wire::Phase phase) {
    return phase == wire::Phase::compute || phase == wire::Phase::grad_sync ||
           phase == wire::Phase::commit_wait || phase == wire::Phase::optimizer;
}

RankIncident make_incident(const RankInfo& info, IncidentReason reason, ControlClock::duration stuck_for) {
    return RankIncident{info.role,   info.hostname, info.world_rank,
                        info.pid,    reason,        info.step_tag,
                        duration_cast<milliseconds>(stuck_for)};
}

RankIncidentFields fields_of(const RankIncident& incident) {
    return {incident.role,
            incident.hostname,
            incident.world_rank,
            incident.pid,
            std::string(to_string(incident.reason)),
            incident.last_step_tag,
            incident.detection_latency.count()};
}

std::string format_endpoint(const tcp::endpoint& endpoint) {
    const auto address = endpoint.address();
    const std::string host = address.is_v6() ? "[" + address.to_string() + "]" : address.to_string();
    return host + ":" + std::to_string(endpoint.port());
}

}  // namespace

// ------------------------------------------------------------------------------------------
// RankTracker

RankTracker::RankTracker(milliseconds hang_timeout) : hang_timeout_(hang_timeout) {}

RankSlot RankTracker::register_rank(const wire::Hello& hello, ControlClock::time_point now) {
    const auto [entry, is_new] = index_by_role_.try_emplace(hello.role, static_cast<std::uint32_t>(records_.size()));
    if (is_new) records_.emplace_back();
    Record& record = records_[entry->second];
    const std::uint32_t generation = is_new ? 0 : record.generation + 1;
    record = Record{};
    record.generation = generation;
    RankInfo& info = record.info;
    info.role = hello.role;
    info.hostname = hello.hostname;
    info.world_rank = hello.world_rank;
    info.pid = hello.pid;
    info.mpi_process = hello.mpi_process;
    info.registered_at = info.last_heartbeat = info.last_tag_change = now;
    return RankSlot{entry->second, generation};
}

const RankInfo* RankTracker::current(RankSlot slot) const {
    if (slot.index >= records_.size()) return nullptr;
    const Record& record = records_[slot.index];
    const bool is_live = record.generation == slot.generation && record.info.status == RankStatus::active;
    return is_live ? &record.info : nullptr;
}

RankTracker::Record* RankTracker::live(RankSlot slot) { return current(slot) ? &records_[slot.index] : nullptr; }

bool RankTracker::heartbeat(RankSlot slot, const wire::Heartbeat& beat, ControlClock::time_point now) {
    Record* record = live(slot);
    if (!record) return false;
    RankInfo& info = record->info;
    info.last_heartbeat = now;
    ++info.heartbeats;
    info.phase = beat.phase;
    if (beat.step_tag != info.step_tag) {
        info.step_tag = beat.step_tag;
        info.last_tag_change = now;
        info.hung = false;  // it moved: whatever held it has passed, a later hang is a new incident
    }
    // -1 carries no step number: place it just after the last real tag (its optimizer).
    if (beat.step_tag >= 0) {
        record->last_step = beat.step_tag;
        record->progress = 2 * beat.step_tag;
    } else {
        record->progress = record->last_step >= 0 ? 2 * record->last_step + 1 : -1;
    }
    return true;
}

std::optional<RankIncident> RankTracker::disconnect(RankSlot slot, bool clean, ControlClock::time_point now) {
    Record* record = live(slot);
    if (!record) return std::nullopt;
    record->info.status = clean ? RankStatus::exited : RankStatus::lost;
    if (clean) return std::nullopt;
    return make_incident(record->info, IncidentReason::connection_lost, now - record->info.last_heartbeat);
}

ControlClock::duration RankTracker::check(ControlClock::time_point now, std::vector<RankIncident>& newly_hung) {
    ControlClock::duration paused{};
    if (last_check_ && now - *last_check_ > hang_timeout_ / 2) {
        // Nothing could have been heard meanwhile: without this, every rank would be declared hung
        // the moment a paused launcher (or a paused batch host) runs again.
        paused = now - *last_check_;
        for (Record& record : records_) {
            record.info.last_heartbeat = std::min(now, record.info.last_heartbeat + paused);
            record.info.last_tag_change = std::min(now, record.info.last_tag_change + paused);
        }
    }
    last_check_ = now;

    // The furthest any working rank got; parked spares do not step and do not count.
    std::int64_t furthest = -1;
    for (const Record& record : records_)
        if (record.info.status == RankStatus::active && record.info.phase != wire::Phase::parked)
            furthest = std::max(furthest, record.progress);

    for (Record& record : records_) {
        RankInfo& info = record.info;
        if (info.status != RankStatus::active || info.hung) continue;
        const auto silent_for = now - info.last_heartbeat;
        const auto unmoved_for = now - info.last_tag_change;
        if (silent_for >= hang_timeout_) {
            info.hung = true;
            newly_hung.push_back(make_incident(info, IncidentReason::no_heartbeat, silent_for));
        } else if (is_step_phase(info.phase) && record.progress >= 0 && record.progress < furthest &&
                   unmoved_for >= hang_timeout_) {
            info.hung = true;
            newly_hung.push_back(make_incident(info, IncidentReason::stalled, unmoved_for));
        }
    }
    return paused;
}

std::optional<RankInfo> RankTracker::find(const std::string& role) const {
    const auto entry = index_by_role_.find(role);
    if (entry == index_by_role_.end()) return std::nullopt;
    return records_[entry->second].info;
}

std::vector<RankSlot> RankTracker::active_on(const std::string& hostname) const {
    std::vector<RankSlot> slots;
    for (std::uint32_t i = 0; i < records_.size(); ++i)
        if (records_[i].info.status == RankStatus::active && records_[i].info.hostname == hostname)
            slots.push_back({i, records_[i].generation});
    return slots;
}

std::vector<RankInfo> RankTracker::snapshot() const {
    std::vector<RankInfo> infos;
    infos.reserve(records_.size());
    for (const Record& record : records_) infos.push_back(record.info);
    return infos;
}

// ------------------------------------------------------------------------------------------
// Controller

struct Controller::Impl {
    class Session;

    explicit Impl(ControllerOptions opts);
    ~Impl();

    // Event log writes never throw into the io loop.
    // Writes one of the controller's records (launcher_records.hpp).
    template <class Record>
    void log(const Record& record) noexcept {
        try {
            event_log->log_event(Record::kEvent, record.to_json());
        } catch (...) {  // a log that cannot be written must not take the controller down
        }
    }
    void record_drop(DropReason reason, std::string_view peer, std::string_view detail);
    template <class Callback, class... Args>
    void invoke(const Callback& callback, std::string_view name, const Args&... args) noexcept;

    std::optional<RankSlot> admit(const wire::Hello& hello, std::string_view peer);
    bool on_heartbeat(RankSlot slot, const wire::Heartbeat& beat);
    // true: the record was valid, logged and handed to options.on_event.
    bool on_event(RankSlot slot, nlohmann::json record);
    // clean: after BYE. process_gone: EOF or reset without BYE (its process ended), the losses
    // passed on; a connection the controller cut, or one that failed otherwise, is not.
    void on_disconnect(RankSlot slot, bool clean, bool process_gone);
    void run_check();
    // Every active rank of `node` lost at once (NodeLiveness said so).
    void lose_node(const std::string& node);
    // io thread only: PEER_LOST to every connection but the lost process's own.
    void pass_on(std::uint32_t lost_index, const wire::MpiProcess& process, const std::string& role);

    // io thread only
    void accept_next();
    void start_session(tcp::socket socket);
    void attach(RankSlot slot, const std::shared_ptr<Session>& session);
    void schedule_check();

    ControllerOptions options;
    std::shared_ptr<EventLog> event_log;

    mutable std::mutex tracker_mutex;
    RankTracker tracker;
    std::optional<NodeLiveness> liveness;  // under tracker_mutex; with options.node_timeout

    std::array<std::atomic<std::uint64_t>, kDropReasonCount> drops{};
    std::atomic<std::uint64_t> drops_logged{0};
    std::atomic<std::uint64_t> heartbeats{0};
    std::atomic<std::uint64_t> peer_lost_frames{0};
    // Under tracker_mutex: whether a loss is passed on is decided in the same step that marks the
    // rank lost, so a hold lifted once the loss is seen never lets that loss through.
    bool losses_held = false;

    // Declared before everything that does I/O through it: destroyed last.
    asio::io_context io;
    tcp::acceptor acceptor{io};
    asio::steady_timer check_timer{io};
    asio::steady_timer accept_retry_timer{io};
    tcp::endpoint bound;
    std::size_t pending_sessions = 0;                         // io thread only
    std::deque<std::weak_ptr<Session>> pending_queue;         // io thread only, oldest first
    std::unordered_map<std::string, std::size_t> pending_by_source;  // io thread only
    void make_room(const std::string& source);
    std::vector<std::weak_ptr<Session>> session_by_index;     // io thread only
    std::thread thread;
};

class Controller::Impl::Session : public std::enable_shared_from_this<Session> {
public:
    Session(Impl& owner, tcp::socket socket, std::string peer, std::string source)
        : owner_(owner),
          socket_(std::move(socket)),
          hello_timer_(owner.io),
          decoder_(std::min(wire::kMaxHelloPayload, owner.options.max_payload)),
          peer_(std::move(peer)),
          source_(std::move(source)) {}

    const std::string& source() const { return source_; }
    bool pending() const { return counted_pending_ && !closed_; }
    // Dropped to make room for a newer connection (ControllerOptions::max_pending_connections).
    void evict() { drop(DropReason::too_many_pending, "evicted: the oldest connection without HELLO"); }

    void start() {
        hello_timer_.expires_after(owner_.options.hello_timeout);
        hello_timer_.async_wait([self = shared_from_this()](const error_code& ec) {
            if (!ec && !self->slot_ && !self->closed_)
                self->drop(DropReason::hello_timeout, "no HELLO in time");
        });
        read();
    }

    // A newer process registered this role: this connection is history, not a failure.
    void close_superseded() { close(Ending::quiet); }

private:
    // gone: EOF or reset without BYE, its process ended. lost: cut by the controller, or failed
    // otherwise (a network fault may leave the process alive).
    enum class Ending { bye, gone, lost, quiet };

    void read() {
        const auto space = decoder_.receive_buffer(kReadChunkBytes);
        socket_.async_read_some(asio::buffer(space.data(), space.size()),
                                [self = shared_from_this()](const error_code& ec, std::size_t bytes) {
                                    self->on_read(ec, bytes);
                                });
    }

    void on_read(const error_code& ec, std::size_t bytes) {
        if (closed_) return;
        try {
            if (ec) return close(ec == asio::error::eof || ec == asio::error::connection_reset ? Ending::gone : Ending::lost);
            decoder_.commit(bytes);
            for (;;) {
                const auto status = decoder_.next(message_);
                if (status == wire::FrameDecoder::Status::need_more) break;
                if (status == wire::FrameDecoder::Status::error) return drop_for(decoder_.error());
                if (!handle()) return;
            }
            read();
        } catch (const std::exception& e) {
            owner_.log(ControlPlaneError{peer_, e.what()});
            close(Ending::lost);
        }
    }

    // false: the connection is closed.
    bool handle() {
        if (!slot_) {
            const auto* hello = std::get_if<wire::Hello>(&message_);
            if (!hello) {
                drop(DropReason::protocol_violation, "first frame is not HELLO");
                return false;
            }
            slot_ = owner_.admit(*hello, peer_);
            if (!slot_) {  // admit() logged why
                close(Ending::quiet);
                return false;
            }
            hello_timer_.cancel();
            decoder_.set_max_payload(owner_.options.max_payload);
            leave_pending();
            owner_.attach(*slot_, shared_from_this());
            return true;
        }
        if (const auto* beat = std::get_if<wire::Heartbeat>(&message_)) {
            if (owner_.on_heartbeat(*slot_, *beat)) return true;
            close(Ending::quiet);  // superseded, or already reported
            return false;
        }
        if (auto* event = std::get_if<wire::Event>(&message_)) {
            const std::string name = event->record.value("event", "");
            // A rank's last record (it is about to leave), acknowledged once the launcher holds
            // it (on_event queued it): the launcher's judgement never depends on how fast it came.
            const bool last = name == records::RoleFinished::kEvent || name == records::EndingJob::kEvent;
            if (owner_.on_event(*slot_, std::move(event->record)) && last) send_record_ack();
            return true;
        }
        if (std::holds_alternative<wire::Bye>(message_)) {
            close(Ending::bye);
            return false;
        }
        drop(DropReason::protocol_violation, std::holds_alternative<wire::Hello>(message_)
                                                 ? "second HELLO"
                                                 : "RECORD_ACK and PEER_LOST go from the controller to a rank, not back");
        return false;
    }

    void send_record_ack() {
        if (ack_sent_) return;  // one per connection: the rank leaves after it
        ack_sent_ = true;
        send(wire::RecordAck{}, "RECORD_ACK");
    }

public:
    // io thread only.
    void send_peer_lost(const wire::MpiProcess& process) {
        if (!closed_ && slot_) send(wire::PeerLost{process}, "PEER_LOST");
    }

private:
    void send(const wire::Message& message, const char* what) {
        outbox_.push_back({{}, what});
        wire::encode(message, outbox_.back().bytes);
        if (outbox_.size() == 1) write_next();
    }

    void write_next() {
        asio::async_write(socket_, asio::buffer(outbox_.front().bytes), [self = shared_from_this()](const error_code& ec, std::size_t) {
            // The rank left already (its wait is bounded); its EOF ends the session as usual.
            if (ec) {
                if (!self->closed_)
                    self->owner_.log(ControlPlaneError{
                        self->peer_, std::string(self->outbox_.front().name) + " not sent: " + ec.message()});
                self->outbox_.clear();
                return;
            }
            self->outbox_.pop_front();
            if (!self->outbox_.empty()) self->write_next();
        });
    }

    void drop_for(wire::DecodeError error) {
        using wire::DecodeError;
        const DropReason reason = error == DecodeError::oversize_length       ? DropReason::oversize_frame
                                  : error == DecodeError::unknown_type        ? DropReason::unknown_type
                                  : error == DecodeError::unsupported_version ? DropReason::unsupported_version
                                                                              : DropReason::malformed_frame;
        drop(reason, wire::to_string(error));
    }

    void drop(DropReason reason, std::string_view detail) {
        owner_.record_drop(reason, peer_, detail);
        close(Ending::lost);  // a registered rank whose connection we cut is lost to monitoring
    }

    void close(Ending ending) {
        if (closed_) return;
        closed_ = true;
        if (slot_ && ending != Ending::quiet) owner_.on_disconnect(*slot_, ending == Ending::bye, ending == Ending::gone);
        leave_pending();
        hello_timer_.cancel();
        error_code ignored;
        socket_.shutdown(tcp::socket::shutdown_both, ignored);
        socket_.close(ignored);
    }

    void leave_pending() {
        if (!counted_pending_) return;
        counted_pending_ = false;
        --owner_.pending_sessions;
        if (auto it = owner_.pending_by_source.find(source_); it != owner_.pending_by_source.end() && --it->second == 0)
            owner_.pending_by_source.erase(it);
    }

    Impl& owner_;
    tcp::socket socket_;
    asio::steady_timer hello_timer_;
    wire::FrameDecoder decoder_;
    wire::Message message_;  // reused: decoding a heartbeat into it allocates nothing
    std::optional<RankSlot> slot_;
    std::string peer_;
    std::string source_;  // the peer's address without the port
    struct Outgoing {
        std::vector<std::byte> bytes;
        const char* name;  // for the log
    };
    std::deque<Outgoing> outbox_;  // frames to the rank; the front one is being written
    bool ack_sent_ = false;
    bool closed_ = false;
    bool counted_pending_ = true;
};

Controller::Impl::Impl(ControllerOptions opts)
    : options(std::move(opts)),
      event_log(options.event_log ? options.event_log : std::make_shared<EventLog>(std::clog)),
      tracker(options.hang_timeout) {
    if (options.node_timeout > milliseconds::zero()) liveness.emplace(options.node_timeout, options.heartbeat_period);
    if (options.hang_timeout <= milliseconds::zero() || options.check_period <= milliseconds::zero() ||
        options.hello_timeout <= milliseconds::zero())
        throw std::invalid_argument("control plane: timeouts and the check period must be positive");
    const tcp::endpoint wanted(resolve_address(io, options.bind_address), options.port);
    error_code ec;
    acceptor.open(wanted.protocol(), ec);
    if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor.bind(wanted, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) bound = acceptor.local_endpoint(ec);
    if (ec) throw Error("control plane: cannot listen on " + format_endpoint(wanted) + ": " + ec.message());

    log(ControlPlaneListening{format_endpoint(bound), options.hang_timeout.count()});
    accept_next();
    schedule_check();
    thread = std::thread([this] {
        run_io_loop(io, [this](std::string_view what) { log(ControlPlaneError{std::nullopt, std::string(what)}); });
    });
}

Controller::Impl::~Impl() {
    io.stop();
    if (thread.joinable()) thread.join();
    if (liveness) {  // what the node timeout had to judge: each node's longest silence
        NodeSilence record{options.node_timeout.count(), options.heartbeat_period.count(), {}};
        for (const auto& [node, silence] : liveness->silences())
            record.nodes.push_back({node, silence.longest.count(), silence.heartbeats});
        log(record);
    }
    // Sessions still queued in handlers are destroyed with io, which is destroyed last.
}

void Controller::Impl::record_drop(DropReason reason, std::string_view peer, std::string_view detail) {
    ++drops[static_cast<std::size_t>(reason)];
    const std::uint64_t logged = drops_logged++;
    if (logged < kMaxLoggedDrops)
        log(ConnectionDropped{std::string(peer), std::string(to_string(reason)), std::string(detail)});
    else if (logged == kMaxLoggedDrops)
        log(ConnectionDropsUnlogged{static_cast<std::int64_t>(kMaxLoggedDrops), "further drops are only counted"});
}

template <class Callback, class... Args>
void Controller::Impl::invoke(const Callback& callback, std::string_view name, const Args&... args) noexcept {
    if (!callback) return;
    try {
        callback(args...);
    } catch (const std::exception& e) {
        log(CallbackFailed{std::string(name), e.what()});
    } catch (...) {
        log(CallbackFailed{std::string(name), "unknown exception"});
    }
}

std::optional<RankSlot> Controller::Impl::admit(const wire::Hello& hello, std::string_view peer) {
    if (!wire::tokens_equal(hello.token, options.token)) {
        record_drop(DropReason::bad_token, peer, "wrong token (claimed role " + hello.role + ")");
        return std::nullopt;
    }
    std::optional<RankInfo> previous;
    RankSlot slot;
    const auto now = ControlClock::now();
    {
        const std::lock_guard lock(tracker_mutex);
        if (liveness && liveness->lost(hello.hostname)) {
            // A node given up on stays given up: its processes take no role back.
            record_drop(DropReason::from_lost_node, peer, "role " + hello.role + ", pid " + std::to_string(hello.pid) +
                                                              " on " + hello.hostname + ", a node declared lost");
            return std::nullopt;
        }
        previous = tracker.find(hello.role);
        slot = tracker.register_rank(hello, now);
        if (liveness) liveness->watch(hello.role, hello.hostname, now);
    }
    RankRegistered registered{hello.role, hello.world_rank, hello.pid, hello.hostname, std::string(peer), std::nullopt};
    std::optional<RankIncident> superseded;
    if (previous && previous->status == RankStatus::active) {
        registered.supersedes_pid = previous->pid;
        if (previous->pid != hello.pid || previous->hostname != hello.hostname)
            superseded = make_incident(*previous, IncidentReason::superseded, now - previous->last_heartbeat);
    }
    log(registered);
    if (superseded) {
        log(RankSupersededRecord{fields_of(*superseded)});
        invoke(options.on_superseded, "on_superseded", *superseded);
    }
    return slot;
}

bool Controller::Impl::on_heartbeat(RankSlot slot, const wire::Heartbeat& beat) {
    const auto now = ControlClock::now();
    const std::lock_guard lock(tracker_mutex);
    if (!tracker.heartbeat(slot, beat, now)) return false;
    if (liveness)
        if (const RankInfo* info = tracker.current(slot)) liveness->heard(info->role, now);
    heartbeats.fetch_add(1, std::memory_order_relaxed);
    return true;
}

bool Controller::Impl::on_event(RankSlot slot, nlohmann::json record) {
    if (!record.is_object()) {  // only reachable through feed_event: the decoder checked the rest
        log(EventRejected{std::nullopt, std::nullopt, "an event must be a JSON object"});
        return false;
    }
    {
        const std::lock_guard lock(tracker_mutex);
        const RankInfo* info = tracker.current(slot);
        if (!info) return false;
        // Who sent it is the controller's word, not the rank's.
        record["source"] = info->role;
        record["source_rank"] = info->world_rank;
    }
    try {
        // A typed record (records.hpp) that is not what its name promises is refused here, so
        // the launcher only ever acts on well-formed ones; the connection stays.
        records::validate(record);
        event_log->log(record);
    } catch (const std::exception& e) {
        log(EventRejected{record.value("source", ""), record.value("event", ""), e.what()});
        return false;
    }
    invoke(options.on_event, "on_event", record);
    return true;
}

void Controller::Impl::on_disconnect(RankSlot slot, bool clean, bool process_gone) {
    std::optional<RankIncident> lost;
    std::optional<RankInfo> exited;
    std::optional<wire::MpiProcess> gone;
    {
        const std::lock_guard lock(tracker_mutex);
        if (const RankInfo* info = tracker.current(slot)) {
            if (clean) exited = *info;
            else if (process_gone && options.pass_on_losses && !losses_held) gone = info->mpi_process;
        }
        if (liveness)
            if (const RankInfo* info = tracker.current(slot)) liveness->forget(info->role);
        lost = tracker.disconnect(slot, clean, ControlClock::now());
    }
    if (exited)
        log(RankExited{exited->role, exited->pid, exited->step_tag});
    if (lost) {
        log(RankLostRecord{fields_of(*lost)});
        if (gone)
            asio::post(io, [this, index = slot.index, process = *gone, role = lost->role] { pass_on(index, process, role); });
        invoke(options.on_lost, "on_lost", *lost);
    }
}

void Controller::Impl::pass_on(std::uint32_t lost_index, const wire::MpiProcess& process, const std::string& role) {
    std::size_t recipients = 0;
    for (std::uint32_t i = 0; i < session_by_index.size(); ++i) {
        const auto session = session_by_index[i].lock();
        if (i == lost_index || !session) continue;
        session->send_peer_lost(process);
        ++recipients;
    }
    peer_lost_frames.fetch_add(recipients, std::memory_order_relaxed);
    log(RankLossPassedOn{role, process.nspace, process.rank, static_cast<std::int64_t>(recipients)});
}

void Controller::Impl::lose_node(const std::string& node) {
    std::vector<std::pair<RankIncident, std::optional<wire::MpiProcess>>> lost;
    std::vector<std::uint32_t> indexes;
    std::map<std::uint32_t, wire::MpiProcess> selves;  // what each lost process is told of itself
    {
        const std::lock_guard lock(tracker_mutex);
        const auto now = ControlClock::now();
        for (const RankSlot slot : tracker.active_on(node)) {
            const RankInfo* info = tracker.current(slot);
            std::optional<wire::MpiProcess> gone;
            if (info && options.pass_on_losses && !losses_held) gone = info->mpi_process;
            if (info && !losses_held && info->mpi_process) selves.emplace(slot.index, *info->mpi_process);
            if (info) liveness->forget(info->role);
            if (auto incident = tracker.disconnect(slot, false, now)) {
                incident->reason = IncidentReason::node_silent;
                lost.emplace_back(*incident, gone);
                indexes.push_back(slot.index);
            }
        }
    }
    NodeFellSilent silent{node, {}, lost.empty() ? 0 : lost.front().first.detection_latency.count(),
                          options.node_timeout.count(), liveness->evidence()};
    for (const auto& entry : lost) silent.roles.push_back(entry.first.role);
    log(silent);
    for (std::size_t i = 0; i < lost.size(); ++i) {
        const auto& [incident, gone] = lost[i];
        log(RankLostRecord{fields_of(incident)});
        // The lost process itself is told so, first: a frozen one reads it once thawed and ends
        // itself before it touches MPI again (runtime: on_peer_lost naming itself); its next
        // heartbeat is refused, which closes the connection. Then the others hear of the loss.
        std::optional<wire::MpiProcess> self;
        if (const auto it = selves.find(indexes[i]); it != selves.end()) self = it->second;
        asio::post(io, [this, index = indexes[i], passed_on = gone, self, role = incident.role] {
            if (self && index < session_by_index.size())
                if (const auto session = session_by_index[index].lock()) session->send_peer_lost(*self);
            if (passed_on) pass_on(index, *passed_on, role);
        });
        invoke(options.on_lost, "on_lost", incident);
    }
}

void Controller::Impl::run_check() {
    std::vector<RankIncident> newly_hung;
    ControlClock::duration paused{};
    std::vector<std::string> lost_nodes;
    {
        const std::lock_guard lock(tracker_mutex);
        paused = tracker.check(ControlClock::now(), newly_hung);
        if (liveness) lost_nodes = liveness->check(ControlClock::now());
    }
    for (const auto& node : lost_nodes) lose_node(node);
    if (paused > ControlClock::duration::zero())
        log(ControllerPaused{std::chrono::duration_cast<milliseconds>(paused).count(),
                             "the ranks' hang timers were restarted"});
    for (const RankIncident& incident : newly_hung) {
        log(RankHungRecord{fields_of(incident)});
        invoke(options.on_hung, "on_hung", incident);
    }
}

void Controller::Impl::accept_next() {
    acceptor.async_accept([this](const error_code& ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted) return;
        if (ec) {  // e.g. out of file descriptors: wait rather than spin, keep serving the others
            log(AcceptFailed{ec.message()});
            accept_retry_timer.expires_after(kAcceptRetryDelay);
            accept_retry_timer.async_wait([this](const error_code& wait_ec) {
                if (!wait_ec) accept_next();
            });
            return;
        }
        try {
            start_session(std::move(socket));
        } catch (const std::exception& e) {
            log(ControlPlaneError{std::nullopt, e.what()});
        }
        accept_next();
    });
}

void Controller::Impl::start_session(tcp::socket socket) {
    error_code ec;
    const auto remote = socket.remote_endpoint(ec);
    std::string peer = ec ? std::string("unknown") : format_endpoint(remote);
    std::string source = ec ? std::string("unknown") : remote.address().to_string();
    make_room(source);
    ++pending_sessions;
    ++pending_by_source[source];
    auto session = std::make_shared<Session>(*this, std::move(socket), std::move(peer), std::move(source));
    pending_queue.push_back(session);
    session->start();
}

void Controller::Impl::make_room(const std::string& source) {
    // Forget what left the pending state on its own (HELLO, timeout, error).
    while (!pending_queue.empty()) {
        const auto front = pending_queue.front().lock();
        if (front && front->pending()) break;
        pending_queue.pop_front();
    }
    const auto from_source = pending_by_source.find(source);
    const bool source_full = from_source != pending_by_source.end() &&
                             from_source->second >= std::max<std::size_t>(1, options.max_pending_per_source);
    const bool total_full = pending_sessions >= std::max<std::size_t>(1, options.max_pending_connections);
    if (!source_full && !total_full) return;
    // The oldest pending connection of this source if it is the one over its share, else the
    // oldest of all: it had the longest time to say HELLO.
    for (auto it = pending_queue.begin(); it != pending_queue.end(); ++it) {
        const auto session = it->lock();
        if (!session || !session->pending()) continue;
        if (source_full && session->source() != source) continue;
        pending_queue.erase(it);
        session->evict();
        return;
    }
}

void Controller::Impl::attach(RankSlot slot, const std::shared_ptr<Session>& session) {
    if (slot.index >= session_by_index.size()) session_by_index.resize(slot.index + 1);
    if (auto previous = session_by_index[slot.index].lock(); previous && previous != session)
        previous->close_superseded();
    session_by_index[slot.index] = session;
}

void Controller::Impl::schedule_check() {
    check_timer.expires_after(options.check_period);
    check_timer.async_wait([this](const error_code& ec) {
        if (ec) return;
        try {
            run_check();
        } catch (const std::exception& e) {
            log(ControlPlaneError{std::nullopt, e.what()});
        }
        schedule_check();
    });
}

Controller::Controller(ControllerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
Controller::~Controller() = default;

std::uint16_t Controller::port() const { return impl_->bound.port(); }
std::string Controller::endpoint() const { return format_endpoint(impl_->bound); }

std::optional<RankInfo> Controller::rank(const std::string& role) const {
    const std::lock_guard lock(impl_->tracker_mutex);
    return impl_->tracker.find(role);
}

std::vector<RankInfo> Controller::ranks() const {
    const std::lock_guard lock(impl_->tracker_mutex);
    return impl_->tracker.snapshot();
}

std::uint64_t Controller::drop_count(DropReason reason) const { return impl_->drops[static_cast<std::size_t>(reason)]; }
std::uint64_t Controller::heartbeat_count() const { return impl_->heartbeats.load(std::memory_order_relaxed); }
std::uint64_t Controller::peer_lost_count() const { return impl_->peer_lost_frames.load(std::memory_order_relaxed); }
void Controller::hold_losses(bool hold) {
    const std::lock_guard lock(impl_->tracker_mutex);
    impl_->losses_held = hold;
}

std::optional<RankSlot> Controller::feed_hello(const wire::Hello& hello) { return impl_->admit(hello, "direct"); }
bool Controller::feed_heartbeat(RankSlot slot, const wire::Heartbeat& beat) { return impl_->on_heartbeat(slot, beat); }
bool Controller::feed_event(RankSlot slot, nlohmann::json record) { return impl_->on_event(slot, std::move(record)); }
void Controller::feed_bye(RankSlot slot) { impl_->on_disconnect(slot, true, false); }
void Controller::feed_lost(RankSlot slot) { impl_->on_disconnect(slot, false, true); }
void Controller::check_now() { impl_->run_check(); }
}  // namespace flashrec::launcher
