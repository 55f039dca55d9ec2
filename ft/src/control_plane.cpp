#include "flashrec/ft/control_plane.hpp"

#include "flashrec/errors.hpp"
#include "flashrec/ft/contract.hpp"
#include "flashrec/ft/io_loop.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdlib>
#include <deque>
#include <unordered_map>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <tuple>

namespace flashrec::ft {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

std::optional<std::pair<std::string, std::uint16_t>> parse_host_port(std::string_view text) {
    std::string_view host;
    std::string_view port;
    if (text.starts_with('[')) {  // [v6]:port
        const auto close = text.find("]:");
        if (close == std::string_view::npos) return std::nullopt;
        host = text.substr(1, close - 1);
        port = text.substr(close + 2);
    } else {
        const auto colon = text.rfind(':');
        if (colon == std::string_view::npos || text.find(':') != colon) return std::nullopt;
        host = text.substr(0, colon);
        port = text.substr(colon + 1);
    }
    unsigned value = 0;
    const auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), value);
    if (host.empty() || port.empty() || error != std::errc{} || end != port.data() + port.size() ||
        value == 0 || value > 65535)
        return std::nullopt;
    return std::pair{std::string(host), static_cast<std::uint16_t>(value)};
}

// ------------------------------------------------------------------------------------------
// HeartbeatClient

namespace {

std::string local_hostname() {
    std::array<char, 256> buffer{};
    if (::gethostname(buffer.data(), buffer.size() - 1) != 0) return "unknown";
    std::string name(buffer.data());
    if (name.size() > wire::kMaxHostnameBytes) name.resize(wire::kMaxHostnameBytes);
    // The wire allows a conservative alphabet; anything else becomes '-' rather than a refusal.
    for (char& c : name)
        if (!wire::valid_hostname(std::string_view(&c, 1))) c = '-';
    return name.empty() ? "unknown" : name;
}

// Set by PRRTE for every process it starts, spawned ones included.
std::optional<wire::MpiProcess> mpi_process_from_environment() {
    const char* nspace = std::getenv("PMIX_NAMESPACE");
    const char* rank = std::getenv("PMIX_RANK");
    if (!nspace || !rank || !wire::valid_namespace(nspace)) return std::nullopt;
    const std::string_view text(rank);
    std::uint32_t value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    // PMIx reserves the ranks from 0xfffffff0 on (wildcard, local peers, ...).
    if (ec != std::errc{} || end != text.data() + text.size() || value >= 0xfffffff0u) return std::nullopt;
    return wire::MpiProcess{nspace, value};
}

}  // namespace

std::optional<HeartbeatClientOptions> HeartbeatClientOptions::from_environment(std::string role,
                                                                               std::int32_t world_rank) {
    const char* control = std::getenv(env::kControl);
    if (!control || !*control) return std::nullopt;
    if (!parse_host_port(control))
        throw ConfigError("environment", 0, env::kControl, "must be host:port, got '" + std::string(control) + "'");
    const char* token_hex = std::getenv(env::kToken);
    if (!token_hex) throw ConfigError("environment", 0, env::kToken, std::string("is missing while ") + env::kControl + " is set");
    const auto token = wire::token_from_hex(token_hex);
    if (!token) throw ConfigError("environment", 0, env::kToken, "must be 32 hex digits");  // never echo a secret
    HeartbeatClientOptions options;
    options.controller = control;
    options.token = *token;
    options.role = std::move(role);
    options.world_rank = world_rank;
    options.mpi_process = mpi_process_from_environment();
    return options;
}

struct HeartbeatClient::Impl {
    Impl(HeartbeatClientOptions opts, const StepProgress& step_progress);
    ~Impl();

    void connect();
    void on_connected();
    void watch_for_close();
    void schedule_tick();
    void flush();
    void stop();
    void give_up(const std::string& why);
    // The connection was lost or refused: reconnect (HELLO again) after a backoff, or give up
    // once options.reconnect_for has passed since it was lost.
    void connection_failed(const std::string& why);
    void close_socket();
    void say(std::string_view line) const;

    HeartbeatClientOptions options;
    const StepProgress& progress;
    std::string host;
    std::uint16_t port = 0;
    std::atomic<bool> active{true};
    std::atomic<bool> queue_full_reported{false};
    std::atomic<bool> write_in_progress{false};  // mirrors `writing` for flush(limit)

    std::mutex queue_mutex;
    std::vector<std::byte> queued;  // frames from any thread, guarded by queue_mutex
    std::vector<std::byte> hello_frame;  // sent first on every (re)connection
    bool hello_queued = true;            // guarded by queue_mutex: queued starts with hello_frame

    asio::io_context io;
    tcp::socket socket{io};
    asio::steady_timer tick{io};
    asio::steady_timer deadline{io};
    asio::steady_timer retry{io};
    // io thread only
    unsigned generation = 0;  // bumped per connection attempt: handlers of an old socket are ignored
    std::optional<std::chrono::steady_clock::time_point> lost_since;
    milliseconds backoff{50};
    std::chrono::steady_clock::time_point connected_at;
    int quick_closes = 0;  // connections in a row the controller closed within 1 s (a wrong token?)
    std::vector<std::byte> in_flight;
    wire::FrameDecoder from_controller{wire::kMaxControllerPayload};
    wire::Message received;
    std::atomic<bool> record_acked{false};
    bool connected = false;
    bool writing = false;
    bool heartbeat_due = false;
    bool bye_due = false;
    bool bye_written = false;
    bool stopping = false;
    bool connect_timed_out = false;
    std::thread thread;
};

HeartbeatClient::Impl::Impl(HeartbeatClientOptions opts, const StepProgress& step_progress)
    : options(std::move(opts)), progress(step_progress) {
    const auto address = parse_host_port(options.controller);
    if (!address) throw std::invalid_argument("control plane: controller must be host:port, got '" + options.controller + "'");
    if (options.period <= milliseconds::zero()) throw std::invalid_argument("control plane: heartbeat period must be positive");
    std::tie(host, port) = *address;
    // HELLO goes first; encoding it here reports a bad role to the caller, not to a log.
    wire::encode(wire::Hello{options.token, options.role, options.world_rank, static_cast<std::int32_t>(::getpid()),
                             local_hostname(), options.mpi_process},
                 hello_frame);
    queued = hello_frame;
    asio::post(io, [this] { connect(); });
    thread = std::thread([this] { run_io_loop(io, [this](std::string_view what) { say(what); }); });
}

HeartbeatClient::Impl::~Impl() {
    asio::post(io, [this] { stop(); });
    thread.join();
}

void HeartbeatClient::Impl::say(std::string_view line) const {
    const std::string text = "control plane (" + options.role + "): " + std::string(line);
    if (options.log) options.log(text);
    else std::cerr << "flashrec: " << text << '\n';
}

void HeartbeatClient::Impl::connect() {
    tcp::endpoint endpoint;
    try {
        endpoint = tcp::endpoint(resolve_address(io, host), port);
    } catch (const std::exception& e) {
        return give_up(e.what());
    }
    const unsigned gen = generation;
    connect_timed_out = false;
    deadline.expires_after(options.connect_timeout);
    deadline.async_wait([this, gen](const error_code& ec) {
        if (ec || gen != generation) return;
        connect_timed_out = true;
        close_socket();
    });
    socket.async_connect(endpoint, [this, gen](const error_code& ec) {
        if (gen != generation) return;
        deadline.cancel();
        if (stopping) return;
        if (ec) return connection_failed("cannot connect to " + options.controller + ": " +
                                         (connect_timed_out ? std::string("timed out") : ec.message()));
        on_connected();
    });
}

void HeartbeatClient::Impl::on_connected() {
    connected = true;
    connected_at = std::chrono::steady_clock::now();
    from_controller = wire::FrameDecoder(wire::kMaxControllerPayload);  // nothing of an earlier connection's stream
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // small frames; latency matters more
    watch_for_close();
    heartbeat_due = true;
    flush();
    schedule_tick();
}

// The controller sends RECORD_ACK and PEER_LOST; anything else, an error or EOF means it closed
// (or reset) the connection.
void HeartbeatClient::Impl::watch_for_close() {
    const unsigned gen = generation;
    const auto space = from_controller.receive_buffer(64);
    socket.async_read_some(asio::buffer(space.data(), space.size()), [this, gen](const error_code& ec, std::size_t bytes) {
        if (gen != generation) return;
        if (ec) {
            if (!stopping) connection_failed("the controller closed the connection (" + ec.message() + ")");
            return;
        }
        from_controller.commit(bytes);
        for (;;) {
            const auto status = from_controller.next(received);
            if (status == wire::FrameDecoder::Status::need_more) break;
            if (status == wire::FrameDecoder::Status::frame) {
                if (std::holds_alternative<wire::RecordAck>(received)) {
                    record_acked = true;
                    continue;
                }
                if (const auto* lost = std::get_if<wire::PeerLost>(&received)) {
                    if (options.on_peer_lost) options.on_peer_lost(lost->process);
                    continue;
                }
            }
            if (!stopping) connection_failed("the controller sent a frame a rank does not take");
            return;
        }
        watch_for_close();
    });
}

void HeartbeatClient::Impl::schedule_tick() {
    tick.expires_after(options.period);
    tick.async_wait([this](const error_code& ec) {
        if (ec || stopping || !active || !connected) return;
        const auto now = std::chrono::steady_clock::now();
        if (lost_since && now - connected_at >= std::chrono::seconds(1)) {
            // The new connection held (it was not closed right after HELLO): back to normal.
            say("reconnected to " + options.controller + " " +
                std::to_string(duration_cast<milliseconds>(connected_at - *lost_since).count()) +
                " ms after the connection was lost");
            lost_since.reset();
            backoff = milliseconds(50);
            quick_closes = 0;
        }
        heartbeat_due = true;
        flush();
        schedule_tick();
    });
}

// One write at a time. A heartbeat is encoded when it goes out, so it carries the current tag
// and a slow controller gets fewer heartbeats instead of a growing backlog.
void HeartbeatClient::Impl::flush() {
    if (!connected || writing || bye_written || !active) return;
    {
        const std::lock_guard lock(queue_mutex);
        in_flight.swap(queued);
        hello_queued = false;
    }
    if (heartbeat_due) {
        // Clamped so that a runtime bug cannot make every heartbeat throw.
        const std::int64_t tag = std::clamp(progress.step_tag.load(std::memory_order_relaxed),
                                            wire::kOptimizerStepTag, wire::kMaxStepTag);
        const wire::Phase phase = progress.phase.load(std::memory_order_relaxed);
        const bool known_phase = static_cast<std::uint8_t>(phase) <= wire::kMaxPhase;
        wire::encode(wire::Heartbeat{tag, known_phase ? phase : wire::Phase::idle}, in_flight);
        heartbeat_due = false;
    }
    if (bye_due) {
        wire::encode(wire::Bye{}, in_flight);
        bye_due = false;
        bye_written = true;
    }
    if (in_flight.empty()) return;
    writing = true;
    write_in_progress = true;
    const unsigned gen = generation;
    asio::async_write(socket, asio::buffer(in_flight), [this, gen](const error_code& ec, std::size_t) {
        if (gen != generation) return;
        writing = false;
        write_in_progress = false;
        in_flight.clear();
        if (ec) {
            if (!stopping) connection_failed("lost the connection to " + options.controller + " (" + ec.message() + ")");
            return;
        }
        if (bye_written) {
            deadline.cancel();
            error_code ignored;
            socket.shutdown(tcp::socket::shutdown_send, ignored);
            close_socket();
            return;
        }
        flush();
    });
}

void HeartbeatClient::Impl::stop() {
    stopping = true;
    tick.cancel();
    retry.cancel();
    if (!connected || !active) {  // still connecting, or already given up
        deadline.cancel();
        close_socket();
        return;
    }
    bye_due = true;
    flush();
    deadline.expires_after(options.bye_timeout);
    deadline.async_wait([this](const error_code& ec) {
        if (!ec) close_socket();  // a stuck controller must not hold up the rank's exit
    });
}

void HeartbeatClient::Impl::give_up(const std::string& why) {
    if (stopping || !active.exchange(false)) return;
    say(why + "; heartbeats stopped, training continues without the controller");
    tick.cancel();
    deadline.cancel();
    retry.cancel();
    close_socket();
}

void HeartbeatClient::Impl::connection_failed(const std::string& why) {
    if (stopping || !active) return;
    const auto now = std::chrono::steady_clock::now();
    if (connected) quick_closes = now - connected_at < std::chrono::seconds(1) ? quick_closes + 1 : 0;
    if (connected && !lost_since) backoff = milliseconds(50);
    if (quick_closes >= 5)
        return give_up(why + "; the controller closed 5 connections in a row right after HELLO "
                             "(is FLASHREC_TOKEN the job's?)");
    ++generation;  // whatever the old socket still reports is history
    connected = false;
    writing = false;
    write_in_progress = false;
    in_flight.clear();  // what was being written is lost; heartbeats are re-sent anyway
    tick.cancel();
    deadline.cancel();
    close_socket();
    socket = tcp::socket(io);
    if (!lost_since) {
        lost_since = now;
        say(why + "; reconnecting");
    }
    if (now - *lost_since >= options.reconnect_for)
        return give_up(why + " (reconnecting for " + std::to_string(options.reconnect_for.count()) + " ms failed)");
    {
        const std::lock_guard lock(queue_mutex);
        if (!hello_queued) queued.insert(queued.begin(), hello_frame.begin(), hello_frame.end());
        hello_queued = true;
    }
    retry.expires_after(backoff);
    backoff = std::min(backoff * 2, milliseconds(1000));
    retry.async_wait([this](const error_code& ec) {
        if (!ec && !stopping && active) connect();
    });
}

void HeartbeatClient::Impl::close_socket() {
    error_code ignored;
    socket.close(ignored);
}

HeartbeatClient::HeartbeatClient(HeartbeatClientOptions options, const StepProgress& progress)
    : impl_(std::make_unique<Impl>(std::move(options), progress)) {}

HeartbeatClient::~HeartbeatClient() = default;

bool HeartbeatClient::send_event(const nlohmann::json& record) noexcept {
    if (!impl_->active) return false;
    try {
        std::vector<std::byte> frame;
        wire::encode(wire::Event{record}, frame);
        {
            const std::lock_guard lock(impl_->queue_mutex);
            if (impl_->queued.size() + frame.size() > impl_->options.max_queued_event_bytes) {
                if (!impl_->queue_full_reported.exchange(true))
                    impl_->say("event queue full; dropping events until the controller catches up");
                return false;
            }
            impl_->queued.insert(impl_->queued.end(), frame.begin(), frame.end());
        }
        asio::post(impl_->io, [impl = impl_.get()] { impl->flush(); });
        return true;
    } catch (...) {  // invalid or oversize record: the caller learns it from the result
        return false;
    }
}

bool HeartbeatClient::flush(std::chrono::milliseconds limit) noexcept {
    asio::post(impl_->io, [impl = impl_.get()] { impl->flush(); });
    const auto until = std::chrono::steady_clock::now() + limit;
    for (;;) {
        if (!impl_->active) return false;
        bool empty = false;
        {
            const std::lock_guard lock(impl_->queue_mutex);
            empty = impl_->queued.empty();
        }
        if (empty && !impl_->write_in_progress) return true;
        if (std::chrono::steady_clock::now() >= until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
}

bool HeartbeatClient::send_final(const nlohmann::json& record, std::chrono::milliseconds limit) noexcept {
    if (!send_event(record)) return false;
    const auto until = std::chrono::steady_clock::now() + limit;
    while (!impl_->record_acked) {
        if (!impl_->active || std::chrono::steady_clock::now() >= until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
}

bool HeartbeatClient::active() const noexcept { return impl_->active; }

}  // namespace flashrec::ft
