// The checksums flashrec uses for snapshots, replicas and checkpoint files: XXH3-64 (much
// faster than CRC32 on the CPU, and 64 bits make an accidental match implausible), and for
// snapshot buffers hashed on a GPU its block-parallel form (xxh3_blocks.hpp).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
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

// Which hash a stored checksum is: the value a snapshot segment's buffer table records per
// buffer (docs/snapshots.md, "Checksum algorithms"). 0 is what every segment made before
// algorithms were recorded holds in that word, so those read as XXH3-64.
enum class ChecksumAlgorithm : std::uint32_t {
    xxh3_64 = 0,         // XXH3-64 of the bytes: checksum(), ChecksumStream
    xxh3_64_blocks = 1,  // XXH3-64 of each 4 KiB block, then of the digests: block_checksum()
};
// "xxh3-64", "xxh3-64-blocks-4k"; "unknown" for a value no build knows.
const char* checksum_algorithm_name(ChecksumAlgorithm algorithm);
// The algorithm a stored word names; nullopt for one this build does not know (a newer build's).
std::optional<ChecksumAlgorithm> checksum_algorithm_from(std::uint64_t stored);

// A checksum with the algorithm that made it.
struct BufferChecksum {
    ChecksumAlgorithm algorithm = ChecksumAlgorithm::xxh3_64;
    std::uint64_t value = 0;
    bool operator==(const BufferChecksum&) const = default;
};

// The block-parallel checksum (xxh3_64_blocks), the host's reference: a GPU kernel computes
// the same value from the block digests (gpu/block_hash.hpp), and any host reads a buffer so
// hashed back with this. Its speed is checksum()'s: each block is hashed by the same kernel.
std::uint64_t block_checksum(const void* data, std::size_t bytes);
// The buffer's checksum from its block digests (XXH3-64 of the words, in block order).
std::uint64_t combine_block_digests(const std::uint64_t* digests, std::size_t count);
// The checksum of `bytes` by `algorithm`.
std::uint64_t checksum_by(ChecksumAlgorithm algorithm, const void* data, std::size_t bytes);

// block_checksum() over pieces given in order, of any sizes: finish() equals block_checksum()
// of their concatenation. Move-only.
class BlockChecksumStream {
public:
    BlockChecksumStream() = default;
    void reset();
    void update(const void* data, std::size_t bytes);
    // The checksum of everything given since the last reset(); the stream must be reset() before
    // it is used again.
    std::uint64_t finish();

private:
    void add_digest(std::uint64_t digest);
    void flush_digests();

    ChecksumStream digests_hash_;
    std::array<std::uint64_t, 512> digests_{};  // block digests not yet given to digests_hash_
    std::size_t pending_digests_ = 0;
    std::array<unsigned char, 4096> partial_{};  // a block's bytes seen so far, when pieces cut it
    std::size_t partial_bytes_ = 0;
};

// The XXH3 kernel this CPU runs: "avx512", "avx2" or "library" (libxxhash's, SSE2 on x86-64).
// All compute the same hash; the widest one the CPU supports is used.
const char* checksum_kernel();

}  // namespace flashrec::ft
