#include "flashrec/gpu/device.hpp"

#include <cuda.h>  // driver types only: the functions come through cudaGetDriverEntryPointByVersion
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>

#include <unistd.h>

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

namespace {

// A driver function by name, without linking libcuda (the library must load where there is no
// driver). nullptr when the driver does not have it.
void* driver_function(const char* name, unsigned cuda_version) noexcept {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t rc =
        cudaGetDriverEntryPointByVersion(name, &function, cuda_version, cudaEnableDefault, &found);
    if (rc != cudaSuccess) {
        (void)cudaGetLastError();
        return nullptr;
    }
    return found == cudaDriverEntryPointSuccess ? function : nullptr;
}

// The three driver calls cuda_in_use() needs, looked up once (the runtime asks per collective).
struct ContextQueries {
    PFN_cuCtxGetCurrent_v4000 get_current = nullptr;
    PFN_cuDeviceGet_v2000 get_device = nullptr;
    PFN_cuDevicePrimaryCtxGetState_v7000 primary_state = nullptr;
    bool complete() const { return get_current != nullptr && get_device != nullptr && primary_state != nullptr; }
};

const ContextQueries& context_queries() noexcept {
    // The versions are those of the typedefs (cudaTypedefs.h): the ABI each call has had since.
    static const ContextQueries queries = [] {
        ContextQueries q;
        q.get_current = reinterpret_cast<PFN_cuCtxGetCurrent_v4000>(driver_function("cuCtxGetCurrent", 4000));
        q.get_device = reinterpret_cast<PFN_cuDeviceGet_v2000>(driver_function("cuDeviceGet", 2000));
        q.primary_state = reinterpret_cast<PFN_cuDevicePrimaryCtxGetState_v7000>(
            driver_function("cuDevicePrimaryCtxGetState", 7000));
        return q;
    }();
    return queries;
}

}  // namespace

namespace {

bool ask_driver_whether_cuda_is_in_use() noexcept {
    const int devices = device_count_or_zero();
    if (devices == 0) return false;
    const ContextQueries& q = context_queries();
    if (!q.complete()) return true;  // cannot tell: let the caller ask CUDA about its pointers
    CUcontext current = nullptr;
    if (q.get_current(&current) != CUDA_SUCCESS) return true;
    if (current != nullptr) return true;
    for (int ordinal = 0; ordinal < devices; ++ordinal) {
        CUdevice device = 0;
        unsigned flags = 0;
        int active = 0;
        if (q.get_device(&device, ordinal) != CUDA_SUCCESS) return true;
        if (q.primary_state(device, &flags, &active) != CUDA_SUCCESS) return true;
        if (active != 0) return true;
    }
    return false;
}

}  // namespace

bool cuda_in_use() noexcept {
    // Once in use, in use for good (the runtime asks per collective): no driver calls after.
    static std::atomic<bool> known_in_use{false};
    if (known_in_use.load(std::memory_order_relaxed)) return true;
    const bool in_use = ask_driver_whether_cuda_is_in_use();
    if (in_use) known_in_use.store(true, std::memory_order_relaxed);
    return in_use;
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

std::string current_device_name() noexcept {
    int device = -1;
    cudaDeviceProp prop{};
    if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return {};
    }
    return prop.name;
}

std::string check_current_device() noexcept {
    constexpr std::size_t kBytes = 4096;
    void* block = nullptr;
    unsigned char back[kBytes] = {};
    const auto failed = [&](const char* what, cudaError_t rc) {
        (void)cudaGetLastError();
        if (block) (void)cudaFree(block);
        return std::string(what) + ": " + cudaGetErrorString(rc);
    };
    if (const cudaError_t rc = cudaMalloc(&block, kBytes); rc != cudaSuccess) return failed("cudaMalloc", rc);
    if (const cudaError_t rc = cudaMemset(block, 0x5a, kBytes); rc != cudaSuccess) return failed("cudaMemset", rc);
    if (const cudaError_t rc = cudaMemcpy(back, block, kBytes, cudaMemcpyDeviceToHost); rc != cudaSuccess)
        return failed("cudaMemcpy", rc);
    (void)cudaFree(block);
    for (unsigned char b : back)
        if (b != 0x5a) return "the device returned other bytes than it was given";
    return {};
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

bool device_shared_by_ranks() noexcept {
    const char* value = std::getenv(kSharedDeviceEnv);
    return value != nullptr && std::strcmp(value, "1") == 0;
}

void prepare_nccl_for_shared_device() noexcept {
    if (!device_shared_by_ranks() || std::getenv("NCCL_HOSTID") != nullptr) return;
    char host[256] = {};
    (void)gethostname(host, sizeof(host) - 1);
    const std::string id = std::string(host) + ":" + std::to_string(getpid());
    (void)setenv("NCCL_HOSTID", id.c_str(), 0);
}

}  // namespace flashrec::gpu
