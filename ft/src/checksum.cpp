#include "flashrec/ft/checksum.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <utility>

#include "checksum_kernel.hpp"
#include "flashrec/ft/xxh3_blocks.hpp"

namespace flashrec::ft {

namespace {

using detail::ChecksumKernel;

const ChecksumKernel* library_kernel() {
    static const ChecksumKernel kernel{
        "library",
        [](const void* data, std::size_t bytes) -> std::uint64_t { return XXH3_64bits(data, bytes); },
        []() -> void* {
            XXH3_state_t* state = XXH3_createState();
            if (state) XXH3_64bits_reset(state);
            return state;
        },
        [](void* state) { XXH3_freeState(static_cast<XXH3_state_t*>(state)); },
        [](void* state) { XXH3_64bits_reset(static_cast<XXH3_state_t*>(state)); },
        [](void* state, const void* data, std::size_t bytes) {
            XXH3_64bits_update(static_cast<XXH3_state_t*>(state), data, bytes);
        },
        [](const void* state) -> std::uint64_t {
            return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state));
        }};
    return &kernel;
}

// A kernel's code may use its instructions anywhere (even to build its table), so it is only
// called once the CPU (and the OS's saved state) is known to support them.
const ChecksumKernel& pick() {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"))
        if (const ChecksumKernel* k = detail::avx512_kernel()) return *k;
    if (__builtin_cpu_supports("avx2"))
        if (const ChecksumKernel* k = detail::avx2_kernel()) return *k;
#endif
    return *library_kernel();
}

const ChecksumKernel& kernel() {
    static const ChecksumKernel& chosen = pick();
    return chosen;
}

}  // namespace

std::uint64_t checksum(const void* data, std::size_t bytes) { return kernel().hash(data, bytes); }

std::string checksum_hex(std::uint64_t value) {
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
    return text;
}

const char* checksum_kernel() { return kernel().name; }

ChecksumStream::ChecksumStream() : state_(kernel().create()) {
    if (!state_) throw std::bad_alloc();
}

ChecksumStream::~ChecksumStream() {
    if (state_) kernel().destroy(state_);
}

ChecksumStream::ChecksumStream(ChecksumStream&& other) noexcept
    : state_(std::exchange(other.state_, nullptr)) {}

ChecksumStream& ChecksumStream::operator=(ChecksumStream&& other) noexcept {
    if (this != &other) {
        if (state_) kernel().destroy(state_);
        state_ = std::exchange(other.state_, nullptr);
    }
    return *this;
}

void ChecksumStream::reset() { kernel().reset(state_); }
void ChecksumStream::update(const void* data, std::size_t bytes) { kernel().update(state_, data, bytes); }
std::uint64_t ChecksumStream::digest() const { return kernel().digest(state_); }

}  // namespace flashrec::ft

namespace flashrec::ft {

const char* checksum_algorithm_name(ChecksumAlgorithm algorithm) {
    switch (algorithm) {
        case ChecksumAlgorithm::xxh3_64: return "xxh3-64";
        case ChecksumAlgorithm::xxh3_64_blocks: return "xxh3-64-blocks-4k";
    }
    return "unknown";
}

std::optional<ChecksumAlgorithm> checksum_algorithm_from(std::uint64_t stored) {
    switch (stored) {
        case static_cast<std::uint64_t>(ChecksumAlgorithm::xxh3_64): return ChecksumAlgorithm::xxh3_64;
        case static_cast<std::uint64_t>(ChecksumAlgorithm::xxh3_64_blocks): return ChecksumAlgorithm::xxh3_64_blocks;
        default: return std::nullopt;
    }
}

static_assert(xxh3::kBlockBytes == 4096, "BlockChecksumStream's block buffer and the algorithm's name");

std::uint64_t combine_block_digests(const std::uint64_t* digests, std::size_t count) {
    return checksum(digests, count * sizeof(std::uint64_t));  // little-endian words: xxh3_blocks.hpp
}

std::uint64_t block_checksum(const void* data, std::size_t bytes) {
    BlockChecksumStream stream;
    stream.update(data, bytes);
    return stream.finish();
}

std::uint64_t checksum_by(ChecksumAlgorithm algorithm, const void* data, std::size_t bytes) {
    return algorithm == ChecksumAlgorithm::xxh3_64_blocks ? block_checksum(data, bytes) : checksum(data, bytes);
}

void BlockChecksumStream::reset() {
    digests_hash_.reset();
    pending_digests_ = 0;
    partial_bytes_ = 0;
}

void BlockChecksumStream::add_digest(std::uint64_t digest) {
    digests_[pending_digests_++] = digest;
    if (pending_digests_ == digests_.size()) flush_digests();
}

void BlockChecksumStream::flush_digests() {
    digests_hash_.update(digests_.data(), pending_digests_ * sizeof(std::uint64_t));
    pending_digests_ = 0;
}

void BlockChecksumStream::update(const void* data, std::size_t bytes) {
    const auto* in = static_cast<const unsigned char*>(data);
    constexpr std::size_t kBlock = xxh3::kBlockBytes;
    if (partial_bytes_ > 0) {
        const std::size_t n = std::min(bytes, kBlock - partial_bytes_);
        std::memcpy(partial_.data() + partial_bytes_, in, n);
        partial_bytes_ += n;
        in += n;
        bytes -= n;
        if (partial_bytes_ < kBlock) return;
        add_digest(checksum(partial_.data(), kBlock));
        partial_bytes_ = 0;
    }
    // Whole blocks straight from the caller's memory; a block is final only when the next byte
    // (or finish) shows that it is whole, but a whole block is whole whatever follows.
    for (; bytes >= kBlock; in += kBlock, bytes -= kBlock) add_digest(checksum(in, kBlock));
    if (bytes > 0) {
        std::memcpy(partial_.data(), in, bytes);
        partial_bytes_ = bytes;
    }
}

std::uint64_t BlockChecksumStream::finish() {
    if (partial_bytes_ > 0) add_digest(checksum(partial_.data(), partial_bytes_));
    partial_bytes_ = 0;
    flush_digests();
    return digests_hash_.digest();
}

}  // namespace flashrec::ft
