// How the snapshot pipeline moves bytes between the trainer's live buffers and host memory
// (the staging slot of a SnapshotStore, or a committed version on restore), whatever memory
// the live buffers are in. Protection owns one RegionCopier per role:
//
//   HostRegionCopier       live buffers in host memory: memcpy (today's CPU path, unchanged)
//   gpu::DeviceSnapshotCopier  live buffers on a GPU: cudaMemcpyAsync on a dedicated stream
//                          into pinned shared memory, one event per chunk
//
// The contract is chunk-wise and in order so that the pipeline keeps its shape: the checksum
// of a chunk is taken (SnapshotStore::note_written) and the chunk is sent to the ring
// successors as soon as its bytes have landed, while later chunks are still being copied.
//
// This header needs neither CUDA nor MPI. It belongs to ft (Protection uses it; ft must build
// without CUDA): its home is ft/include/flashrec/ft/region_copier.hpp, and it lives under gpu/
// only until the ft owner moves it there (then only the include in snapshot_copier.hpp
// changes).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "flashrec/errors.hpp"
#include "flashrec/ft/checksum.hpp"

namespace flashrec::ft {

// A live buffer of the trainer's (ProtectedRegion::data/bytes), in host or device memory.
struct LiveRegion {
    void* data = nullptr;
    std::size_t bytes = 0;
};

// Bytes [offset, offset + bytes) of live region `region` go to host memory at `dst`.
struct SaveChunk {
    std::size_t region = 0;
    std::size_t offset = 0;
    std::size_t bytes = 0;
    std::byte* dst = nullptr;
};

// Host bytes at `src` go back to [offset, offset + bytes) of live region `region`.
struct RestoreChunk {
    std::size_t region = 0;
    std::size_t offset = 0;
    std::size_t bytes = 0;
    const std::byte* src = nullptr;
};

// The `cancelled` flag of a save was set (Protection::abort): the copy stopped, nothing of it
// may be committed.
class CopyCancelled : public Error {
public:
    using Error::Error;
};

// What the last save() moved by DMA from device memory, timed on the GPU's clock from when its
// copy stream could start (after the state was ready) to its last byte: the copy engine's
// throughput as the pipeline got it. {0, 0} for a copier that copies on the CPU.
struct TransferTiming {
    std::size_t bytes = 0;
    double seconds = 0;
};

class RegionCopier {
public:
    virtual ~RegionCopier() = default;

    // "host", "cuda": for logs and the event log.
    virtual const char* kind() const = 0;
    std::size_t region_count() const { return regions_.size(); }
    const LiveRegion& region(std::size_t index) const { return regions_.at(index); }

    // Copies every chunk from the live regions to its `dst`, and calls landed(i) for chunk i
    // once its bytes are final in host memory: in order of i, on the calling thread, each
    // exactly once. Returns after landed(last). `cancelled` (if given) is polled between
    // chunks; when it becomes true, save throws CopyCancelled. After any throw (from the copy,
    // from landed, or CopyCancelled), chunks without a landed() call hold unspecified bytes.
    // The live regions must not change until save returns (the step loop's sync point).
    virtual void save(std::span<const SaveChunk> chunks,
                      const std::function<void(std::size_t)>& landed,
                      const std::atomic<bool>* cancelled = nullptr) = 0;

    // Copies every chunk back into the live regions. When it returns, the bytes are in place
    // for any later reader (host code, or GPU work enqueued afterwards on any stream).
    virtual void restore(std::span<const RestoreChunk> chunks) = 0;

    // The step loop, after update() and before Protection::start_snapshot: the state to save
    // is (being) produced by the work enqueued so far on `producer_stream` (a cudaStream_t on
    // the GPU path, as void* to keep this header CUDA-free; nullptr: CUDA's default stream).
    // The next save() is ordered after that work. The host copier has nothing to wait for.
    virtual void state_ready(void* producer_stream) { (void)producer_stream; }

    // After save() returned: its device-to-host transfer (TransferTiming).
    virtual TransferTiming last_transfer() const { return {}; }

    // Whether save() computes region `region`'s checksum itself, from the live bytes rather
    // than the landed ones (the device copier's GPU hash): the pipeline then reads none of
    // that region's landed bytes to hash them. Known before save(), fixed for the copier's life.
    virtual bool hashes_region(std::size_t region) const {
        (void)region;
        return false;
    }
    // After save() returned: the checksum of the whole live region as that save read it, for a
    // region hashes_region() names and the save had chunks of (nullopt otherwise).
    virtual std::optional<BufferChecksum> region_checksum(std::size_t region) const {
        (void)region;
        return std::nullopt;
    }

protected:
    explicit RegionCopier(std::vector<LiveRegion> regions) : regions_(std::move(regions)) {}
    // Throws flashrec::Error unless the chunk lies inside its region and has a host pointer.
    void check_chunk(std::size_t region, std::size_t offset, std::size_t bytes,
                     const void* host) const {
        if (region >= regions_.size())
            throw Error("region copier: chunk names region " + std::to_string(region) + " of " +
                        std::to_string(regions_.size()));
        const std::size_t size = regions_[region].bytes;
        if (offset > size || bytes > size - offset)
            throw Error("region copier: chunk [" + std::to_string(offset) + ", +" +
                        std::to_string(bytes) + ") is outside region " + std::to_string(region) +
                        " of " + std::to_string(size) + " bytes");
        if (bytes > 0 && (host == nullptr || regions_[region].data == nullptr))
            throw Error("region copier: chunk of region " + std::to_string(region) +
                        " has a null pointer");
    }

    std::vector<LiveRegion> regions_;
};

// Live buffers in host memory: a memcpy per chunk, then landed(). Exactly what Protection
// does today, moved behind the interface.
class HostRegionCopier final : public RegionCopier {
public:
    explicit HostRegionCopier(std::vector<LiveRegion> regions) : RegionCopier(std::move(regions)) {}
    const char* kind() const override { return "host"; }

    void save(std::span<const SaveChunk> chunks, const std::function<void(std::size_t)>& landed,
              const std::atomic<bool>* cancelled = nullptr) override {
        for (const SaveChunk& c : chunks) check_chunk(c.region, c.offset, c.bytes, c.dst);
        for (std::size_t i = 0; i < chunks.size(); ++i) {
            if (cancelled != nullptr && cancelled->load(std::memory_order_acquire))
                throw CopyCancelled("snapshot copy cancelled");
            const SaveChunk& c = chunks[i];
            if (c.bytes > 0)
                std::memcpy(c.dst, static_cast<const std::byte*>(regions_[c.region].data) + c.offset,
                            c.bytes);
            if (landed) landed(i);
        }
    }

    void restore(std::span<const RestoreChunk> chunks) override {
        for (const RestoreChunk& c : chunks) check_chunk(c.region, c.offset, c.bytes, c.src);
        for (const RestoreChunk& c : chunks)
            if (c.bytes > 0)
                std::memcpy(static_cast<std::byte*>(regions_[c.region].data) + c.offset, c.src,
                            c.bytes);
    }
};

// The chunks of a whole-state save: every region, in order, in pieces of at most
// `chunk_bytes`, region r going to destinations[r] (which must be as large as the region).
inline std::vector<SaveChunk> plan_save(const RegionCopier& copier,
                                        std::span<const std::span<std::byte>> destinations,
                                        std::size_t chunk_bytes) {
    if (destinations.size() != copier.region_count())
        throw Error("plan_save: " + std::to_string(destinations.size()) + " destinations for " +
                    std::to_string(copier.region_count()) + " regions");
    if (chunk_bytes == 0) throw Error("plan_save: chunk_bytes must be at least 1");
    std::vector<SaveChunk> chunks;
    for (std::size_t r = 0; r < destinations.size(); ++r) {
        const std::size_t bytes = copier.region(r).bytes;
        if (destinations[r].size() != bytes)
            throw Error("plan_save: destination of region " + std::to_string(r) + " has " +
                        std::to_string(destinations[r].size()) + " bytes, the region " +
                        std::to_string(bytes));
        for (std::size_t off = 0; off < bytes; off += chunk_bytes)
            chunks.push_back({r, off, std::min(chunk_bytes, bytes - off), destinations[r].data() + off});
    }
    return chunks;
}

// The chunks of a whole-state restore: region r from sources[r], one chunk per region.
inline std::vector<RestoreChunk> plan_restore(const RegionCopier& copier,
                                              std::span<const std::span<const std::byte>> sources) {
    if (sources.size() != copier.region_count())
        throw Error("plan_restore: " + std::to_string(sources.size()) + " sources for " +
                    std::to_string(copier.region_count()) + " regions");
    std::vector<RestoreChunk> chunks;
    for (std::size_t r = 0; r < sources.size(); ++r) {
        if (sources[r].size() != copier.region(r).bytes)
            throw Error("plan_restore: source of region " + std::to_string(r) + " has " +
                        std::to_string(sources[r].size()) + " bytes, the region " +
                        std::to_string(copier.region(r).bytes));
        chunks.push_back({r, 0, sources[r].size(), sources[r].data()});
    }
    return chunks;
}

}  // namespace flashrec::ft
