// The block-digest kernel (block_hash.hpp). Its arithmetic is ft/xxh3_blocks.hpp, compiled here
// for the device and checked on the host against libxxhash (unit.test_block_checksum); what
// only a GPU can check (the thread mapping, the loads) is gpu.block_hash.
#include "flashrec/gpu/block_hash.hpp"

#include "flashrec/ft/xxh3_blocks.hpp"

namespace flashrec::gpu {

namespace {

namespace xxh3 = ft::xxh3;

constexpr unsigned kThreadsPerCta = 256;  // 64 blocks of 4 KiB per CTA
constexpr xxh3::Keys kHostKeys = xxh3::make_keys();
constexpr unsigned kKeyWords = sizeof(xxh3::Keys) / sizeof(std::uint64_t);

// Thread 4b + k computes lane pair k of block b; the four terms meet by shuffles inside the warp
// (a quad never spans two warps: 32 is a multiple of 4), and thread 4b writes the digest.
__global__ void block_digests_kernel(const unsigned char* __restrict__ data, std::size_t bytes, std::size_t blocks,
                                     std::uint64_t* __restrict__ digests, xxh3::Keys keys_argument) {
    // The keys are read at indices that differ across a quad: shared memory serves those in one
    // pass, the constant bank of the kernel's arguments would serialize them.
    __shared__ xxh3::Keys keys;
    for (unsigned i = threadIdx.x; i < kKeyWords; i += blockDim.x)
        reinterpret_cast<std::uint64_t*>(&keys)[i] = reinterpret_cast<const std::uint64_t*>(&keys_argument)[i];
    __syncthreads();

    const std::size_t thread = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::size_t block = thread / xxh3::kPairsPerBlock;
    const unsigned pair = static_cast<unsigned>(thread % xxh3::kPairsPerBlock);
    // Every lane takes part in the shuffles, past the last block too (with a zero term).
    std::uint64_t term = block < blocks ? xxh3::block_term(data, bytes, block, pair, keys) : 0;
    term += __shfl_xor_sync(0xffffffffU, term, 1);
    term += __shfl_xor_sync(0xffffffffU, term, 2);
    if (block < blocks && pair == 0) digests[block] = xxh3::block_digest(xxh3::block_length(bytes, block), term);
}

}  // namespace

std::size_t block_digest_count(std::size_t bytes) { return xxh3::block_count(bytes); }

cudaError_t launch_block_digests(const void* data, std::size_t bytes, std::uint64_t* digests, cudaStream_t stream) {
    const std::size_t blocks = xxh3::block_count(bytes);
    if (blocks == 0) return cudaSuccess;
    const std::size_t threads = blocks * xxh3::kPairsPerBlock;
    const std::size_t ctas = (threads + kThreadsPerCta - 1) / kThreadsPerCta;
    if (ctas > 0x7fffffffU) return cudaErrorInvalidValue;  // > 2^31 CTAs: 2 TiB in one buffer
    block_digests_kernel<<<static_cast<unsigned>(ctas), kThreadsPerCta, 0, stream>>>(
        static_cast<const unsigned char*>(data), bytes, blocks, digests, kHostKeys);
    return cudaGetLastError();
}

}  // namespace flashrec::gpu
