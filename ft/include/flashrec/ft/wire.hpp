// The control plane's wire format: length-prefixed binary frames between trainer ranks and the
// controller inside flashrec-launch. Pure code over bytes (no sockets, no clocks), so that the
// decoder can be fuzzed and the benchmark can feed decoded frames without a network.
// The byte layout is documented in docs/control-plane.md.
#pragma once
#include <nlohmann/json.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace flashrec::ft::wire {

inline constexpr std::size_t kLengthPrefixBytes = 4;
inline constexpr std::size_t kDefaultMaxPayload = 64 * 1024;
inline constexpr std::uint8_t kProtocolVersion = 2;  // 2: HELLO names the MPI process
inline constexpr std::size_t kMaxRoleBytes = 64;
inline constexpr std::size_t kMaxHostnameBytes = 255;
inline constexpr std::size_t kMaxEventNameBytes = 64;
inline constexpr std::size_t kMaxNamespaceBytes = 255;  // PMIX_MAX_NSLEN
// Deeper JSON is refused before parsing: it is never legitimate and costs stack to print.
inline constexpr std::size_t kMaxEventDepth = 32;
// Step tags are exact in a JSON double and 2 * tag cannot overflow (see RankTracker).
inline constexpr std::int64_t kMaxStepTag = std::int64_t{1} << 53;
// The largest HELLO: type, version, token, world rank, pid, role and hostname with their lengths,
// the MPI process's namespace with its length and its rank.
// Until a connection has authenticated, no larger frame is buffered for it.
inline constexpr std::size_t kMaxHelloPayload =
    1 + 1 + 16 + 4 + 4 + 1 + kMaxRoleBytes + 1 + kMaxHostnameBytes + 1 + kMaxNamespaceBytes + 4;
// The largest frame the controller sends (PEER_LOST): type, namespace with its length, rank.
inline constexpr std::size_t kMaxControllerPayload = 1 + 1 + kMaxNamespaceBytes + 4;
// FlashRecovery's step tag while the optimizer mutates state.
inline constexpr std::int64_t kOptimizerStepTag = -1;

// The per-job secret: 128 random bits, handed to ranks as 32 hex digits in FLASHREC_TOKEN.
using Token = std::array<std::uint8_t, 16>;
// From the kernel's CSPRNG (getrandom); throws flashrec::Error if it is unavailable.
Token generate_token();
std::string token_to_hex(const Token& token);
// Exactly 32 hex digits (either case); nullopt otherwise.
std::optional<Token> token_from_hex(std::string_view hex);
// Constant time: a wrong token must not reveal how many leading bytes were right.
bool tokens_equal(const Token& a, const Token& b);

// hello..bye go from a rank to the controller; record_ack and peer_lost from the controller to a rank.
enum class FrameType : std::uint8_t { hello = 1, heartbeat = 2, event = 3, bye = 4, record_ack = 5, peer_lost = 6 };

// What a rank is doing. The step tag alone cannot tell a parked spare or a rank in recovery
// (legitimately not stepping) from a stuck one.
enum class Phase : std::uint8_t {
    idle = 0,         // starting up, or between steps outside the step loop
    compute = 1,      // forward/backward of step i (tag i)
    grad_sync = 2,    // gradient all-reduce (tag i)
    commit_wait = 3,  // waiting for snapshot i-1 to be committed (tag i)
    optimizer = 4,    // optimizer update (tag -1)
    recovery = 5,     // inside the recovery protocol
    parked = 6,       // hot spare waiting for a role
};
inline constexpr std::uint8_t kMaxPhase = static_cast<std::uint8_t>(Phase::parked);
std::string_view to_string(Phase phase);

// A process as its MPI's runtime (PMIx) names it: namespace and rank (PMIX_NAMESPACE and
// PMIX_RANK in its environment). A spawned process has a namespace of its own.
struct MpiProcess {
    std::string nspace;
    std::uint32_t rank = 0;
    bool operator==(const MpiProcess&) const = default;
};

// First frame of every connection.
struct Hello {
    Token token{};
    std::string role;  // logical role key, e.g. "dp3.tp0.pp0" or "spare:1"
    std::int32_t world_rank = 0;
    std::int32_t pid = 0;
    std::string hostname;
    std::optional<MpiProcess> mpi_process;  // none: not started by a PMIx launcher
    bool operator==(const Hello&) const = default;
};

struct Heartbeat {
    std::int64_t step_tag = 0;  // i during step i, -1 during the optimizer, i+1 after
    Phase phase = Phase::idle;
    bool operator==(const Heartbeat&) const = default;
};

// A record the rank wants in the event log: a JSON object with a string "event" name.
struct Event {
    nlohmann::json record;
    bool operator==(const Event& other) const { return record == other.record; }
};

// The rank is leaving on purpose: its silence afterwards is not a failure.
struct Bye {
    bool operator==(const Bye&) const = default;
};

// Controller to rank: the launcher holds this rank's last record (role_finished or ending_job,
// records.hpp), so the rank may leave: what the launcher decides from it never depends on how
// fast it arrived or how the rank exits.
struct RecordAck {
    bool operator==(const RecordAck&) const = default;
};

// Controller to rank: another MPI process of the job is gone (its connection closed without
// BYE: its process ended). The rank passes it to its MPI as a process failure, whether or not
// PRRTE told it too (docs/control-plane.md, "Losses passed on").
struct PeerLost {
    MpiProcess process;
    bool operator==(const PeerLost&) const = default;
};

using Message = std::variant<Hello, Heartbeat, Event, Bye, RecordAck, PeerLost>;

// Field rules, shared by the encoder (fail early on the sender) and the decoder.
bool valid_role(std::string_view role);          // 1..64 of [A-Za-z0-9._:-]
bool valid_hostname(std::string_view hostname);  // 1..255 of [A-Za-z0-9._-]
bool valid_event_name(std::string_view name);    // 1..64 of [A-Za-z0-9._:-]
bool valid_step_tag(std::int64_t tag);           // -1 .. kMaxStepTag
bool valid_namespace(std::string_view nspace);   // 1..255 printable ASCII, no space

// Appends one frame (prefix + payload) to `out`. Throws std::invalid_argument for a message
// the decoder would refuse (bad field, payload over max_payload), so a bug shows at the sender.
void encode(const Message& message, std::vector<std::byte>& out,
            std::size_t max_payload = kDefaultMaxPayload);

enum class DecodeError : std::uint8_t {
    none,
    oversize_length,  // declared payload length over the cap
    empty_payload,
    unknown_type,
    unsupported_version,
    malformed_hello,
    malformed_heartbeat,
    malformed_event,
    malformed_bye,
    malformed_record_ack,
    malformed_peer_lost,
};
std::string_view to_string(DecodeError error);

// Decodes one payload (the bytes after the length prefix) into `out`. A heartbeat decoded into
// a Message that already holds a Heartbeat allocates nothing.
DecodeError decode_payload(std::span<const std::byte> payload, Message& out);

// Splits a byte stream into frames. Owns a reusable receive buffer: a socket reads straight
// into receive_buffer(), so the steady state copies and allocates nothing per frame.
class FrameDecoder {
public:
    enum class Status : std::uint8_t { need_more, frame, error };

    explicit FrameDecoder(std::size_t max_payload = kDefaultMaxPayload);

    // At least `min_bytes` of writable space after the buffered bytes; call commit(n) after
    // writing n bytes into it.
    std::span<std::byte> receive_buffer(std::size_t min_bytes);
    void commit(std::size_t bytes);
    // receive_buffer + copy + commit, for tests and fuzzing.
    void feed(std::span<const std::byte> bytes);

    // The next complete frame into `out`. After an error the decoder stays in error: the stream
    // has lost framing and the connection must be dropped.
    Status next(Message& out);
    DecodeError error() const { return error_; }
    std::size_t max_payload() const { return max_payload_; }
    // Applies from the next frame on (the controller raises it once a connection authenticated).
    void set_max_payload(std::size_t max_payload) { max_payload_ = max_payload; }
    std::size_t buffered_bytes() const { return end_ - begin_; }

private:
    std::size_t max_payload_;
    std::vector<std::byte> buffer_;
    std::size_t begin_ = 0;  // first unconsumed byte
    std::size_t end_ = 0;    // one past the last received byte
    DecodeError error_ = DecodeError::none;
};

}  // namespace flashrec::ft::wire
