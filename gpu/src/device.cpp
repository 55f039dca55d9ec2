#include "flashrec/gpu/device.hpp"

#include <cuda_runtime_api.h>

#include <charconv>
#include <cstdlib>
#include <cstring>

#include "flashrec/gpu/cuda_check.hpp"

namespace flashrec::gpu {

int device_count_or_zero() noexcept {
    int count = 0;
    const cudaError_t rc = cudaGetDeviceCount(&count);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();  // no driver/device is not an error to carry forward
        return 0;
    }
    return count > 0 ? count : 0;
}

int local_rank_from_env() noexcept {
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                             "LOCAL_RANK"}) {
        const char* text = std::getenv(name);
        if (text == nullptr || *text == '\0') continue;
        int value = -1;
        const char* end = text + std::strlen(text);
        const auto [ptr, ec] = std::from_chars(text, end, value);
        if (ec == std::errc() && ptr == end && value >= 0) return value;
        return -1;  // set but malformed: do not silently try the next one
    }
    return -1;
}

int device_for_local_rank(int local_rank) {
    int count = 0;
    FLASHREC_CUDA_CHECK(cudaGetDeviceCount(&count));
    if (count <= 0) FLASHREC_CUDA_CHECK(cudaErrorNoDevice);
    return (local_rank < 0 ? 0 : local_rank) % count;
}

int current_device() {
    int device = -1;
    FLASHREC_CUDA_CHECK(cudaGetDevice(&device));
    return device;
}

DeviceGuard::DeviceGuard(int device) {
    FLASHREC_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) {
        FLASHREC_CUDA_CHECK(cudaSetDevice(device));
        changed_ = true;
    }
}

DeviceGuard::~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(previous_);
}

}  // namespace flashrec::gpu
