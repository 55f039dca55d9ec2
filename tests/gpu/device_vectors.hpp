// Host <-> device copies of float vectors for the GPU tests (blocking cudaMemcpy; tests only).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

#include "flashrec/gpu/cuda_check.hpp"
#include "flashrec/gpu/handles.hpp"

inline std::vector<float> download(const flashrec::gpu::DeviceBuffer& d, std::size_t count) {
    std::vector<float> host(count);
    if (count > 0)
        FLASHREC_CUDA_CHECK(cudaMemcpy(host.data(), d.data(), count * sizeof(float), cudaMemcpyDeviceToHost));
    return host;
}

inline flashrec::gpu::DeviceBuffer upload(const std::vector<float>& host) {
    auto d = flashrec::gpu::DeviceBuffer::allocate(host.size() * sizeof(float));
    FLASHREC_CUDA_CHECK(cudaMemcpy(d.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}
