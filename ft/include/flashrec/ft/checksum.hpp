// The one checksum flashrec uses for snapshots, replicas and checkpoint files: XXH3-64
// (much faster than CRC32 on the CPU, and 64 bits make an accidental match implausible).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace flashrec::ft {

std::uint64_t checksum(const void* data, std::size_t bytes);
// 16 lowercase hex digits, as written in manifests and logs.
std::string checksum_hex(std::uint64_t value);

// XXH3-64 over pieces given in order: digest() equals checksum() of their concatenation.
// Move-only (owns the hash state).
class ChecksumStream {
public:
    ChecksumStream();
    ~ChecksumStream();
    ChecksumStream(ChecksumStream&& other) noexcept;
    ChecksumStream& operator=(ChecksumStream&& other) noexcept;
    ChecksumStream(const ChecksumStream&) = delete;
    ChecksumStream& operator=(const ChecksumStream&) = delete;

    void reset();
    void update(const void* data, std::size_t bytes);
    std::uint64_t digest() const;

private:
    void* state_ = nullptr;
};

// The XXH3 kernel this CPU runs: "avx512", "avx2" or "library" (libxxhash's, SSE2 on x86-64).
// All compute the same hash; the widest one the CPU supports is used.
const char* checksum_kernel();

}  // namespace flashrec::ft
