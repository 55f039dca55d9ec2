#include "flashrec/ft/wire.hpp"

#include "flashrec/errors.hpp"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace flashrec::ft::wire {

namespace {

// Little-endian appends onto a frame under construction.
void put_u8(std::vector<std::byte>& out, std::uint8_t value) { out.push_back(std::byte{value}); }

void put_le(std::vector<std::byte>& out, std::uint64_t value, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>(value >> (8 * i)));
}

void put_text(std::vector<std::byte>& out, std::string_view text) {
    const auto* first = reinterpret_cast<const std::byte*>(text.data());
    out.insert(out.end(), first, first + text.size());
}

// Bounds-checked little-endian reads over a payload; every read reports whether it fitted.
class Reader {
public:
    explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}

    bool u8(std::uint8_t& value) {
        if (remaining() < 1) return false;
        value = std::to_integer<std::uint8_t>(bytes_[pos_++]);
        return true;
    }
    bool le(std::uint64_t& value, std::size_t bytes) {
        if (remaining() < bytes) return false;
        value = 0;
        for (std::size_t i = 0; i < bytes; ++i)
            value |= std::uint64_t{std::to_integer<std::uint8_t>(bytes_[pos_ + i])} << (8 * i);
        pos_ += bytes;
        return true;
    }
    bool u32(std::uint32_t& value) {
        std::uint64_t raw = 0;
        if (!le(raw, 4)) return false;
        value = static_cast<std::uint32_t>(raw);
        return true;
    }
    bool i32(std::int32_t& value) {
        std::uint32_t raw = 0;
        if (!u32(raw)) return false;
        value = static_cast<std::int32_t>(raw);
        return true;
    }
    bool i64(std::int64_t& value) {
        std::uint64_t raw = 0;
        if (!le(raw, 8)) return false;
        value = static_cast<std::int64_t>(raw);
        return true;
    }
    // A u8 length followed by that many bytes.
    bool short_text(std::string& text) {
        std::uint8_t length = 0;
        if (!u8(length) || remaining() < length) return false;
        text.assign(reinterpret_cast<const char*>(bytes_.data() + pos_), length);
        pos_ += length;
        return true;
    }
    std::span<const std::byte> rest() const { return bytes_.subspan(pos_); }
    std::size_t remaining() const { return bytes_.size() - pos_; }

private:
    std::span<const std::byte> bytes_;
    std::size_t pos_ = 0;
};

void put_mpi_process(std::vector<std::byte>& out, const MpiProcess& process) {
    put_u8(out, static_cast<std::uint8_t>(process.nspace.size()));
    put_text(out, process.nspace);
    put_le(out, process.rank, 4);
}

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

bool valid_name(std::string_view text, std::size_t max_bytes, bool allow_colon) {
    return !text.empty() && text.size() <= max_bytes &&
           std::all_of(text.begin(), text.end(),
                       [&](char c) { return is_name_char(c) || (allow_colon && c == ':'); });
}

// Nesting depth of JSON text, counting brackets outside strings. Runs before the parser so a
// deeply nested payload costs one linear scan and nothing else.
bool json_depth_within(std::string_view text, std::size_t max_depth) {
    std::size_t depth = 0;
    bool in_string = false;
    bool escaped = false;
    for (char c : text) {
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth) return false;
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return true;
}

bool valid_event_record(const nlohmann::json& record) {
    if (!record.is_object()) return false;
    const auto name = record.find("event");
    return name != record.end() && name->is_string() &&
           valid_event_name(name->get_ref<const std::string&>());
}

void encode_body(const Hello& hello, std::vector<std::byte>& out) {
    if (!valid_role(hello.role)) throw std::invalid_argument("control plane: invalid role key '" + hello.role + "'");
    if (!valid_hostname(hello.hostname))
        throw std::invalid_argument("control plane: invalid hostname '" + hello.hostname + "'");
    if (hello.world_rank < 0 || hello.pid <= 0)
        throw std::invalid_argument("control plane: HELLO needs world_rank >= 0 and pid > 0");
    put_u8(out, static_cast<std::uint8_t>(FrameType::hello));
    put_u8(out, kProtocolVersion);
    for (std::uint8_t byte : hello.token) put_u8(out, byte);
    put_le(out, static_cast<std::uint32_t>(hello.world_rank), 4);
    put_le(out, static_cast<std::uint32_t>(hello.pid), 4);
    put_u8(out, static_cast<std::uint8_t>(hello.role.size()));
    put_text(out, hello.role);
    put_u8(out, static_cast<std::uint8_t>(hello.hostname.size()));
    put_text(out, hello.hostname);
    // An empty namespace says "none"; its rank is then 0.
    if (hello.mpi_process && !valid_namespace(hello.mpi_process->nspace))
        throw std::invalid_argument("control plane: invalid MPI namespace '" + hello.mpi_process->nspace + "'");
    put_mpi_process(out, hello.mpi_process.value_or(MpiProcess{}));
}

void encode_body(const Heartbeat& beat, std::vector<std::byte>& out) {
    if (!valid_step_tag(beat.step_tag))
        throw std::invalid_argument("control plane: step tag out of range: " + std::to_string(beat.step_tag));
    if (static_cast<std::uint8_t>(beat.phase) > kMaxPhase)
        throw std::invalid_argument("control plane: unknown phase");
    put_u8(out, static_cast<std::uint8_t>(FrameType::heartbeat));
    put_le(out, static_cast<std::uint64_t>(beat.step_tag), 8);
    put_u8(out, static_cast<std::uint8_t>(beat.phase));
}

void encode_body(const Event& event, std::vector<std::byte>& out) {
    if (!valid_event_record(event.record))
        throw std::invalid_argument("control plane: an event must be a JSON object with a valid \"event\" name");
    // Invalid UTF-8 is replaced rather than thrown on: the decoder's parser would refuse it.
    const std::string text = event.record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (!json_depth_within(text, kMaxEventDepth))
        throw std::invalid_argument("control plane: event nested deeper than " + std::to_string(kMaxEventDepth));
    put_u8(out, static_cast<std::uint8_t>(FrameType::event));
    put_text(out, text);
}

void encode_body(const Bye&, std::vector<std::byte>& out) { put_u8(out, static_cast<std::uint8_t>(FrameType::bye)); }
void encode_body(const RecordAck&, std::vector<std::byte>& out) {
    put_u8(out, static_cast<std::uint8_t>(FrameType::record_ack));
}
void encode_body(const PeerLost& lost, std::vector<std::byte>& out) {
    if (!valid_namespace(lost.process.nspace))
        throw std::invalid_argument("control plane: invalid MPI namespace '" + lost.process.nspace + "'");
    put_u8(out, static_cast<std::uint8_t>(FrameType::peer_lost));
    put_mpi_process(out, lost.process);
}

// Namespace and rank; an empty namespace reads as none (with rank 0).
bool read_mpi_process(Reader& in, std::optional<MpiProcess>& out) {
    MpiProcess process;
    if (!in.short_text(process.nspace) || !in.u32(process.rank)) return false;
    if (process.nspace.empty()) {
        out.reset();
        return process.rank == 0;
    }
    if (!valid_namespace(process.nspace)) return false;
    out = std::move(process);
    return true;
}

DecodeError decode_hello(Reader& in, Message& out) {
    std::uint8_t version = 0;
    if (!in.u8(version)) return DecodeError::malformed_hello;
    if (version != kProtocolVersion) return DecodeError::unsupported_version;
    Hello hello;
    for (std::uint8_t& byte : hello.token)
        if (!in.u8(byte)) return DecodeError::malformed_hello;
    if (!in.i32(hello.world_rank) || !in.i32(hello.pid) || !in.short_text(hello.role) ||
        !in.short_text(hello.hostname) || !read_mpi_process(in, hello.mpi_process) || in.remaining() != 0)
        return DecodeError::malformed_hello;
    if (hello.world_rank < 0 || hello.pid <= 0 || !valid_role(hello.role) || !valid_hostname(hello.hostname))
        return DecodeError::malformed_hello;
    out = std::move(hello);
    return DecodeError::none;
}

DecodeError decode_heartbeat(Reader& in, Message& out) {
    Heartbeat beat;
    std::uint8_t phase = 0;
    if (!in.i64(beat.step_tag) || !in.u8(phase) || in.remaining() != 0) return DecodeError::malformed_heartbeat;
    if (!valid_step_tag(beat.step_tag) || phase > kMaxPhase) return DecodeError::malformed_heartbeat;
    beat.phase = static_cast<Phase>(phase);
    out = beat;
    return DecodeError::none;
}

DecodeError decode_event(Reader& in, Message& out) {
    const auto body = in.rest();
    const std::string_view text(reinterpret_cast<const char*>(body.data()), body.size());
    if (!json_depth_within(text, kMaxEventDepth)) return DecodeError::malformed_event;
    auto record = nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !valid_event_record(record)) return DecodeError::malformed_event;
    out = Event{std::move(record)};
    return DecodeError::none;
}

}  // namespace

Token generate_token() {
    Token token{};
    std::size_t filled = 0;
    while (filled < token.size()) {
        const ssize_t got = ::getrandom(token.data() + filled, token.size() - filled, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            throw Error(std::string("control plane: getrandom failed: ") + std::strerror(errno));
        }
        filled += static_cast<std::size_t>(got);
    }
    return token;
}

std::string token_to_hex(const Token& token) {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string hex;
    hex.reserve(token.size() * 2);
    for (std::uint8_t byte : token) {
        hex.push_back(kDigits[byte >> 4]);
        hex.push_back(kDigits[byte & 0xF]);
    }
    return hex;
}

std::optional<Token> token_from_hex(std::string_view hex) {
    Token token{};
    if (hex.size() != token.size() * 2) return std::nullopt;
    auto nibble = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    for (std::size_t i = 0; i < token.size(); ++i) {
        const int high = nibble(hex[2 * i]);
        const int low = nibble(hex[2 * i + 1]);
        if (high < 0 || low < 0) return std::nullopt;
        token[i] = static_cast<std::uint8_t>((high << 4) | low);
    }
    return token;
}

bool tokens_equal(const Token& a, const Token& b) {
    std::uint8_t difference = 0;
    for (std::size_t i = 0; i < a.size(); ++i) difference = static_cast<std::uint8_t>(difference | (a[i] ^ b[i]));
    return difference == 0;
}

std::string_view to_string(Phase phase) {
    switch (phase) {
        case Phase::idle: return "idle";
        case Phase::compute: return "compute";
        case Phase::grad_sync: return "grad_sync";
        case Phase::commit_wait: return "commit_wait";
        case Phase::optimizer: return "optimizer";
        case Phase::recovery: return "recovery";
        case Phase::parked: return "parked";
    }
    return "unknown";
}

bool valid_role(std::string_view role) { return valid_name(role, kMaxRoleBytes, /*allow_colon=*/true); }
bool valid_hostname(std::string_view hostname) { return valid_name(hostname, kMaxHostnameBytes, false); }
bool valid_event_name(std::string_view name) { return valid_name(name, kMaxEventNameBytes, true); }
bool valid_step_tag(std::int64_t tag) { return tag >= kOptimizerStepTag && tag <= kMaxStepTag; }
bool valid_namespace(std::string_view nspace) {
    return !nspace.empty() && nspace.size() <= kMaxNamespaceBytes &&
           std::all_of(nspace.begin(), nspace.end(), [](char c) { return c > ' ' && c < 0x7f; });
}

void encode(const Message& message, std::vector<std::byte>& out, std::size_t max_payload) {
    const std::size_t frame_start = out.size();
    put_le(out, 0, kLengthPrefixBytes);  // patched below, once the payload size is known
    try {
        std::visit([&](const auto& body) { encode_body(body, out); }, message);
    } catch (...) {
        out.resize(frame_start);  // leave `out` as it was
        throw;
    }
    const std::size_t payload = out.size() - frame_start - kLengthPrefixBytes;
    if (payload > max_payload) {
        out.resize(frame_start);
        throw std::invalid_argument("control plane: frame payload of " + std::to_string(payload) +
                                    " bytes exceeds the cap of " + std::to_string(max_payload));
    }
    for (std::size_t i = 0; i < kLengthPrefixBytes; ++i)
        out[frame_start + i] = static_cast<std::byte>(payload >> (8 * i));
}

std::string_view to_string(DecodeError error) {
    switch (error) {
        case DecodeError::none: return "none";
        case DecodeError::oversize_length: return "oversize_length";
        case DecodeError::empty_payload: return "empty_payload";
        case DecodeError::unknown_type: return "unknown_type";
        case DecodeError::unsupported_version: return "unsupported_version";
        case DecodeError::malformed_hello: return "malformed_hello";
        case DecodeError::malformed_heartbeat: return "malformed_heartbeat";
        case DecodeError::malformed_event: return "malformed_event";
        case DecodeError::malformed_bye: return "malformed_bye";
        case DecodeError::malformed_record_ack: return "malformed_record_ack";
        case DecodeError::malformed_peer_lost: return "malformed_peer_lost";
    }
    return "unknown";
}

DecodeError decode_payload(std::span<const std::byte> payload, Message& out) {
    Reader in(payload);
    std::uint8_t type = 0;
    if (!in.u8(type)) return DecodeError::empty_payload;
    switch (static_cast<FrameType>(type)) {
        case FrameType::hello: return decode_hello(in, out);
        case FrameType::heartbeat: return decode_heartbeat(in, out);
        case FrameType::event: return decode_event(in, out);
        case FrameType::bye:
            if (in.remaining() != 0) return DecodeError::malformed_bye;
            out = Bye{};
            return DecodeError::none;
        case FrameType::record_ack:
            if (in.remaining() != 0) return DecodeError::malformed_record_ack;
            out = RecordAck{};
            return DecodeError::none;
        case FrameType::peer_lost: {
            std::optional<MpiProcess> process;
            if (!read_mpi_process(in, process) || !process || in.remaining() != 0) return DecodeError::malformed_peer_lost;
            out = PeerLost{std::move(*process)};
            return DecodeError::none;
        }
    }
    return DecodeError::unknown_type;
}

FrameDecoder::FrameDecoder(std::size_t max_payload) : max_payload_(max_payload) {}

std::span<std::byte> FrameDecoder::receive_buffer(std::size_t min_bytes) {
    if (buffer_.size() - end_ < min_bytes && begin_ > 0) {  // reclaim consumed space first
        std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
        end_ -= begin_;
        begin_ = 0;
    }
    if (buffer_.size() - end_ < min_bytes) buffer_.resize(end_ + min_bytes);
    return std::span<std::byte>(buffer_).subspan(end_);
}

void FrameDecoder::commit(std::size_t bytes) {
    if (bytes > buffer_.size() - end_) throw std::logic_error("FrameDecoder::commit past the receive buffer");
    end_ += bytes;
}

void FrameDecoder::feed(std::span<const std::byte> bytes) {
    if (bytes.empty()) return;
    auto space = receive_buffer(bytes.size());
    std::memcpy(space.data(), bytes.data(), bytes.size());
    commit(bytes.size());
}

FrameDecoder::Status FrameDecoder::next(Message& out) {
    if (error_ != DecodeError::none) return Status::error;
    const std::size_t available = end_ - begin_;
    if (available < kLengthPrefixBytes) return Status::need_more;
    std::size_t length = 0;
    for (std::size_t i = 0; i < kLengthPrefixBytes; ++i)
        length |= std::size_t{std::to_integer<std::uint8_t>(buffer_[begin_ + i])} << (8 * i);
    // Judged on the prefix alone: an oversize frame is refused before any of it is buffered.
    if (length > max_payload_) error_ = DecodeError::oversize_length;
    else if (length == 0) error_ = DecodeError::empty_payload;
    if (error_ != DecodeError::none) return Status::error;
    if (available < kLengthPrefixBytes + length) return Status::need_more;

    const auto payload = std::span<const std::byte>(buffer_).subspan(begin_ + kLengthPrefixBytes, length);
    error_ = decode_payload(payload, out);
    if (error_ != DecodeError::none) return Status::error;
    begin_ += kLengthPrefixBytes + length;
    if (begin_ == end_) begin_ = end_ = 0;  // the common case: nothing to move later
    return Status::frame;
}

}  // namespace flashrec::ft::wire
