// The control plane: frame codec (round trip, limits, fuzz), the hang rules on a fake clock,
// the event log, and controller + heartbeat client live on loopback.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "flashrec/errors.hpp"
#include "controller.hpp"
#include "flashrec/ft/control_plane.hpp"
#include "flashrec/ft/event_log.hpp"
#include "flashrec/ft/records.hpp"
#include "flashrec/ft/wire.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <regex>
#include <sstream>
#include <map>
#include <thread>

using namespace flashrec::ft;
using namespace flashrec::launcher;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

namespace {

std::vector<std::byte> encoded(const wire::Message& message, std::size_t cap = wire::kDefaultMaxPayload) {
    std::vector<std::byte> out;
    wire::encode(message, out, cap);
    return out;
}

std::vector<std::byte> bytes_of(std::string_view text) {
    const auto* first = reinterpret_cast<const std::byte*>(text.data());
    return {first, first + text.size()};
}

std::vector<std::byte> frame_of(std::vector<std::byte> payload) {
    std::vector<std::byte> out;
    const auto size = static_cast<std::uint32_t>(payload.size());
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>(size >> (8 * i)));
    out.insert(out.end(), payload.begin(), payload.end());
    return out;
}

wire::Hello hello_for(const wire::Token& token, std::string role, std::int32_t world_rank = 0,
                      std::optional<wire::MpiProcess> mpi_process = std::nullopt) {
    return wire::Hello{token, std::move(role), world_rank, 4242, "node-a", std::move(mpi_process)};
}

struct Decoded {
    std::vector<wire::Message> frames;
    wire::DecodeError error = wire::DecodeError::none;
};

Decoded decode_all(std::span<const std::byte> bytes, std::size_t cap = wire::kDefaultMaxPayload) {
    wire::FrameDecoder decoder(cap);
    decoder.feed(bytes);
    Decoded result;
    wire::Message message;
    for (;;) {
        const auto status = decoder.next(message);
        if (status == wire::FrameDecoder::Status::need_more) break;
        if (status == wire::FrameDecoder::Status::error) {
            result.error = decoder.error();
            break;
        }
        result.frames.push_back(message);
    }
    return result;
}

// Polls `condition` until it holds or `timeout` passes: every wait in these tests is bounded.
template <class Condition>
bool eventually(Condition condition, milliseconds timeout = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!condition()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(5ms);
    }
    return true;
}

std::vector<std::string> lines_of(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
}

bool log_has(const std::filesystem::path& path, std::string_view event, std::string_view needle) {
    for (const auto& line : lines_of(path)) {
        const auto record = nlohmann::json::parse(line);
        if (record["event"] == event && line.find(needle) != std::string::npos) return true;
    }
    return false;
}

// Collects the controller's callbacks for the test thread.
class Incidents {
public:
    void add(const RankIncident& incident) {
        const std::lock_guard lock(mutex_);
        seen_.push_back(incident);
    }
    std::vector<RankIncident> all() const {
        const std::lock_guard lock(mutex_);
        return seen_;
    }
    std::size_t count_for(const std::string& role) const {
        const std::lock_guard lock(mutex_);
        return static_cast<std::size_t>(
            std::count_if(seen_.begin(), seen_.end(), [&](const RankIncident& i) { return i.role == role; }));
    }
    std::optional<RankIncident> first_for(const std::string& role) const {
        const std::lock_guard lock(mutex_);
        for (const auto& incident : seen_)
            if (incident.role == role) return incident;
        return std::nullopt;
    }

private:
    mutable std::mutex mutex_;
    std::vector<RankIncident> seen_;
};

// A controller on an ephemeral loopback port, logging to its own temporary file.
struct LiveController {
    explicit LiveController(milliseconds hang_timeout = 30s, milliseconds hello_timeout = 5s,
                            std::size_t max_pending = 256, milliseconds node_timeout = 0ms) {
        static int serial = 0;
        log_path = std::filesystem::temp_directory_path() /
                   ("flashrec-cp-test-" + std::to_string(::getpid()) + "-" + std::to_string(serial++) + ".jsonl");
        std::filesystem::remove(log_path);
        ControllerOptions options;
        options.token = token;
        options.hang_timeout = hang_timeout;
        options.check_period = check_period;
        options.hello_timeout = hello_timeout;
        options.max_pending_connections = max_pending;
        options.node_timeout = node_timeout;
        options.event_log = std::make_shared<EventLog>(log_path);
        options.on_hung = [this](const RankIncident& incident) { hung.add(incident); };
        options.on_lost = [this](const RankIncident& incident) { lost.add(incident); };
        options.on_superseded = [this](const RankIncident& incident) { superseded.add(incident); };
        controller = std::make_unique<Controller>(std::move(options));
    }
    ~LiveController() {
        controller.reset();
        std::filesystem::remove(log_path);
    }

    HeartbeatClientOptions client_options(std::string role, std::int32_t world_rank = 0) const {
        HeartbeatClientOptions options;
        options.controller = controller->endpoint();
        options.token = token;
        options.role = std::move(role);
        options.world_rank = world_rank;
        options.period = 50ms;
        return options;
    }

    bool registered(const std::string& role, std::uint64_t min_heartbeats = 1) const {
        const auto info = controller->rank(role);
        return info && info->status == RankStatus::active && info->heartbeats >= min_heartbeats;
    }

    const milliseconds check_period = 50ms;
    wire::Token token = wire::generate_token();
    std::filesystem::path log_path;
    Incidents hung;
    Incidents lost;
    Incidents superseded;
    std::unique_ptr<Controller> controller;
};

// A hand-driven TCP connection to the controller, for what a well-behaved client never sends.
class RawConnection {
public:
    explicit RawConnection(std::uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
        REQUIRE(fd_ >= 0);
        sockaddr_in address{};
        address.sin_family = AF_INET;
        address.sin_port = htons(port);
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        REQUIRE(::connect(fd_, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
    }
    ~RawConnection() { ::close(fd_); }
    RawConnection(const RawConnection&) = delete;
    RawConnection& operator=(const RawConnection&) = delete;

    void send(std::span<const std::byte> bytes) {
        // The server may already have closed the connection: that is what some tests expect.
        (void)::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    }
    void send(const wire::Message& message) { send(encoded(message)); }

    // True when the server closed the connection before `timeout`.
    bool closed_by_peer_within(milliseconds timeout) {
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        std::array<char, 256> sink{};
        for (;;) {
            const auto left = std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left <= 0ms) return false;
            pollfd watched{fd_, POLLIN, 0};
            if (::poll(&watched, 1, static_cast<int>(left.count())) <= 0) continue;
            const auto got = ::recv(fd_, sink.data(), sink.size(), 0);
            if (got <= 0) return true;  // EOF or reset
        }
    }

private:
    int fd_;
};

// Captures a HeartbeatClient's diagnostics.
struct ClientLog {
    std::function<void(std::string_view)> sink() {
        return [this](std::string_view line) {
            const std::lock_guard lock(mutex);
            lines.emplace_back(line);
        };
    }
    std::size_t size() {
        const std::lock_guard lock(mutex);
        return lines.size();
    }
    std::mutex mutex;
    std::vector<std::string> lines;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Frame codec

TEST_CASE("wire: every frame type survives a round trip, whole or one byte at a time") {
    const wire::Token token = wire::generate_token();
    const std::vector<wire::Message> messages = {
        hello_for(token, "dp3.tp0.pp0", 17),
        hello_for(token, "spare:1", 63),
        hello_for(token, "dp0.tp0.pp0", 0, wire::MpiProcess{"prterun-node1-4711@1", 0}),
        hello_for(token, "spare:0", 4, wire::MpiProcess{std::string(wire::kMaxNamespaceBytes, 'n'), 0xffffffefu}),
        wire::Heartbeat{0, wire::Phase::idle},
        wire::Heartbeat{12, wire::Phase::compute},
        wire::Heartbeat{wire::kOptimizerStepTag, wire::Phase::optimizer},
        wire::Heartbeat{wire::kMaxStepTag, wire::Phase::parked},
        wire::Event{{{"event", "recovery.timeline"}, {"epoch", 2}, {"phases", {{"shrink_ms", 1.5}}}}},
        wire::Event{{{"event", "loss"}, {"step", 40}, {"value", 0.125}, {"note", "h\u00e9llo"}}},
        wire::Bye{},
        wire::RecordAck{},
        wire::PeerLost{{"prterun-node1-4711@2", 1}},
    };
    std::vector<std::byte> stream;
    for (const auto& message : messages) wire::encode(message, stream);

    const Decoded whole = decode_all(stream);
    CHECK(whole.error == wire::DecodeError::none);
    CHECK(whole.frames == messages);

    wire::FrameDecoder trickle;
    std::vector<wire::Message> frames;
    wire::Message message;
    for (std::byte byte : stream) {
        trickle.feed(std::span(&byte, 1));
        while (trickle.next(message) == wire::FrameDecoder::Status::frame) frames.push_back(message);
    }
    CHECK(frames == messages);
    CHECK(trickle.buffered_bytes() == 0);
}

TEST_CASE("wire: a payload of exactly the cap is accepted, one byte more is refused") {
    constexpr std::size_t cap = wire::kDefaultMaxPayload;
    // payload = type byte + JSON text; pad the JSON to hit the cap exactly.
    const std::string skeleton = nlohmann::json{{"event", "pad"}, {"x", ""}}.dump();
    const std::string padding(cap - 1 - skeleton.size(), 'a');
    const wire::Event at_cap{{{"event", "pad"}, {"x", padding}}};
    const auto frame = encoded(at_cap, cap);
    REQUIRE(frame.size() == wire::kLengthPrefixBytes + cap);
    const Decoded ok = decode_all(frame, cap);
    REQUIRE(ok.frames.size() == 1);
    CHECK(ok.frames[0] == wire::Message{at_cap});

    const wire::Event over{{{"event", "pad"}, {"x", padding + "a"}}};
    CHECK_THROWS_AS(encoded(over, cap), std::invalid_argument);
    auto oversize = frame;
    oversize[0] = static_cast<std::byte>(std::to_integer<int>(oversize[0]) + 1);  // declared cap + 1
    oversize.push_back(std::byte{'}'});
    CHECK(decode_all(oversize, cap).error == wire::DecodeError::oversize_length);

    // Judged on the prefix alone, before a single payload byte arrived.
    const std::vector<std::byte> huge_prefix = {std::byte{0xFF}, std::byte{0xFF}, std::byte{0xFF}, std::byte{0xFF}};
    CHECK(decode_all(huge_prefix, cap).error == wire::DecodeError::oversize_length);
}

TEST_CASE("wire: invalid fields are refused by the encoder and by the decoder") {
    const wire::Token token = wire::generate_token();
    CHECK_THROWS_AS(encoded(hello_for(token, "dp0 tp0")), std::invalid_argument);
    CHECK_THROWS_AS(encoded(hello_for(token, std::string(65, 'r'))), std::invalid_argument);
    CHECK_THROWS_AS(encoded(wire::Heartbeat{-2, wire::Phase::compute}), std::invalid_argument);
    CHECK_THROWS_AS(encoded(wire::Event{{{"no_event_name", 1}}}), std::invalid_argument);
    CHECK_THROWS_AS(encoded(wire::Event{nlohmann::json::array({1, 2})}), std::invalid_argument);
    CHECK_THROWS_AS(encoded(wire::PeerLost{{"", 1}}), std::invalid_argument);
    CHECK_THROWS_AS(encoded(wire::PeerLost{{"name space", 1}}), std::invalid_argument);
    CHECK_THROWS_AS(encoded(hello_for(token, "dp0.tp0.pp0", 0, wire::MpiProcess{std::string(256, 'n'), 0})),
                    std::invalid_argument);

    auto payload_of = [](const wire::Message& message) {
        auto frame = encoded(message);
        return std::vector<std::byte>(frame.begin() + wire::kLengthPrefixBytes, frame.end());
    };
    auto refused_as = [](std::vector<std::byte> payload) { return decode_all(frame_of(std::move(payload))).error; };
    using wire::DecodeError;

    auto hello = payload_of(hello_for(token, "dp0.tp0.pp0"));
    auto bad_version = hello;
    bad_version[1] = std::byte{99};
    CHECK(refused_as(bad_version) == DecodeError::unsupported_version);
    auto bad_role = hello;
    bad_role[1 + 1 + 16 + 4 + 4 + 1] = std::byte{'/'};  // first byte of the role
    CHECK(refused_as(bad_role) == DecodeError::malformed_hello);
    auto negative_pid = hello;
    negative_pid[1 + 1 + 16 + 4 + 3] = std::byte{0x80};
    CHECK(refused_as(negative_pid) == DecodeError::malformed_hello);
    auto trailing = hello;
    trailing.push_back(std::byte{0});
    CHECK(refused_as(trailing) == DecodeError::malformed_hello);
    hello.pop_back();
    CHECK(refused_as(hello) == DecodeError::malformed_hello);
    auto no_process_but_a_rank = payload_of(hello_for(token, "dp0.tp0.pp0"));
    no_process_but_a_rank.back() = std::byte{1};  // an empty namespace must come with rank 0
    CHECK(refused_as(no_process_but_a_rank) == DecodeError::malformed_hello);

    auto lost = payload_of(wire::PeerLost{{"ns@1", 3}});
    auto empty_namespace = lost;
    empty_namespace[1] = std::byte{0};
    empty_namespace.erase(empty_namespace.begin() + 2, empty_namespace.begin() + 6);
    CHECK(refused_as(empty_namespace) == DecodeError::malformed_peer_lost);
    auto space_in_namespace = lost;
    space_in_namespace[3] = std::byte{' '};
    CHECK(refused_as(space_in_namespace) == DecodeError::malformed_peer_lost);
    lost.push_back(std::byte{0});
    CHECK(refused_as(lost) == DecodeError::malformed_peer_lost);

    auto beat = payload_of(wire::Heartbeat{5, wire::Phase::compute});
    auto bad_phase = beat;
    bad_phase.back() = std::byte{99};
    CHECK(refused_as(bad_phase) == DecodeError::malformed_heartbeat);
    auto bad_tag = beat;
    for (std::size_t i = 1; i < 9; ++i) bad_tag[i] = std::byte{0xFF};
    bad_tag[1] = std::byte{0xFE};  // -2
    CHECK(refused_as(bad_tag) == DecodeError::malformed_heartbeat);
    beat.pop_back();
    CHECK(refused_as(beat) == DecodeError::malformed_heartbeat);

    auto event_payload = [](std::string_view json) {
        std::vector<std::byte> payload{std::byte{static_cast<std::uint8_t>(wire::FrameType::event)}};
        const auto text = bytes_of(json);
        payload.insert(payload.end(), text.begin(), text.end());
        return payload;
    };
    CHECK(refused_as(event_payload(R"({"event":"ok")")) == DecodeError::malformed_event);
    CHECK(refused_as(event_payload(R"([1,2])")) == DecodeError::malformed_event);
    CHECK(refused_as(event_payload(R"({"event":7})")) == DecodeError::malformed_event);
    CHECK(refused_as(event_payload(R"({"event":"a b"})")) == DecodeError::malformed_event);
    CHECK(refused_as(event_payload("{\"event\":\"x\",\"s\":\"\xff\"}")) == DecodeError::malformed_event);
    CHECK(refused_as(event_payload(R"({"event":"x"} trailing)")) == DecodeError::malformed_event);
    CHECK(refused_as(event_payload(R"({"event":"x","n":1e999})")) == DecodeError::malformed_event);
    const std::string deep = R"({"event":"x","d":)" + std::string(40, '[') + std::string(40, ']') + "}";
    CHECK(refused_as(event_payload(deep)) == DecodeError::malformed_event);
    CHECK(refused_as(event_payload(R"({"event":"x","d":"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["})")) ==
          DecodeError::none);  // brackets inside a string are text

    CHECK(refused_as({std::byte{static_cast<std::uint8_t>(wire::FrameType::bye)}, std::byte{0}}) ==
          DecodeError::malformed_bye);
    CHECK(refused_as({std::byte{0x7F}}) == DecodeError::unknown_type);
    CHECK(decode_all(std::vector<std::byte>(4, std::byte{0})).error == DecodeError::empty_payload);
}

TEST_CASE("wire: tokens") {
    const wire::Token a = wire::generate_token();
    const wire::Token b = wire::generate_token();
    CHECK_FALSE(wire::tokens_equal(a, b));
    CHECK(wire::tokens_equal(a, a));
    const std::string hex = wire::token_to_hex(a);
    CHECK(hex.size() == 32);
    CHECK(wire::token_from_hex(hex) == a);
    std::string upper = hex;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    CHECK(wire::token_from_hex(upper) == a);
    CHECK_FALSE(wire::token_from_hex(hex.substr(1)));
    CHECK_FALSE(wire::token_from_hex(hex.substr(1) + "g"));
}

TEST_CASE("wire: fuzz - random and mutated bytes never crash the decoder nor pass an oversize frame") {
    std::mt19937_64 rng(0x5eed'f1a5'4ecULL);
    auto uniform = [&](std::size_t low, std::size_t high) {
        return std::uniform_int_distribution<std::size_t>(low, high)(rng);
    };
    auto random_byte = [&] { return static_cast<std::byte>(uniform(0, 255)); };

    const wire::Token token = wire::generate_token();
    std::vector<std::vector<std::byte>> corpus = {
        encoded(hello_for(token, "dp0.tp1.pp2", 3)),
        encoded(hello_for(token, "spare:4", 9)),
        encoded(wire::Heartbeat{7, wire::Phase::grad_sync}),
        encoded(wire::Heartbeat{wire::kOptimizerStepTag, wire::Phase::optimizer}),
        encoded(wire::Event{{{"event", "loss"}, {"step", 3}, {"value", -1.5e-3}}}),
        encoded(wire::Event{{{"event", "x"}, {"list", {1, "two", nullptr, true, {{"k", "v"}}}}}}),
        encoded(wire::Bye{}),
    };
    const std::size_t single_frames = corpus.size();
    for (std::size_t i = 0; i < single_frames; ++i) {  // streams of several frames
        auto stream = corpus[i];
        const auto& other = corpus[(i + 3) % single_frames];
        stream.insert(stream.end(), other.begin(), other.end());
        corpus.push_back(std::move(stream));
    }

    auto mutate = [&](std::vector<std::byte> bytes) {
        const std::size_t rounds = uniform(0, 3) == 0 ? uniform(2, 4) : 1;  // mostly one change: deep reach
        for (std::size_t r = 0; r < rounds; ++r) {
            if (bytes.empty()) bytes.push_back(random_byte());
            const std::size_t at = uniform(0, bytes.size() - 1);
            switch (uniform(0, 7)) {
                case 0: bytes[at] ^= static_cast<std::byte>(1u << uniform(0, 7)); break;
                case 1: bytes[at] = random_byte(); break;
                case 2: bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at), random_byte()); break;
                case 3: bytes.erase(bytes.begin() + static_cast<std::ptrdiff_t>(at)); break;
                case 4: bytes.resize(at); break;
                case 5: {  // an interesting length prefix at the start
                    static constexpr std::uint32_t kLengths[] = {0, 1, 9, 10, 63, 64, 65, 1024, 65536, 65537,
                                                                 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF};
                    const std::uint32_t length = kLengths[uniform(0, std::size(kLengths) - 1)];
                    if (bytes.size() < 4) bytes.resize(4);
                    for (int i = 0; i < 4; ++i) bytes[static_cast<std::size_t>(i)] = static_cast<std::byte>(length >> (8 * i));
                    break;
                }
                case 6: {  // splice another corpus entry in
                    const auto& other = corpus[uniform(0, corpus.size() - 1)];
                    bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at), other.begin(), other.end());
                    break;
                }
                default: bytes[at] = std::byte{static_cast<std::uint8_t>("{}[]\"\\:,"[uniform(0, 7)])}; break;
            }
        }
        return bytes;
    };

    constexpr std::size_t kInputs = 120'000;
    constexpr std::size_t kCaps[] = {16, 64, 1024, wire::kDefaultMaxPayload};
    std::size_t accepted_frames = 0;
    std::size_t refused_inputs = 0;
    std::size_t failures = 0;
    std::string first_failure;
    auto fail = [&](const std::string& what, std::size_t input) {
        if (failures++ == 0) first_failure = what + " (input #" + std::to_string(input) + ")";
    };

    for (std::size_t input = 0; input < kInputs; ++input) {
        std::vector<std::byte> bytes;
        if (input % 2 == 0) {
            bytes.resize(uniform(0, 96));
            for (auto& byte : bytes) byte = random_byte();
            if (uniform(0, 3) == 0 && bytes.size() >= 4) {  // a plausible small length up front
                bytes[0] = static_cast<std::byte>(uniform(0, 40));
                bytes[1] = bytes[2] = bytes[3] = std::byte{0};
            }
        } else {
            bytes = mutate(corpus[uniform(0, corpus.size() - 1)]);
        }
        const std::size_t cap = kCaps[uniform(0, std::size(kCaps) - 1)];

        // Fed in random chunks, checked against an independent reading of the length prefixes.
        wire::FrameDecoder decoder(cap);
        wire::Message message;
        std::size_t fed = 0;
        std::size_t cursor = 0;  // where the model says the next frame starts
        std::vector<wire::Message> frames;
        bool refused = false;
        auto declared_length = [&](std::size_t at) {
            std::uint32_t length = 0;
            for (std::size_t i = 0; i < 4; ++i) length |= std::uint32_t{std::to_integer<std::uint8_t>(bytes[at + i])} << (8 * i);
            return length;
        };
        while (fed < bytes.size() && !refused) {
            const std::size_t chunk = std::min(bytes.size() - fed, uniform(1, 32));
            decoder.feed(std::span(bytes).subspan(fed, chunk));
            fed += chunk;
            for (;;) {
                const auto status = decoder.next(message);
                if (status == wire::FrameDecoder::Status::need_more) break;
                if (status == wire::FrameDecoder::Status::error) {
                    refused = true;
                    if (decoder.error() == wire::DecodeError::oversize_length &&
                        (cursor + 4 > fed || declared_length(cursor) <= cap))
                        fail("oversize reported for a frame within the cap", input);
                    break;
                }
                if (cursor + 4 > fed) {
                    fail("frame accepted before its prefix arrived", input);
                    break;
                }
                const std::uint32_t length = declared_length(cursor);
                if (length == 0 || length > cap) fail("accepted a frame of length " + std::to_string(length), input);
                cursor += 4 + length;
                if (cursor > fed) fail("accepted a frame before all of it arrived", input);
                frames.push_back(message);
                // Whatever was accepted re-encodes and decodes to the same message.
                const Decoded again = decode_all(encoded(message));
                if (again.frames.size() != 1 || !(again.frames[0] == message)) fail("round trip differs", input);
            }
        }
        // The same bytes in one piece give the same frames.
        const Decoded whole = decode_all(bytes, cap);
        if (whole.frames != frames || (whole.error != wire::DecodeError::none) != refused)
            fail("chunked and whole decoding disagree", input);
        accepted_frames += frames.size();
        refused_inputs += refused ? 1 : 0;
    }
    MESSAGE("fuzz: " << kInputs << " inputs, " << accepted_frames << " frames accepted, " << refused_inputs
                     << " inputs refused");
    CHECK_MESSAGE(failures == 0, first_failure);
    CHECK(accepted_frames > 10'000);  // the mutations reach past the framing into every decoder
    CHECK(refused_inputs > 10'000);
}

// ---------------------------------------------------------------------------------------------
// Hang rules, on a fake clock

TEST_CASE("tracker: silence, stall, parked spares, once per incident, supersede, disconnects") {
    const auto t0 = ControlClock::time_point{} + 1h;
    const milliseconds timeout = 1000ms;
    const wire::Token token{};
    RankTracker tracker(timeout);
    const RankSlot a = tracker.register_rank(hello_for(token, "dp0.tp0.pp0", 0), t0);
    const RankSlot b = tracker.register_rank(hello_for(token, "dp1.tp0.pp0", 1), t0);
    const RankSlot spare = tracker.register_rank(hello_for(token, "spare:0", 2), t0);
    std::vector<RankIncident> hung;

    auto beat = [&](RankSlot slot, std::int64_t tag, wire::Phase phase, milliseconds at) {
        return tracker.heartbeat(slot, wire::Heartbeat{tag, phase}, t0 + at);
    };

    SUBCASE("ranks that keep stepping together are never declared") {
        for (int step = 0; step < 20; ++step) {
            const auto at = milliseconds(900 * step);
            beat(a, step, wire::Phase::compute, at);
            beat(b, step, wire::Phase::compute, at);
            beat(spare, 0, wire::Phase::parked, at);
            tracker.check(t0 + at, hung);
        }
        CHECK(hung.empty());
    }
    SUBCASE("a silent rank is declared once, with its latency") {
        beat(a, 3, wire::Phase::compute, 0ms);
        for (auto at = 100ms; at <= 3000ms; at += 100ms) {
            beat(b, 3, wire::Phase::compute, at);
            beat(spare, 0, wire::Phase::parked, at);
            tracker.check(t0 + at, hung);
        }
        REQUIRE(hung.size() == 1);
        CHECK(hung[0].role == "dp0.tp0.pp0");
        CHECK(hung[0].reason == IncidentReason::no_heartbeat);
        CHECK(hung[0].last_step_tag == 3);
        CHECK(hung[0].detection_latency == 1000ms);
        CHECK(tracker.find("dp0.tp0.pp0")->hung);
    }
    SUBCASE("a rank whose tag stops while another's moves past is stalled; the one ahead is not") {
        beat(a, 4, wire::Phase::compute, 0ms);
        beat(b, 4, wire::Phase::compute, 0ms);
        beat(b, wire::kOptimizerStepTag, wire::Phase::optimizer, 200ms);  // b is in step 4's optimizer: ahead
        for (auto at = 100ms; at <= 3000ms; at += 100ms) {
            beat(a, 4, wire::Phase::grad_sync, at);
            beat(b, wire::kOptimizerStepTag, wire::Phase::optimizer, at);
            beat(spare, 0, wire::Phase::parked, at);
            tracker.check(t0 + at, hung);
        }
        REQUIRE(hung.size() == 1);
        CHECK(hung[0].role == "dp0.tp0.pp0");
        CHECK(hung[0].reason == IncidentReason::stalled);
        CHECK(hung[0].last_step_tag == 4);
        CHECK(hung[0].detection_latency == 1000ms);

        // It moves again: the incident is over, a new stall is a new incident.
        beat(a, wire::kOptimizerStepTag, wire::Phase::optimizer, 3100ms);
        CHECK_FALSE(tracker.find("dp0.tp0.pp0")->hung);
        beat(b, 6, wire::Phase::compute, 3100ms);
        for (auto at = 3200ms; at <= 5000ms; at += 100ms) {
            beat(a, wire::kOptimizerStepTag, wire::Phase::optimizer, at);
            beat(b, 6, wire::Phase::compute, at);
            beat(spare, 0, wire::Phase::parked, at);
            tracker.check(t0 + at, hung);
        }
        REQUIRE(hung.size() == 2);
        CHECK(hung[1].role == "dp0.tp0.pp0");
    }
    SUBCASE("ranks outside the step loop are not judged by the stall rule") {
        beat(b, 9, wire::Phase::compute, 0ms);
        for (auto at = 100ms; at <= 3000ms; at += 100ms) {
            beat(a, 2, wire::Phase::recovery, at);
            beat(b, 9, wire::Phase::compute, at);
            beat(spare, 0, wire::Phase::parked, at);
            tracker.check(t0 + at, hung);
        }
        CHECK(hung.empty());
    }
    SUBCASE("a pause of the checking process is not the ranks' silence") {
        for (auto at = 0ms; at <= 500ms; at += 100ms) {
            beat(a, 1, wire::Phase::compute, at);
            beat(b, 1, wire::Phase::compute, at);
            beat(spare, 0, wire::Phase::parked, at);
            CHECK(tracker.check(t0 + at, hung) == ControlClock::duration::zero());
        }
        // The launcher (or its host) stood still for 4.5 s, and so did everything it could hear.
        CHECK(tracker.check(t0 + 5000ms, hung) == 4500ms);
        CHECK(hung.empty());
        // Only b and the spare speak again: a is declared one timeout after the pause ended.
        for (auto at = 5100ms; at <= 6500ms; at += 100ms) {
            beat(b, 1, wire::Phase::compute, at);
            beat(spare, 0, wire::Phase::parked, at);
            tracker.check(t0 + at, hung);
        }
        REQUIRE(hung.size() == 1);
        CHECK(hung[0].role == "dp0.tp0.pp0");
        CHECK(hung[0].reason == IncidentReason::no_heartbeat);
        CHECK(hung[0].detection_latency == 1000ms);
    }
    SUBCASE("a replacement takes the role over; the old slot goes stale") {
        const RankSlot replacement = tracker.register_rank(hello_for(token, "dp0.tp0.pp0", 5), t0 + 10ms);
        CHECK(replacement.index == a.index);
        CHECK(replacement.generation == a.generation + 1);
        CHECK_FALSE(beat(a, 1, wire::Phase::compute, 20ms));
        CHECK(beat(replacement, 1, wire::Phase::compute, 20ms));
        CHECK_FALSE(tracker.disconnect(a, false, t0 + 30ms));  // the old connection dying is no news
        CHECK(tracker.find("dp0.tp0.pp0")->world_rank == 5);
        CHECK(tracker.find("dp0.tp0.pp0")->status == RankStatus::active);
    }
    SUBCASE("BYE is an exit; a drop without it is a loss; neither is judged afterwards") {
        beat(a, 1, wire::Phase::compute, 0ms);
        CHECK_FALSE(tracker.disconnect(a, true, t0 + 100ms));
        const auto loss = tracker.disconnect(b, false, t0 + 300ms);
        REQUIRE(loss);
        CHECK(loss->reason == IncidentReason::connection_lost);
        CHECK(loss->role == "dp1.tp0.pp0");
        CHECK(loss->detection_latency == 300ms);
        CHECK_FALSE(tracker.disconnect(b, false, t0 + 400ms));  // reported once
        tracker.check(t0 + 10s, hung);
        REQUIRE(hung.size() == 1);  // only the spare, silent all along
        CHECK(hung[0].role == "spare:0");
        CHECK(tracker.find("dp0.tp0.pp0")->status == RankStatus::exited);
        CHECK(tracker.find("dp1.tp0.pp0")->status == RankStatus::lost);
    }
}

// ---------------------------------------------------------------------------------------------
// Event log

TEST_CASE("event log: one JSON object per line, ts and event first, safe from many threads") {
    std::ostringstream out;
    {
        EventLog log(out);
        std::vector<std::thread> writers;
        for (int t = 0; t < 4; ++t)
            writers.emplace_back([&log, t] {
                for (int i = 0; i < 200; ++i) log.log_event("tick", {{"thread", t}, {"i", i}});
            });
        for (auto& writer : writers) writer.join();
        log.log({{"event", "custom"}, {"ts", "forged"}, {"zeta", 1}, {"alpha", "\xff"}});
        CHECK_THROWS_AS(log.log({{"no_event", 1}}), std::invalid_argument);
    }
    std::istringstream in(out.str());
    const std::regex leading(R"re(^\{"ts":"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z","event":"[a-z]+")re");
    std::size_t lines = 0;
    std::string last;
    for (std::string line; std::getline(in, line); ++lines) {
        CHECK(std::regex_search(line, leading));
        CHECK(nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false).is_object());
        last = line;
    }
    CHECK(lines == 801);
    const auto custom = nlohmann::json::parse(last);
    CHECK(custom["event"] == "custom");
    CHECK(custom["ts"] != "forged");
    CHECK(custom["zeta"] == 1);
    CHECK(iso8601_utc(std::chrono::system_clock::time_point{} + 1500ms) == "1970-01-01T00:00:01.500Z");
}

// ---------------------------------------------------------------------------------------------
// Controller and client, live on loopback

TEST_CASE("live: a client with the right token registers, its heartbeats move the tag, its events are logged") {
    LiveController live;
    StepProgress progress;
    {
        HeartbeatClient client(live.client_options("dp0.tp0.pp0", 3), progress);
        REQUIRE(eventually([&] { return live.registered("dp0.tp0.pp0"); }));
        const auto info = *live.controller->rank("dp0.tp0.pp0");
        CHECK(info.world_rank == 3);
        CHECK(info.pid == ::getpid());

        progress.step_tag = 7;
        progress.phase = wire::Phase::grad_sync;
        CHECK(eventually([&] {
            const auto now = live.controller->rank("dp0.tp0.pp0");
            return now->step_tag == 7 && now->phase == wire::Phase::grad_sync;
        }));
        CHECK(client.send_event({{"event", "loss"}, {"step", 7}, {"value", 2.5}}));
        CHECK_FALSE(client.send_event({{"no_name", 1}}));
        CHECK(eventually([&] { return log_has(live.log_path, "loss", R"("source":"dp0.tp0.pp0")"); }));
        CHECK(client.active());
    }
    CHECK(eventually([&] { return live.controller->rank("dp0.tp0.pp0")->status == RankStatus::exited; }));
    CHECK(log_has(live.log_path, "rank_registered", "dp0.tp0.pp0"));
    CHECK(live.lost.all().empty());
    CHECK(live.hung.all().empty());
}

TEST_CASE("live: a malformed typed record is refused and logged; the rank stays connected") {
    LiveController live;
    StepProgress progress;
    HeartbeatClient client(live.client_options("dp0.tp0.pp0"), progress);
    REQUIRE(eventually([&] { return live.registered("dp0.tp0.pp0"); }));
    // The launcher would act on an ending_job's exit code: one without it never reaches it.
    CHECK(client.send_event({{"event", "ending_job"}, {"v", 1}, {"pid", 5}, {"why", "no code"}}));
    CHECK(client.flush(2s));
    CHECK(eventually([&] {
        return log_has(live.log_path, "event_rejected", R"(record 'ending_job', field 'exit_code': missing)");
    }));
    CHECK_FALSE(log_has(live.log_path, "ending_job", R"("why":"no code")"));
    const auto before = live.controller->rank("dp0.tp0.pp0")->heartbeats;
    CHECK(eventually([&] { return live.registered("dp0.tp0.pp0", before + 2); }));
    CHECK(client.send_event(flashrec::ft::records::EndingJob{76, 5, "state lost", {}}.to_json()));
    CHECK(eventually([&] { return log_has(live.log_path, "ending_job", R"("exit_code":76)"); }));
    CHECK(live.controller->drop_count(DropReason::malformed_frame) == 0);
    CHECK(live.lost.all().empty());
}

TEST_CASE("live: a wrong token is refused and logged while the controller keeps serving others") {
    LiveController live;
    StepProgress progress;
    HeartbeatClient good(live.client_options("dp0.tp0.pp0"), progress);
    REQUIRE(eventually([&] { return live.registered("dp0.tp0.pp0"); }));

    RawConnection intruder(live.controller->port());
    intruder.send(hello_for(wire::generate_token(), "dp1.tp0.pp0"));
    CHECK(intruder.closed_by_peer_within(5s));
    CHECK(live.controller->drop_count(DropReason::bad_token) == 1);
    CHECK_FALSE(live.controller->rank("dp1.tp0.pp0"));
    CHECK(eventually([&] { return log_has(live.log_path, "connection_dropped", "bad_token"); }));

    // A client with a wrong token is told by the closed connection: it tries again (a cut
    // connection is retried), and after 5 connections closed right after HELLO it says so and stops.
    ClientLog messages;
    auto wrong = live.client_options("dp2.tp0.pp0");
    wrong.token = wire::generate_token();
    wrong.log = messages.sink();
    HeartbeatClient refused(wrong, progress);
    CHECK(eventually([&] { return !refused.active(); }));
    std::this_thread::sleep_for(200ms);
    CHECK(messages.size() == 2);  // "...; reconnecting", then giving up
    CHECK(live.controller->drop_count(DropReason::bad_token) == 6);

    const auto before = live.controller->rank("dp0.tp0.pp0")->heartbeats;
    CHECK(eventually([&] { return live.registered("dp0.tp0.pp0", before + 3); }));
    HeartbeatClient later(live.client_options("dp3.tp0.pp0"), progress);
    CHECK(eventually([&] { return live.registered("dp3.tp0.pp0"); }));
}

TEST_CASE("live: garbage, oversize and out-of-order frames are dropped without disturbing others") {
    LiveController live(30s, /*hello_timeout=*/300ms);
    StepProgress progress;
    HeartbeatClient good(live.client_options("dp0.tp0.pp0"), progress);
    REQUIRE(eventually([&] { return live.registered("dp0.tp0.pp0"); }));
    const std::uint16_t port = live.controller->port();

    struct Case {
        const char* name;
        std::vector<std::byte> bytes;
        std::optional<DropReason> reason;  // nullopt: random bytes, any reason will do
    };
    std::vector<Case> cases;
    cases.push_back({"an HTTP request", bytes_of("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), DropReason::oversize_frame});
    std::vector<std::byte> oversize(4);
    const std::uint32_t over = wire::kDefaultMaxPayload + 1;
    for (int i = 0; i < 4; ++i) oversize[static_cast<std::size_t>(i)] = static_cast<std::byte>(over >> (8 * i));
    cases.push_back({"a length one byte over the cap", oversize, DropReason::oversize_frame});
    cases.push_back({"a 1 KiB frame before HELLO (more than any HELLO)", frame_of(std::vector<std::byte>(1024)),
                     DropReason::oversize_frame});
    cases.push_back({"an unknown frame type", frame_of({std::byte{0x7F}, std::byte{1}}), DropReason::unknown_type});
    cases.push_back({"a heartbeat before HELLO", encoded(wire::Heartbeat{1, wire::Phase::compute}),
                     DropReason::protocol_violation});
    auto truncated_hello = encoded(hello_for(live.token, "dp9.tp0.pp0"));
    truncated_hello.resize(truncated_hello.size() - 3);
    truncated_hello[0] = static_cast<std::byte>(std::to_integer<int>(truncated_hello[0]) - 3);
    cases.push_back({"a truncated HELLO", truncated_hello, DropReason::malformed_frame});
    cases.push_back({"silence", {}, DropReason::hello_timeout});
    std::mt19937 rng(12345);
    for (int i = 0; i < 5; ++i) {
        std::vector<std::byte> noise(1 + rng() % 300);
        for (auto& byte : noise) byte = static_cast<std::byte>(rng());
        cases.push_back({"random bytes", noise, std::nullopt});
    }

    for (const Case& c : cases) {
        CAPTURE(c.name);
        const auto counted_before = c.reason ? live.controller->drop_count(*c.reason) : 0;
        RawConnection hostile(port);
        hostile.send(c.bytes);
        CHECK(hostile.closed_by_peer_within(5s));  // random bytes may wait for the HELLO timeout
        if (c.reason) CHECK(live.controller->drop_count(*c.reason) == counted_before + 1);
    }
    // A registered rank that turns hostile is cut off, and that is a loss.
    {
        RawConnection turncoat(port);
        turncoat.send(hello_for(live.token, "dp5.tp0.pp0"));
        turncoat.send(hello_for(live.token, "dp5.tp0.pp0"));
        CHECK(turncoat.closed_by_peer_within(5s));
        CHECK(eventually([&] { return live.lost.count_for("dp5.tp0.pp0") == 1; }));
    }

    const auto before = live.controller->rank("dp0.tp0.pp0")->heartbeats;
    CHECK(eventually([&] { return live.registered("dp0.tp0.pp0", before + 3); }));
    CHECK(good.active());
    CHECK(live.lost.count_for("dp0.tp0.pp0") == 0);
    CHECK(live.hung.all().empty());
    CHECK(eventually([&] { return log_has(live.log_path, "connection_dropped", "oversize_frame"); }));
}

TEST_CASE("live: connections that never say HELLO are capped; the oldest makes room for a rank") {
    // Issue 15 (4): under a flood of idle connections a rank that connects still registers.
    LiveController live(30s, 5s, /*max_pending=*/3);
    std::vector<std::unique_ptr<RawConnection>> idle;
    for (int i = 0; i < 3; ++i) idle.push_back(std::make_unique<RawConnection>(live.controller->port()));
    RawConnection one_more(live.controller->port());
    CHECK(idle.front()->closed_by_peer_within(5s));  // the oldest went, not the newcomer
    CHECK(live.controller->drop_count(DropReason::too_many_pending) == 1);
    StepProgress progress;
    HeartbeatClient client(live.client_options("dp0.tp0.pp0"), progress);
    CHECK(eventually([&] { return live.registered("dp0.tp0.pp0"); }, 5s));
    CHECK(live.controller->drop_count(DropReason::too_many_pending) == 2);
    CHECK(client.active());
}

TEST_CASE("live: a rank whose connection is cut reconnects and registers again") {
    // Issue 15 (4): the controller restarts on the same port (a cut connection, seen from the
    // rank): the client says HELLO again and its heartbeats resume.
    auto first = std::make_unique<LiveController>();
    const wire::Token token = first->token;
    ClientLog messages;
    StepProgress progress;
    auto options = first->client_options("dp0.tp0.pp0");
    options.log = messages.sink();
    HeartbeatClient client(options, progress);
    REQUIRE(eventually([&] { return first->registered("dp0.tp0.pp0"); }));
    const auto port = first->controller->port();
    first.reset();
    ControllerOptions again;
    again.token = token;
    again.port = port;
    again.event_log = std::make_shared<EventLog>(std::filesystem::temp_directory_path() /
                                                 ("flashrec-cp-test-reconnect-" + std::to_string(::getpid()) + ".jsonl"));
    Controller second(std::move(again));
    CHECK(eventually([&] {
        const auto info = second.rank("dp0.tp0.pp0");
        return info && info->status == RankStatus::active && info->heartbeats >= 3;
    }));
    CHECK(client.active());
    CHECK(eventually([&] { return messages.size() == 2; }));  // "...; reconnecting", "reconnected ..."
}

TEST_CASE("live: a rank whose heartbeats stop is declared hung within hang_timeout + a period") {
    const milliseconds hang_timeout = 600ms;
    LiveController live(hang_timeout);
    RawConnection frozen(live.controller->port());
    frozen.send(hello_for(live.token, "dp1.tp0.pp0", 1));
    const auto last_heartbeat = std::chrono::steady_clock::now();  // no later than its arrival
    frozen.send(wire::Heartbeat{3, wire::Phase::compute});
    REQUIRE(eventually([&] { return live.registered("dp1.tp0.pp0"); }));

    REQUIRE(eventually([&] { return live.hung.count_for("dp1.tp0.pp0") == 1; }, 10s));
    const auto noticed_after = std::chrono::steady_clock::now() - last_heartbeat;
    const auto incident = *live.hung.first_for("dp1.tp0.pp0");
    CHECK(incident.reason == IncidentReason::no_heartbeat);
    CHECK(incident.last_step_tag == 3);
    CHECK(incident.pid == 4242);
    CHECK(incident.hostname == "node-a");
    CHECK(incident.world_rank == 1);
    CHECK(incident.detection_latency >= hang_timeout);
    // hang_timeout + one check period, and a generous allowance for a loaded machine.
    CHECK(incident.detection_latency <= hang_timeout + live.check_period + 2s);
    CHECK(noticed_after >= hang_timeout);
    CHECK(log_has(live.log_path, "rank_hung", "no_heartbeat"));

    std::this_thread::sleep_for(5 * live.check_period);
    CHECK(live.hung.count_for("dp1.tp0.pp0") == 1);  // once per incident
}

TEST_CASE("live: a rank whose tag stops while another's moves is declared hung; spares are not") {
    const milliseconds hang_timeout = 600ms;
    LiveController live(hang_timeout);
    StepProgress stuck, moving, parked;
    stuck.step_tag = moving.step_tag = 4;
    stuck.phase = moving.phase = wire::Phase::compute;
    parked.phase = wire::Phase::parked;
    HeartbeatClient laggard(live.client_options("dp0.tp0.pp0", 0), stuck);
    HeartbeatClient leader(live.client_options("dp1.tp0.pp0", 1), moving);
    HeartbeatClient spare(live.client_options("spare:0", 2), parked);
    REQUIRE(eventually([&] {
        return live.registered("dp0.tp0.pp0") && live.registered("dp1.tp0.pp0") && live.registered("spare:0");
    }));
    moving.step_tag = wire::kOptimizerStepTag;
    moving.phase = wire::Phase::optimizer;
    std::this_thread::sleep_for(100ms);
    moving.step_tag = 5;
    moving.phase = wire::Phase::compute;

    REQUIRE(eventually([&] { return live.hung.count_for("dp0.tp0.pp0") == 1; }, 10s));
    const auto incident = *live.hung.first_for("dp0.tp0.pp0");
    CHECK(incident.reason == IncidentReason::stalled);
    CHECK(incident.last_step_tag == 4);
    CHECK(incident.pid == ::getpid());
    CHECK(incident.detection_latency >= hang_timeout);
    CHECK(incident.detection_latency <= hang_timeout + live.check_period + 2s);
    std::this_thread::sleep_for(hang_timeout + 4 * live.check_period);
    CHECK(live.hung.count_for("dp1.tp0.pp0") == 0);
    CHECK(live.hung.count_for("spare:0") == 0);
    CHECK(live.hung.all().size() == 1);
}

TEST_CASE("live: a last record (role_finished, ending_job) is acknowledged once the launcher holds it; a refused one is not") {
    LiveController live;
    StepProgress progress;
    HeartbeatClient client(live.client_options("dp0.tp0.pp0"), progress);
    REQUIRE(eventually([&] { return live.registered("dp0.tp0.pp0"); }));
    // The acknowledgement comes after the record was logged (and handed to the launcher).
    CHECK(client.send_final(flashrec::ft::records::RoleFinished{"dp0.tp0.pp0", 5, 300, "0123456789abcdef"}.to_json(), 20s));
    CHECK(log_has(live.log_path, "role_finished", R"("checksum":"0123456789abcdef")"));

    HeartbeatClient ending(live.client_options("dp2.tp0.pp0"), progress);
    REQUIRE(eventually([&] { return live.registered("dp2.tp0.pp0"); }));
    CHECK(ending.send_final(flashrec::ft::records::EndingJob{76, 7, "state lost", {}}.to_json(), 20s));
    CHECK(log_has(live.log_path, "ending_job", R"("exit_code":76)"));

    HeartbeatClient refused(live.client_options("dp1.tp0.pp0"), progress);
    REQUIRE(eventually([&] { return live.registered("dp1.tp0.pp0"); }));
    const auto start = std::chrono::steady_clock::now();
    CHECK_FALSE(refused.send_final({{"event", "role_finished"}, {"v", 1}, {"role", "dp1.tp0.pp0"}, {"pid", 6}}, 300ms));
    CHECK(std::chrono::steady_clock::now() - start >= 300ms);
    CHECK(eventually([&] { return log_has(live.log_path, "event_rejected", "role_finished"); }));
    CHECK(refused.active());  // the connection stays; the rank just goes on unacknowledged
    CHECK(live.lost.all().empty());
}

TEST_CASE("live: a clean BYE is not a failure") {
    const milliseconds hang_timeout = 400ms;
    LiveController live(hang_timeout);
    StepProgress progress;
    {
        HeartbeatClient client(live.client_options("dp0.tp0.pp0"), progress);
        REQUIRE(eventually([&] { return live.registered("dp0.tp0.pp0"); }));
    }
    CHECK(eventually([&] { return live.controller->rank("dp0.tp0.pp0")->status == RankStatus::exited; }));
    std::this_thread::sleep_for(hang_timeout + 4 * live.check_period);
    CHECK(live.hung.all().empty());
    CHECK(live.lost.all().empty());
    CHECK(log_has(live.log_path, "rank_exited", "dp0.tp0.pp0"));
}

TEST_CASE("live: a connection dropped without BYE is reported lost") {
    LiveController live;
    {
        RawConnection crash(live.controller->port());
        crash.send(hello_for(live.token, "dp2.tp0.pp0", 2));
        crash.send(wire::Heartbeat{11, wire::Phase::compute});
        REQUIRE(eventually([&] { return live.registered("dp2.tp0.pp0"); }));
    }
    REQUIRE(eventually([&] { return live.lost.count_for("dp2.tp0.pp0") == 1; }));
    const auto incident = *live.lost.first_for("dp2.tp0.pp0");
    CHECK(incident.reason == IncidentReason::connection_lost);
    CHECK(incident.last_step_tag == 11);
    CHECK(live.controller->rank("dp2.tp0.pp0")->status == RankStatus::lost);
}

TEST_CASE("live: a process's end is passed on to the others; a BYE, a cut connection and a teardown are not") {
    LiveController live;
    StepProgress progress;
    struct Heard {
        std::mutex mutex;
        std::vector<wire::MpiProcess> lost;
        void add(const wire::MpiProcess& p) {
            const std::lock_guard lock(mutex);
            lost.push_back(p);
        }
        std::vector<wire::MpiProcess> all() {
            const std::lock_guard lock(mutex);
            return lost;
        }
    } heard_a, heard_b;
    auto options_a = live.client_options("dp0.tp0.pp0", 0);
    options_a.mpi_process = wire::MpiProcess{"job@1", 0};
    options_a.on_peer_lost = [&](const wire::MpiProcess& p) { heard_a.add(p); };
    auto options_b = live.client_options("dp1.tp0.pp0", 1);
    options_b.mpi_process = wire::MpiProcess{"job@1", 1};
    options_b.on_peer_lost = [&](const wire::MpiProcess& p) { heard_b.add(p); };
    HeartbeatClient a(options_a, progress);
    HeartbeatClient b(options_b, progress);
    REQUIRE(eventually([&] { return live.registered("dp0.tp0.pp0") && live.registered("dp1.tp0.pp0"); }));

    auto status_of = [&](const std::string& role) { return live.controller->rank(role)->status; };
    {  // leaves on purpose
        RawConnection leaving(live.controller->port());
        leaving.send(hello_for(live.token, "dp2.tp0.pp0", 2, wire::MpiProcess{"job@1", 2}));
        leaving.send(wire::Bye{});
        REQUIRE(eventually([&] { return live.controller->rank("dp2.tp0.pp0") && status_of("dp2.tp0.pp0") == RankStatus::exited; }));
    }
    {  // the controller cuts it (a second HELLO): the process may live on
        RawConnection turncoat(live.controller->port());
        turncoat.send(hello_for(live.token, "dp3.tp0.pp0", 3, wire::MpiProcess{"job@1", 3}));
        turncoat.send(hello_for(live.token, "dp3.tp0.pp0", 3, wire::MpiProcess{"job@1", 3}));
        REQUIRE(eventually([&] { return live.controller->rank("dp3.tp0.pp0") && status_of("dp3.tp0.pp0") == RankStatus::lost; }));
    }
    live.controller->hold_losses(true);  // the launcher ends the attempt itself
    {
        RawConnection ended(live.controller->port());
        ended.send(hello_for(live.token, "dp4.tp0.pp0", 4, wire::MpiProcess{"job@1", 4}));
        REQUIRE(eventually([&] { return live.registered("dp4.tp0.pp0", 0); }));
    }
    REQUIRE(eventually([&] { return status_of("dp4.tp0.pp0") == RankStatus::lost; }));
    live.controller->hold_losses(false);
    {  // a spawned process (its own namespace) dies: EOF without BYE
        RawConnection victim(live.controller->port());
        victim.send(hello_for(live.token, "dp5.tp0.pp0", 5, wire::MpiProcess{"job@2", 0}));
        REQUIRE(eventually([&] { return live.registered("dp5.tp0.pp0", 0); }));
    }
    REQUIRE(eventually([&] { return !heard_a.all().empty() && !heard_b.all().empty(); }));
    // Frames to one connection keep their order: had an earlier end been passed on, it came first.
    CHECK(heard_a.all() == std::vector<wire::MpiProcess>{{"job@2", 0}});
    CHECK(heard_b.all() == std::vector<wire::MpiProcess>{{"job@2", 0}});
    CHECK(live.controller->peer_lost_count() == 2);
    CHECK(log_has(live.log_path, "rank_loss_passed_on", R"("nspace":"job@2")"));
    CHECK(a.active());  // PEER_LOST is a frame a rank takes: the connection stays
    CHECK(b.active());
}

TEST_CASE("live: when the controller disappears the client stops quietly and its destructor is prompt") {
    ClientLog messages;
    StepProgress progress;
    auto live = std::make_unique<LiveController>();
    auto options = live->client_options("dp0.tp0.pp0");
    options.log = messages.sink();
    options.reconnect_for = 500ms;
    auto client = std::make_unique<HeartbeatClient>(options, progress);
    REQUIRE(eventually([&] { return live->registered("dp0.tp0.pp0"); }));

    live.reset();  // the launcher died: the client retries for reconnect_for, then stops
    CHECK(eventually([&] { return !client->active(); }));
    for (int step = 0; step < 5; ++step) {  // the "trainer" keeps going
        progress.step_tag = step;
        std::this_thread::sleep_for(20ms);
    }
    CHECK(messages.size() == 2);
    CHECK_FALSE(client->send_event({{"event", "loss"}}));

    auto destroyed = std::async(std::launch::async, [&] { client.reset(); });
    CHECK(destroyed.wait_for(3s) == std::future_status::ready);
}

TEST_CASE("live: with no controller listening the client gives up once and exits promptly") {
    std::uint16_t free_port = 0;
    {  // a port that was just free: nothing listens there now
        LiveController gone;
        free_port = gone.controller->port();
    }
    ClientLog messages;
    StepProgress progress;
    HeartbeatClientOptions options;
    options.controller = "127.0.0.1:" + std::to_string(free_port);
    options.token = wire::generate_token();
    options.role = "dp0.tp0.pp0";
    options.log = messages.sink();
    options.reconnect_for = 500ms;
    auto client = std::make_unique<HeartbeatClient>(options, progress);
    CHECK(eventually([&] { return !client->active(); }, 5s));
    CHECK(messages.size() == 2);
    auto destroyed = std::async(std::launch::async, [&] { client.reset(); });
    CHECK(destroyed.wait_for(3s) == std::future_status::ready);

    // And a client destroyed right after it was made (its connect in flight) returns as promptly.
    auto connecting = std::async(std::launch::async, [&] { HeartbeatClient brief(options, progress); });
    CHECK(connecting.wait_for(3s) == std::future_status::ready);
}

TEST_CASE("direct feed: decoded frames bypass the sockets, with the same rules") {
    LiveController live;
    Controller& controller = *live.controller;
    CHECK_FALSE(controller.feed_hello(hello_for(wire::generate_token(), "dp0.tp0.pp0")));
    CHECK(controller.drop_count(DropReason::bad_token) == 1);

    constexpr int kRanks = 1000;
    std::vector<RankSlot> slots;
    for (int r = 0; r < kRanks; ++r) {
        const auto slot = controller.feed_hello(hello_for(live.token, "dp" + std::to_string(r) + ".tp0.pp0", r));
        REQUIRE(slot);
        slots.push_back(*slot);
    }
    for (int step = 1; step <= 10; ++step)
        for (const RankSlot slot : slots) CHECK(controller.feed_heartbeat(slot, wire::Heartbeat{step, wire::Phase::compute}));
    CHECK(controller.heartbeat_count() == 10u * kRanks);
    CHECK(controller.rank("dp999.tp0.pp0")->step_tag == 10);

    controller.feed_event(slots[0], {{"event", "recovery.timeline"}, {"epoch", 1}});
    CHECK(log_has(live.log_path, "recovery.timeline", R"("source":"dp0.tp0.pp0")"));
    controller.feed_bye(slots[1]);
    controller.feed_lost(slots[2]);
    controller.check_now();
    CHECK(live.lost.count_for("dp2.tp0.pp0") == 1);
    CHECK(live.lost.count_for("dp1.tp0.pp0") == 0);
    CHECK(controller.rank("dp1.tp0.pp0")->status == RankStatus::exited);
    CHECK_FALSE(controller.feed_heartbeat(slots[1], wire::Heartbeat{11, wire::Phase::compute}));
}

TEST_CASE("direct feed: a role taken by another process while its connection is open is superseded, once") {
    // Over shm, MPI's in-band detector declares a stopped process failed and a spare takes its
    // role while the stopped process's connection stays open (docs/ulfm-traps.md trap 1).
    LiveController live;
    Controller& controller = *live.controller;
    wire::Hello first = hello_for(live.token, "dp1.tp0.pp0", 1);
    first.pid = 1001;
    const auto old_slot = controller.feed_hello(first);
    REQUIRE(old_slot);
    wire::Hello again = first;  // the same process reconnecting: no failure
    const auto same = controller.feed_hello(again);
    REQUIRE(same);
    CHECK(live.superseded.all().empty());
    CHECK(controller.feed_heartbeat(*same, wire::Heartbeat{7, wire::Phase::grad_sync}));

    wire::Hello spare = first;
    spare.pid = 2002;
    REQUIRE(controller.feed_hello(spare));
    REQUIRE(live.superseded.count_for("dp1.tp0.pp0") == 1);
    const auto incident = *live.superseded.first_for("dp1.tp0.pp0");
    CHECK(incident.pid == 1001);
    CHECK(incident.reason == IncidentReason::superseded);
    CHECK(incident.last_step_tag == 7);
    CHECK(log_has(live.log_path, "rank_superseded", R"("pid":1001)"));
    // The superseded connection's close says nothing more; the role is the newcomer's.
    controller.feed_lost(*same);
    controller.check_now();
    CHECK(live.lost.all().empty());
    CHECK(controller.rank("dp1.tp0.pp0")->pid == 2002);

    wire::Hello after_exit = spare;  // a role whose process left cleanly: taken over, no incident
    const auto spare_slot = controller.feed_hello(spare);
    REQUIRE(spare_slot);
    controller.feed_bye(*spare_slot);
    after_exit.pid = 3003;
    REQUIRE(controller.feed_hello(after_exit));
    CHECK(live.superseded.count_for("dp1.tp0.pp0") == 1);
}

TEST_CASE("direct feed: a node whose ranks all fall silent while the others beat is lost; a HELLO from it later is refused") {
    // The node timeout of a direct launch (launcher/node_liveness.hpp; its rule has scenario tests
    // with a fake clock in test_node_liveness.cpp). Here: the controller acts on it.
    LiveController live(30s, 5s, 256, 300ms);
    Controller& controller = *live.controller;
    const auto hello_on = [&](const std::string& role, std::uint32_t rank, const std::string& host) {
        wire::Hello h = hello_for(live.token, role, static_cast<std::int32_t>(rank), wire::MpiProcess{"slurm.pmix.1.0", rank});
        h.hostname = host;
        h.pid = 5000 + static_cast<std::int32_t>(rank);
        return h;
    };
    std::map<std::string, RankSlot> slots;
    const std::vector<std::pair<std::string, std::string>> ranks = {
        {"dp0.tp0.pp0", "node-a"}, {"dp1.tp0.pp0", "node-a"}, {"dp2.tp0.pp0", "node-b"}, {"dp3.tp0.pp0", "node-b"},
        {"spare:0", "node-c"}};
    for (std::uint32_t r = 0; r < ranks.size(); ++r) {
        const auto slot = controller.feed_hello(hello_on(ranks[r].first, r, ranks[r].second));
        REQUIRE(slot);
        slots[ranks[r].first] = *slot;
    }
    // node-b falls silent; the others beat every 20 ms until it is declared lost (bounded wait).
    const auto give_up = std::chrono::steady_clock::now() + 60s;
    std::int64_t tag = 0;
    while (live.lost.count_for("dp2.tp0.pp0") == 0 && std::chrono::steady_clock::now() < give_up) {
        ++tag;
        for (const auto& [role, host] : ranks)
            if (host != "node-b") CHECK(controller.feed_heartbeat(slots[role], wire::Heartbeat{tag, wire::Phase::compute}));
        controller.check_now();
        std::this_thread::sleep_for(20ms);
    }
    REQUIRE(live.lost.count_for("dp2.tp0.pp0") == 1);
    REQUIRE(live.lost.count_for("dp3.tp0.pp0") == 1);
    CHECK(live.lost.first_for("dp2.tp0.pp0")->reason == IncidentReason::node_silent);
    CHECK(live.lost.count_for("dp0.tp0.pp0") == 0);
    CHECK(live.lost.count_for("spare:0") == 0);
    CHECK(controller.rank("dp3.tp0.pp0")->status == RankStatus::lost);
    CHECK(log_has(live.log_path, "node_lost", R"("node":"node-b")"));
    // Thawed: its process says HELLO again. Refused; the node stays lost.
    CHECK_FALSE(controller.feed_hello(hello_on("dp2.tp0.pp0", 2, "node-b")));
    CHECK(controller.drop_count(DropReason::from_lost_node) == 1);
    CHECK(controller.rank("dp2.tp0.pp0")->status == RankStatus::lost);
}

TEST_CASE("client options from the environment") {
    ::unsetenv("FLASHREC_CONTROL");
    ::unsetenv("FLASHREC_TOKEN");
    CHECK_FALSE(HeartbeatClientOptions::from_environment("dp0.tp0.pp0", 0));

    const wire::Token token = wire::generate_token();
    ::setenv("FLASHREC_CONTROL", "127.0.0.1:5999", 1);
    CHECK_THROWS_AS(HeartbeatClientOptions::from_environment("dp0.tp0.pp0", 0), flashrec::ConfigError);
    ::setenv("FLASHREC_TOKEN", "not-a-token", 1);
    CHECK_THROWS_AS(HeartbeatClientOptions::from_environment("dp0.tp0.pp0", 0), flashrec::ConfigError);
    ::setenv("FLASHREC_TOKEN", wire::token_to_hex(token).c_str(), 1);
    const auto options = HeartbeatClientOptions::from_environment("dp0.tp0.pp0", 4);
    REQUIRE(options);
    CHECK(options->controller == "127.0.0.1:5999");
    CHECK(options->token == token);
    CHECK(options->world_rank == 4);
    ::setenv("FLASHREC_CONTROL", "127.0.0.1", 1);
    CHECK_THROWS_AS(HeartbeatClientOptions::from_environment("dp0.tp0.pp0", 0), flashrec::ConfigError);
    ::unsetenv("FLASHREC_CONTROL");
    ::unsetenv("FLASHREC_TOKEN");

    CHECK(parse_host_port("[::1]:80") == std::pair<std::string, std::uint16_t>{"::1", 80});
    CHECK_FALSE(parse_host_port("host:0"));
    CHECK_FALSE(parse_host_port("host:65536"));
    CHECK_FALSE(parse_host_port(":80"));
    CHECK_FALSE(parse_host_port("::1:80"));
}
