// The fixed-order sum of DeviceDpCollectives::reduce_scatter (dp_collectives.hpp).
#include <cstddef>

#include "flashrec/gpu/ordered_sum.hpp"

namespace flashrec::gpu {

namespace {

// One thread per element; the ranks in order, the same float additions as the CPU path.
__global__ void ordered_sum_kernel(const float* parts, int ranks, std::size_t count, float* out) {
    const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= count) return;
    float sum = parts[i];
    for (int r = 1; r < ranks; ++r) sum += parts[static_cast<std::size_t>(r) * count + i];
    out[i] = sum;
}

}  // namespace

cudaError_t launch_ordered_sum(const float* parts, int ranks, std::size_t count, float* out,
                               cudaStream_t stream) {
    if (count == 0) return cudaSuccess;
    constexpr unsigned threads = 256;
    const auto blocks = static_cast<unsigned>((count + threads - 1) / threads);
    ordered_sum_kernel<<<blocks, threads, 0, stream>>>(parts, ranks, count, out);
    return cudaGetLastError();
}

}  // namespace flashrec::gpu
