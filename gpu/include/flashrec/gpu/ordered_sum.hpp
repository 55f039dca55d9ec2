// The fixed-order sum behind DeviceDpCollectives::reduce_scatter (kernel in src/dp_sum.cu).
// Plain declarations, so that nvcc compiles the kernel without the MPI/NCCL headers.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

namespace flashrec::gpu {

// out[i] = ((parts[0][i] + parts[1][i]) + ...) + parts[ranks-1][i], where
// parts[r] = parts + r * count: one thread per element, the ranks in order (the CPU path's
// float additions, in its order), enqueued on `stream`. Returns the launch's error code.
cudaError_t launch_ordered_sum(const float* parts, int ranks, std::size_t count, float* out,
                               cudaStream_t stream);

}  // namespace flashrec::gpu
