#include "flashrec/gpu/handles.hpp"

#include <utility>

#include "flashrec/gpu/cuda_check.hpp"
#include "flashrec/gpu/device.hpp"

namespace flashrec::gpu {

// ---- Stream ---------------------------------------------------------------------------------

Stream Stream::create(int priority) {
    cudaStream_t stream = nullptr;
    FLASHREC_CUDA_CHECK(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, priority));
    return Stream(stream);
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
    if (this != &other) {
        if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
        stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
}

Stream::~Stream() {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

bool Stream::query() const {
    const cudaError_t rc = cudaStreamQuery(stream_);
    if (rc == cudaErrorNotReady) return false;
    FLASHREC_CUDA_CHECK(rc);
    return true;
}

void Stream::synchronize() const { FLASHREC_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

// ---- Event ----------------------------------------------------------------------------------

Event Event::create(unsigned flags) {
    cudaEvent_t event = nullptr;
    FLASHREC_CUDA_CHECK(cudaEventCreateWithFlags(&event, flags));
    return Event(event);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
    if (this != &other) {
        if (event_ != nullptr) (void)cudaEventDestroy(event_);
        event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
}

Event::~Event() {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
}

void Event::record(cudaStream_t stream) { FLASHREC_CUDA_CHECK(cudaEventRecord(event_, stream)); }

bool Event::query() const {
    const cudaError_t rc = cudaEventQuery(event_);
    if (rc == cudaErrorNotReady) return false;
    FLASHREC_CUDA_CHECK(rc);
    return true;
}

void Event::synchronize() const { FLASHREC_CUDA_CHECK(cudaEventSynchronize(event_)); }

void Event::make_wait(cudaStream_t stream) const {
    FLASHREC_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

// ---- PinnedHostBuffer -------------------------------------------------------------------------

PinnedHostBuffer PinnedHostBuffer::allocate(std::size_t bytes, unsigned flags) {
    void* data = nullptr;
    if (bytes > 0) FLASHREC_CUDA_CHECK(cudaHostAlloc(&data, bytes, flags));
    return PinnedHostBuffer(static_cast<std::byte*>(data), bytes);
}

PinnedHostBuffer::PinnedHostBuffer(PinnedHostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedHostBuffer& PinnedHostBuffer::operator=(PinnedHostBuffer&& other) noexcept {
    if (this != &other) {
        if (data_ != nullptr) (void)cudaFreeHost(data_);
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

PinnedHostBuffer::~PinnedHostBuffer() {
    if (data_ != nullptr) (void)cudaFreeHost(data_);
}

// ---- HostRegistration -------------------------------------------------------------------------

HostRegistration HostRegistration::pin(void* data, std::size_t bytes, unsigned flags) {
    if (data == nullptr || bytes == 0) return {};
    FLASHREC_CUDA_CHECK(cudaHostRegister(data, bytes, flags));
    return HostRegistration(data, bytes);
}

HostRegistration::HostRegistration(HostRegistration&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
    if (this != &other) {
        if (data_ != nullptr) (void)cudaHostUnregister(data_);
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

HostRegistration::~HostRegistration() {
    if (data_ != nullptr) (void)cudaHostUnregister(data_);
}

// ---- DeviceBuffer -----------------------------------------------------------------------------

DeviceBuffer DeviceBuffer::allocate(std::size_t bytes) {
    void* data = nullptr;
    if (bytes > 0) FLASHREC_CUDA_CHECK(cudaMalloc(&data, bytes));
    return DeviceBuffer(data, bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        if (data_ != nullptr) (void)cudaFree(data_);
        data_ = std::exchange(other.data_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

DeviceBuffer::~DeviceBuffer() {
    if (data_ != nullptr) (void)cudaFree(data_);
}

// ---- pointers ---------------------------------------------------------------------------------

namespace {

cudaPointerAttributes attributes_of(const void* ptr) {
    cudaPointerAttributes attributes{};
    FLASHREC_CUDA_CHECK(cudaPointerGetAttributes(&attributes, ptr));
    return attributes;
}

}  // namespace

MemoryKind memory_kind(const void* ptr) {
    switch (attributes_of(ptr).type) {
        case cudaMemoryTypeHost: return MemoryKind::pinned;
        case cudaMemoryTypeDevice: return MemoryKind::device;
        case cudaMemoryTypeManaged: return MemoryKind::managed;
        case cudaMemoryTypeUnregistered: break;
    }
    return MemoryKind::pageable;
}

int pointer_device(const void* ptr) {
    const cudaPointerAttributes attributes = attributes_of(ptr);
    if (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged)
        return attributes.device;
    return -1;
}

int device_memory_of(const void* ptr) {
    if (ptr == nullptr || !cuda_in_use()) return -1;
    return pointer_device(ptr);
}

const char* memory_kind_name(MemoryKind kind) {
    switch (kind) {
        case MemoryKind::pageable: return "pageable host memory";
        case MemoryKind::pinned: return "pinned host memory";
        case MemoryKind::device: return "device memory";
        case MemoryKind::managed: return "managed memory";
    }
    return "unknown memory";
}

}  // namespace flashrec::gpu
