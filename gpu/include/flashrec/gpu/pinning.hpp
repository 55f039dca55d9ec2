// Page-locking the host memory that DMA goes to (the snapshot slots in /dev/shm).
//
// cudaHostRegister works on whole pages, and fails with cudaErrorHostMemoryAlreadyRegistered
// for a range that overlaps one registered before. Snapshot buffers are 64-byte aligned inside
// a segment, so two of them often share a page: registering buffer by buffer would fail.
// PinnedSet does the bookkeeping: it rounds the spans to pages, merges them, registers only
// what it has not registered yet, and unregisters everything when it goes. The bookkeeping is
// pure logic behind PinBackend, so it is tested without a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace flashrec::gpu {

// [begin, begin + bytes) of this process's address space.
struct HostRange {
    std::uintptr_t begin = 0;
    std::size_t bytes = 0;
    std::uintptr_t end() const { return begin + bytes; }
    void* data() const { return reinterpret_cast<void*>(begin); }
    bool operator==(const HostRange&) const = default;
};
HostRange range_of(const void* data, std::size_t bytes);

// sysconf(_SC_PAGESIZE).
std::size_t system_page_size();

// The page-aligned ranges that cover every non-empty span: sorted, disjoint, merged where they
// share a page (one registration each). Ranges that merely touch stay apart: they may belong
// to two mappings, and one cudaHostRegister should not span two. `page`: a power of two.
std::vector<HostRange> plan_pinning(std::span<const HostRange> spans, std::size_t page);

// `wanted` without what `have` covers; both sorted and disjoint. Sorted, disjoint result.
std::vector<HostRange> subtract_ranges(std::span<const HostRange> wanted,
                                       std::span<const HostRange> have);

// `span` cut where a range of `ranges` (sorted, disjoint) begins or ends: pieces in address
// order that each lie inside one range or outside all. One cudaMemcpy must not span two
// registrations (CUDA rejects it: cudaErrorInvalidValue), and touching ranges stay two.
std::vector<HostRange> split_at_ranges(HostRange span, std::span<const HostRange> ranges);

// What registers a range: cudaHostRegister (CudaPinBackend), or a fake in tests.
class PinBackend {
public:
    virtual ~PinBackend() = default;
    virtual void pin(void* data, std::size_t bytes) = 0;  // throws on failure
    virtual void unpin(void* data, std::size_t bytes) noexcept = 0;
};

// cudaHostRegister(cudaHostRegisterPortable) / cudaHostUnregister. Needs a device.
class CudaPinBackend final : public PinBackend {
public:
    void pin(void* data, std::size_t bytes) override;
    void unpin(void* data, std::size_t bytes) noexcept override;
};

// Memory pinned by one owner (e.g. one SnapshotStore's two slots). The backend must outlive
// the set; the memory must stay mapped until the set is destroyed or cleared.
class PinnedSet {
public:
    explicit PinnedSet(PinBackend& backend, std::size_t page = system_page_size());
    PinnedSet(PinnedSet&& other) noexcept;
    PinnedSet& operator=(PinnedSet&& other) noexcept;
    PinnedSet(const PinnedSet&) = delete;
    PinnedSet& operator=(const PinnedSet&) = delete;
    ~PinnedSet();

    // Pins the pages of `spans` that this set has not pinned yet: one backend call per new
    // merged range; spans already covered cost nothing. If the backend throws, what was pinned
    // before stays pinned (and is released by the destructor), and the exception propagates.
    void pin(std::span<const HostRange> spans);
    void pin(const void* data, std::size_t bytes);
    // True when every byte of [data, data + bytes) is in a range this set pinned.
    bool covers(const void* data, std::size_t bytes) const;
    // [data, data + bytes) in pieces that each lie in one registration or in none (split_at_ranges).
    std::vector<HostRange> pieces(const void* data, std::size_t bytes) const;
    // The registrations, sorted by address.
    const std::vector<HostRange>& ranges() const { return ranges_; }
    std::size_t pinned_bytes() const;
    // Unpins everything (newest first).
    void clear() noexcept;

private:
    PinBackend* backend_;
    std::size_t page_;
    std::vector<HostRange> ranges_;  // sorted, disjoint
    std::vector<HostRange> order_;   // registration order, for unpinning newest first
};

}  // namespace flashrec::gpu
