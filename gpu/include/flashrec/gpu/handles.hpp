// RAII handles for the CUDA objects flashrec owns. Move-only; a moved-from or default-made
// handle holds nothing. Destructors never throw: they run while unwinding from a failure,
// possibly after a sticky CUDA error, so their return codes are ignored.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>

namespace flashrec::gpu {

// A stream of its own, which does not synchronize with the legacy default stream
// (cudaStreamNonBlocking): the snapshot copies run beside the trainer's work, not behind it.
class Stream {
public:
    Stream() = default;
    // On the current device. `priority`: see cudaDeviceGetStreamPriorityRange (0 = default;
    // a lower number is a higher priority).
    static Stream create(int priority = 0);

    Stream(Stream&& other) noexcept;
    Stream& operator=(Stream&& other) noexcept;
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    ~Stream();

    cudaStream_t get() const { return stream_; }
    explicit operator bool() const { return stream_ != nullptr; }
    // True when all work enqueued so far has finished.
    bool query() const;
    void synchronize() const;

private:
    explicit Stream(cudaStream_t stream) : stream_(stream) {}
    cudaStream_t stream_ = nullptr;
};

// A completion marker in a stream. Made without timing (cheaper) and with blocking sync, so a
// thread waiting in synchronize() sleeps instead of spinning on a core the trainer needs.
class Event {
public:
    Event() = default;
    static Event create(unsigned flags = cudaEventDisableTiming | cudaEventBlockingSync);

    Event(Event&& other) noexcept;
    Event& operator=(Event&& other) noexcept;
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    ~Event();

    cudaEvent_t get() const { return event_; }
    explicit operator bool() const { return event_ != nullptr; }
    void record(cudaStream_t stream);
    // True once the work before the last record() is done (also when never recorded);
    // false while it runs; throws CudaError on a failure.
    bool query() const;
    void synchronize() const;
    // Makes `stream` wait (on the GPU, not the host) for the work before the last record().
    void make_wait(cudaStream_t stream) const;

private:
    explicit Event(cudaEvent_t event) : event_(event) {}
    cudaEvent_t event_ = nullptr;
};

// Page-locked host memory of its own (cudaHostAlloc), e.g. a staging buffer for a device
// region that has no shared-memory snapshot slot.
class PinnedHostBuffer {
public:
    PinnedHostBuffer() = default;
    // cudaHostAllocPortable: pinned for every CUDA context of the process.
    static PinnedHostBuffer allocate(std::size_t bytes, unsigned flags = cudaHostAllocPortable);

    PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
    PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
    PinnedHostBuffer(const PinnedHostBuffer&) = delete;
    PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;
    ~PinnedHostBuffer();

    std::byte* data() const { return data_; }
    std::size_t size() const { return bytes_; }
    std::span<std::byte> span() const { return {data_, bytes_}; }

private:
    PinnedHostBuffer(std::byte* data, std::size_t bytes) : data_(data), bytes_(bytes) {}
    std::byte* data_ = nullptr;
    std::size_t bytes_ = 0;
};

// Page-locks memory that exists already (cudaHostRegister), e.g. a shared-memory snapshot
// slot mapped from /dev/shm: DMA then goes straight into the segment, with no bounce buffer,
// and cudaMemcpyAsync into it is truly asynchronous. Unregistered in the destructor; the
// memory itself is not the handle's (unmap it only after the handle is gone).
// Overlapping registrations fail (cudaErrorHostMemoryAlreadyRegistered): register whole
// page-aligned ranges once, see PinnedSet in pinning.hpp.
class HostRegistration {
public:
    HostRegistration() = default;
    static HostRegistration pin(void* data, std::size_t bytes,
                                unsigned flags = cudaHostRegisterPortable);

    HostRegistration(HostRegistration&& other) noexcept;
    HostRegistration& operator=(HostRegistration&& other) noexcept;
    HostRegistration(const HostRegistration&) = delete;
    HostRegistration& operator=(const HostRegistration&) = delete;
    ~HostRegistration();

    void* data() const { return data_; }
    std::size_t size() const { return bytes_; }

private:
    HostRegistration(void* data, std::size_t bytes) : data_(data), bytes_(bytes) {}
    void* data_ = nullptr;
    std::size_t bytes_ = 0;
};

// Device memory (cudaMalloc) on the current device.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    static DeviceBuffer allocate(std::size_t bytes);

    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer();

    void* data() const { return data_; }
    template <class T>
    T* as() const {
        return static_cast<T*>(data_);
    }
    std::size_t size() const { return bytes_; }

private:
    DeviceBuffer(void* data, std::size_t bytes) : data_(data), bytes_(bytes) {}
    void* data_ = nullptr;
    std::size_t bytes_ = 0;
};

// Where a pointer lives, as CUDA sees it (cudaPointerGetAttributes).
enum class MemoryKind {
    pageable,  // ordinary host memory: CUDA copies through a bounce buffer, synchronously
    pinned,    // page-locked host memory (cudaHostAlloc or cudaHostRegister)
    device,    // cudaMalloc memory
    managed,   // cudaMallocManaged memory
};
MemoryKind memory_kind(const void* ptr);
// The device of a device or managed pointer, -1 for host memory.
int pointer_device(const void* ptr);
const char* memory_kind_name(MemoryKind kind);
// For the runtime's protect(): the device of `ptr` when it is device or managed memory, -1 for
// host memory. Creates no CUDA context: while CUDA is not in use in this process
// (cuda_in_use()), no device memory can exist, and every pointer is host memory without a
// CUDA call. Throws CudaError only when CUDA is in use and the pointer query fails.
int device_memory_of(const void* ptr);

}  // namespace flashrec::gpu
