// The block-parallel snapshot checksum (ChecksumAlgorithm::xxh3_64_blocks, checksum.hpp), as
// code that compiles for the host and, under nvcc, for the GPU: the CUDA kernel
// (gpu/src/block_hash.cu) runs exactly these functions, and the host unit tests check them
// against libxxhash. docs/snapshots.md, "Checksum algorithms".
//
// Definition: a buffer is cut into blocks of kBlockBytes (the last one shorter); each block's
// digest is XXH3-64 (seed 0, default secret) of its bytes; the buffer's checksum is XXH3-64 of
// the digests in block order, as little-endian 64-bit words (0 blocks: XXH3-64 of nothing).
//
// XXH3-64 of a long input (> 240 bytes) keeps 8 accumulator lanes that never mix until the
// final merge, and the merge adds one term per lane pair (2k, 2k + 1). So one block is hashed
// by 4 threads, thread k computing lane pair k (block_term), and the block's digest is
// finish_block(sum of the 4 terms): no thread reads another's bytes, and the sum commutes.
// Blocks of at most 240 bytes (only ever a buffer's last one) are hashed whole by pair 0.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cstring>

#if defined(__CUDACC__)
#define FLASHREC_HOST_DEVICE __host__ __device__
#else
#define FLASHREC_HOST_DEVICE
#endif

// C++17 as well (nvcc compiles the kernel as C++17): no std::endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the checksum reads little-endian words");

namespace flashrec::ft::xxh3 {

using u8 = unsigned char;
using u32 = std::uint32_t;
using u64 = std::uint64_t;

inline constexpr std::size_t kBlockBytes = 4096;
inline constexpr unsigned kPairsPerBlock = 4;   // threads per block on the GPU
inline constexpr std::size_t kMidsizeMax = 240;  // longer inputs take the 8-lane path

inline constexpr u64 kPrime32_1 = 0x9E3779B1U;
inline constexpr u64 kPrime32_2 = 0x85EBCA77U;
inline constexpr u64 kPrime32_3 = 0xC2B2AE3DU;
inline constexpr u64 kPrime64_1 = 0x9E3779B185EBCA87ULL;
inline constexpr u64 kPrime64_2 = 0xC2B2AE3D27D4EB4FULL;
inline constexpr u64 kPrime64_3 = 0x165667B19E3779F9ULL;
inline constexpr u64 kPrime64_4 = 0x85EBCA77C2B2AE63ULL;
inline constexpr u64 kPrime64_5 = 0x27D4EB2F165667C5ULL;

// XXH3's default secret (XXH3_kSecret, 192 bytes) as little-endian words, and the two
// unaligned key sets the long path needs, read once here rather than per stripe.
struct Keys {
    u64 secret[24];
    u64 last_stripe[8];  // at byte 121 (secret size - 64 - 7): the last stripe's keys
    u64 merge[8];        // at byte 11: the final merge's keys
};

namespace detail {
inline constexpr u8 kSecretBytes[192] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

constexpr u64 secret_word_at(std::size_t byte) {
    u64 v = 0;
    for (std::size_t i = 0; i < 8; ++i) v |= static_cast<u64>(kSecretBytes[byte + i]) << (8 * i);
    return v;
}
}  // namespace detail

constexpr Keys make_keys() {
    Keys k{};
    for (std::size_t i = 0; i < 24; ++i) k.secret[i] = detail::secret_word_at(8 * i);
    for (std::size_t i = 0; i < 8; ++i) k.last_stripe[i] = detail::secret_word_at(121 + 8 * i);
    for (std::size_t i = 0; i < 8; ++i) k.merge[i] = detail::secret_word_at(11 + 8 * i);
    return k;
}

// ---- primitives (little-endian loads; GPUs and the hosts we run are little-endian) ----------

FLASHREC_HOST_DEVICE inline u64 read64(const u8* p) {
#if defined(__CUDA_ARCH__)
    if ((reinterpret_cast<std::uintptr_t>(p) & 7U) == 0) return *reinterpret_cast<const u64*>(p);
    u64 v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
#else
    u64 v;
    std::memcpy(&v, p, sizeof v);
    return v;
#endif
}

FLASHREC_HOST_DEVICE inline u32 read32(const u8* p) {
#if defined(__CUDA_ARCH__)
    if ((reinterpret_cast<std::uintptr_t>(p) & 3U) == 0) return *reinterpret_cast<const u32*>(p);
    u32 v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
    return v;
#else
    u32 v;
    std::memcpy(&v, p, sizeof v);
    return v;
#endif
}

// Two consecutive words; one 16-byte load on the GPU when aligned (the common case).
FLASHREC_HOST_DEVICE inline void read128(const u8* p, u64& lo, u64& hi) {
#if defined(__CUDA_ARCH__)
    if ((reinterpret_cast<std::uintptr_t>(p) & 15U) == 0) {
        const ulonglong2 v = *reinterpret_cast<const ulonglong2*>(p);
        lo = v.x;
        hi = v.y;
        return;
    }
#endif
    lo = read64(p);
    hi = read64(p + 8);
}

FLASHREC_HOST_DEVICE inline u64 mul128_fold64(u64 a, u64 b) {
#if defined(__CUDA_ARCH__)
    return (a * b) ^ __umul64hi(a, b);
#else
    __extension__ using u128 = unsigned __int128;  // GCC and Clang: one MUL on x86-64
    const u128 product = static_cast<u128>(a) * b;
    return static_cast<u64>(product) ^ static_cast<u64>(product >> 64);
#endif
}

FLASHREC_HOST_DEVICE inline u64 mult32to64(u64 a, u64 b) { return (a & 0xFFFFFFFFULL) * (b & 0xFFFFFFFFULL); }
FLASHREC_HOST_DEVICE inline u64 xorshift(u64 v, int shift) { return v ^ (v >> shift); }
FLASHREC_HOST_DEVICE inline u64 rotl64(u64 v, int r) { return (v << r) | (v >> (64 - r)); }
FLASHREC_HOST_DEVICE inline u32 swap32(u32 v) {
    return ((v << 24) & 0xff000000U) | ((v << 8) & 0x00ff0000U) | ((v >> 8) & 0x0000ff00U) | ((v >> 24) & 0xffU);
}
FLASHREC_HOST_DEVICE inline u64 swap64(u64 v) {
    return (static_cast<u64>(swap32(static_cast<u32>(v))) << 32) | swap32(static_cast<u32>(v >> 32));
}

FLASHREC_HOST_DEVICE inline u64 xxh64_avalanche(u64 h) {
    h ^= h >> 33;
    h *= kPrime64_2;
    h ^= h >> 29;
    h *= kPrime64_3;
    h ^= h >> 32;
    return h;
}
FLASHREC_HOST_DEVICE inline u64 avalanche(u64 h) {
    h = xorshift(h, 37);
    h *= 0x165667919E3779F9ULL;
    return xorshift(h, 32);
}
FLASHREC_HOST_DEVICE inline u64 rrmxmx(u64 h, u64 len) {
    h ^= rotl64(h, 49) ^ rotl64(h, 24);
    h *= 0x9FB21C651E98DF25ULL;
    h ^= (h >> 35) + len;
    h *= 0x9FB21C651E98DF25ULL;
    return xorshift(h, 28);
}

// ---- inputs of at most 240 bytes (XXH3_len_0to16 / 17to128 / 129to240, seed 0) --------------

FLASHREC_HOST_DEVICE inline u64 mix16(const u8* in, const u8* secret) {
    return mul128_fold64(read64(in) ^ read64(secret), read64(in + 8) ^ read64(secret + 8));
}

FLASHREC_HOST_DEVICE inline u64 hash_short(const u8* in, std::size_t len, const Keys& keys) {
    const u8* secret = reinterpret_cast<const u8*>(keys.secret);
    if (len > 128) {
        u64 acc = len * kPrime64_1;
        const int rounds = static_cast<int>(len / 16);
        for (int i = 0; i < 8; ++i) acc += mix16(in + 16 * i, secret + 16 * i);
        acc = avalanche(acc);
        for (int i = 8; i < rounds; ++i) acc += mix16(in + 16 * i, secret + 16 * (i - 8) + 3);
        acc += mix16(in + len - 16, secret + 136 - 17);
        return avalanche(acc);
    }
    if (len > 16) {
        u64 acc = len * kPrime64_1;
        if (len > 32) {
            if (len > 64) {
                if (len > 96) {
                    acc += mix16(in + 48, secret + 96);
                    acc += mix16(in + len - 64, secret + 112);
                }
                acc += mix16(in + 32, secret + 64);
                acc += mix16(in + len - 48, secret + 80);
            }
            acc += mix16(in + 16, secret + 32);
            acc += mix16(in + len - 32, secret + 48);
        }
        acc += mix16(in, secret);
        acc += mix16(in + len - 16, secret + 16);
        return avalanche(acc);
    }
    if (len > 8) {
        const u64 lo = read64(in) ^ (read64(secret + 24) ^ read64(secret + 32));
        const u64 hi = read64(in + len - 8) ^ (read64(secret + 40) ^ read64(secret + 48));
        return avalanche(len + swap64(lo) + hi + mul128_fold64(lo, hi));
    }
    if (len >= 4) {
        const u64 input1 = read32(in), input2 = read32(in + len - 4);
        const u64 bitflip = read64(secret + 8) ^ read64(secret + 16);
        return rrmxmx((input2 + (input1 << 32)) ^ bitflip, len);
    }
    if (len > 0) {
        const u32 combined = (static_cast<u32>(in[0]) << 16) | (static_cast<u32>(in[len >> 1]) << 24) |
                             static_cast<u32>(in[len - 1]) | (static_cast<u32>(len) << 8);
        const u64 bitflip = static_cast<u64>(read32(secret) ^ read32(secret + 4));
        return xxh64_avalanche(static_cast<u64>(combined) ^ bitflip);
    }
    return xxh64_avalanche(read64(secret + 56) ^ read64(secret + 64));
}

// ---- inputs of more than 240 bytes: one lane pair ----------------------------------------

FLASHREC_HOST_DEVICE inline u64 initial_lane(unsigned lane) {
    switch (lane) {
        case 0: return kPrime32_3;
        case 1: return kPrime64_1;
        case 2: return kPrime64_2;
        case 3: return kPrime64_3;
        case 4: return kPrime64_4;
        case 5: return kPrime32_2;
        case 6: return kPrime64_5;
        default: return kPrime32_1;
    }
}

// XXH3_accumulate_512 restricted to lanes (2k, 2k + 1): each lane adds its neighbour's input.
FLASHREC_HOST_DEVICE inline void accumulate_pair(const u8* p, u64 key_even, u64 key_odd, u64& even, u64& odd) {
    u64 in_even, in_odd;
    read128(p, in_even, in_odd);
    const u64 keyed_even = in_even ^ key_even, keyed_odd = in_odd ^ key_odd;
    odd += in_even;
    even += in_odd;
    even += mult32to64(keyed_even, keyed_even >> 32);
    odd += mult32to64(keyed_odd, keyed_odd >> 32);
}

FLASHREC_HOST_DEVICE inline u64 scramble(u64 acc, u64 key) { return (xorshift(acc, 47) ^ key) * kPrime32_1; }

// Lane pair `pair` (0-3) of XXH3-64 over `len` > 240 bytes, merged into its term of the
// final sum: XXH3-64 = finish_long(len, sum of the 4 terms).
FLASHREC_HOST_DEVICE inline u64 long_pair_term(const u8* in, std::size_t len, unsigned pair, const Keys& keys) {
    constexpr std::size_t kStripe = 64, kStripesPerBlock = 16, kBlock = kStripe * kStripesPerBlock;
    const unsigned lane = 2 * pair;
    u64 even = initial_lane(lane), odd = initial_lane(lane + 1);
    const std::size_t blocks = (len - 1) / kBlock;
    const u8* mine = in + 16 * pair;
    for (std::size_t n = 0; n < blocks; ++n) {
        const u8* block = mine + n * kBlock;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
        for (unsigned s = 0; s < kStripesPerBlock; ++s)
            accumulate_pair(block + kStripe * s, keys.secret[s + lane], keys.secret[s + lane + 1], even, odd);
        even = scramble(even, keys.secret[16 + lane]);
        odd = scramble(odd, keys.secret[17 + lane]);
    }
    const std::size_t stripes = ((len - 1) - kBlock * blocks) / kStripe;
    const u8* tail = mine + blocks * kBlock;
    for (std::size_t s = 0; s < stripes; ++s)
        accumulate_pair(tail + kStripe * s, keys.secret[s + lane], keys.secret[s + lane + 1], even, odd);
    accumulate_pair(in + len - kStripe + 16 * pair, keys.last_stripe[lane], keys.last_stripe[lane + 1], even, odd);
    return mul128_fold64(even ^ keys.merge[lane], odd ^ keys.merge[lane + 1]);
}

FLASHREC_HOST_DEVICE inline u64 finish_long(std::size_t len, u64 term_sum) {
    return avalanche(static_cast<u64>(len) * kPrime64_1 + term_sum);
}

// XXH3-64 (seed 0) of any input, one thread: what the tests compare with libxxhash.
FLASHREC_HOST_DEVICE inline u64 hash64(const u8* in, std::size_t len, const Keys& keys) {
    if (len <= kMidsizeMax) return hash_short(in, len, keys);
    u64 sum = 0;
    for (unsigned pair = 0; pair < kPairsPerBlock; ++pair) sum += long_pair_term(in, len, pair, keys);
    return finish_long(len, sum);
}

// ---- the block scheme ------------------------------------------------------------------------

FLASHREC_HOST_DEVICE inline std::size_t block_count(std::size_t bytes) {
    return (bytes + kBlockBytes - 1) / kBlockBytes;
}
FLASHREC_HOST_DEVICE inline std::size_t block_length(std::size_t bytes, std::size_t block) {
    const std::size_t start = block * kBlockBytes;
    return bytes - start < kBlockBytes ? bytes - start : kBlockBytes;
}

// Thread `pair` of block `block` of a buffer of `bytes` at `data`: its term of the block's digest.
FLASHREC_HOST_DEVICE inline u64 block_term(const u8* data, std::size_t bytes, std::size_t block, unsigned pair,
                                           const Keys& keys) {
    const u8* in = data + block * kBlockBytes;
    const std::size_t len = block_length(bytes, block);
    if (len > kMidsizeMax) return long_pair_term(in, len, pair, keys);
    return pair == 0 ? hash_short(in, len, keys) : 0;  // a short last block: pair 0 hashes it whole
}

// The block's digest (its XXH3-64) from the sum of its 4 terms.
FLASHREC_HOST_DEVICE inline u64 block_digest(std::size_t len, u64 term_sum) {
    return len > kMidsizeMax ? finish_long(len, term_sum) : term_sum;
}

}  // namespace flashrec::ft::xxh3
