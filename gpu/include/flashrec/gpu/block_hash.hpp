// The snapshot checksum computed on the GPU (docs/gpu.md, "The hash on the GPU"): the digest of
// every 4 KiB block of a device buffer, by the kernel in src/block_hash.cu, which runs the
// portable code of ft/xxh3_blocks.hpp. The buffer's checksum is ft::combine_block_digests of
// them (ChecksumAlgorithm::xxh3_64_blocks), taken on the host from 1/512 of the bytes.
// Plain declarations, so that nvcc compiles the kernel without the MPI/NCCL headers.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace flashrec::gpu {

// Digests a buffer of `bytes` has: one per 4 KiB block, the last one shorter.
std::size_t block_digest_count(std::size_t bytes);

// Enqueues on `stream` the digests of the blocks of the `bytes` of device (or managed) memory at
// `data` into `digests` (device memory, block_digest_count(bytes) words), in block order: 4
// threads per block, no synchronization. Any alignment of `data` (16-byte aligned is fastest).
// Returns the launch's error code.
cudaError_t launch_block_digests(const void* data, std::size_t bytes, std::uint64_t* digests, cudaStream_t stream);

}  // namespace flashrec::gpu
