#include "flashrec/ft/checksum.hpp"

#include <xxhash.h>

#include <cstdio>
#include <new>
#include <utility>

#include "checksum_kernel.hpp"

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
