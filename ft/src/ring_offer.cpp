#include "flashrec/ft/ring_offer.hpp"

#include <algorithm>
#include <cstring>

#include "flashrec/errors.hpp"

namespace flashrec::ft {

namespace {

constexpr char kMagic[4] = {'F', 'R', 'R', 'O'};

template <class T>
void put(std::string& out, T value) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &value, sizeof(T));
    out.append(bytes, sizeof(T));
}

class Reader {
public:
    explicit Reader(std::string_view in) : in_(in) {}
    template <class T>
    T get(const char* what) {
        need(sizeof(T), what);
        T value;
        std::memcpy(&value, in_.data() + at_, sizeof(T));
        at_ += sizeof(T);
        return value;
    }
    std::string_view take(std::size_t n, const char* what) {
        need(n, what);
        const std::string_view part = in_.substr(at_, n);
        at_ += n;
        return part;
    }
    bool done() const { return at_ == in_.size(); }

private:
    void need(std::size_t n, const char* what) const {
        if (in_.size() - at_ < n)
            throw Error("a ring offer is torn: it ends inside " + std::string(what) + " (byte " + std::to_string(at_) +
                        " of " + std::to_string(in_.size()) + ")");
    }
    std::string_view in_;
    std::size_t at_ = 0;
};

}  // namespace

bool RingOffer::holds_payload_of(int owner) const {
    return std::find(holds.begin(), holds.end(), owner) != holds.end();
}

bool RingOffer::operator==(const RingOffer& other) const {
    return holds == other.holds && payload.size() == other.payload.size() &&
           std::equal(payload.begin(), payload.end(), other.payload.begin(),
                      [](const BufferSpec& a, const BufferSpec& b) { return a.name == b.name && a.bytes == b.bytes; });
}

std::string RingOffer::encode() const {
    std::string out(kMagic, sizeof kMagic);
    put<std::uint32_t>(out, kFormat);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(holds.size()));
    for (int owner : holds) put<std::int32_t>(out, owner);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(payload.size()));
    for (const auto& b : payload) {
        put<std::uint32_t>(out, static_cast<std::uint32_t>(b.name.size()));
        out += b.name;
        put<std::uint64_t>(out, b.bytes);
    }
    return out;
}

RingOffer RingOffer::decode(std::string_view bytes) {
    if (bytes.empty()) throw Error("a ring offer is blank (a torn exchange?)");
    Reader in(bytes);
    if (in.take(sizeof kMagic, "its magic") != std::string_view(kMagic, sizeof kMagic))
        throw Error("a ring offer does not start with 'FRRO' (a torn exchange?)");
    if (const auto format = in.get<std::uint32_t>("its format"); format != kFormat)
        throw Error("a ring offer has format " + std::to_string(format) + "; this flashrec reads format " +
                    std::to_string(kFormat) + " (every process of a job must run the same build)");
    RingOffer offer;
    const auto owners = in.get<std::uint32_t>("the number of owners held");
    for (std::uint32_t i = 0; i < owners; ++i) offer.holds.push_back(in.get<std::int32_t>("an owner held"));
    const auto buffers = in.get<std::uint32_t>("the number of payload buffers");
    for (std::uint32_t i = 0; i < buffers; ++i) {
        const auto length = in.get<std::uint32_t>("a buffer name's length");
        BufferSpec b;
        b.name = std::string(in.take(length, "a buffer name"));
        b.bytes = in.get<std::uint64_t>("a buffer's size");
        offer.payload.push_back(std::move(b));
    }
    if (!in.done()) throw Error("a ring offer has bytes after its last buffer (a torn exchange?)");
    return offer;
}

}  // namespace flashrec::ft
