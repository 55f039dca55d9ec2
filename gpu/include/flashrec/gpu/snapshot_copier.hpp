// The GPU half of the snapshot pipeline (docs/gpu.md): the live state is in device
// memory; a snapshot copies it with cudaMemcpyAsync on a dedicated stream into pinned host
// memory (the shared-memory staging slot, registered with PinnedSet), while the trainer's next
// forward/backward runs on its own stream. One event per chunk tells the background thread
// which chunks have landed, so it checksums and replicates chunk k while chunk k+1 is in
// flight.
//
// Ordering, all on the GPU (the host never waits for the trainer's stream):
//   compute stream:  ... optimizer(s) ─ mark_state_ready ─ forward(s+1) ... ─ optimizer(s+1)
//   copy stream:                         └ wait ─ D2H chunk 0 ─ ev0 ─ D2H chunk 1 ─ ev1 ...
// and the step loop's sync point (Protection::wait) returns only after the last chunk landed,
// so optimizer(s+1) cannot overwrite state that is still being copied.
//
// With Options::hash_on_device, the checksums come from the GPU too (docs/gpu.md, "The hash on
// the GPU"): a kernel on a hash stream of its own digests every 4 KiB block of each device
// region while the D2H copies run, the digests (1/512 of the bytes) come back to pinned host
// memory, and save() combines them into each region's checksum (region_checksum): the host
// never reads the landed bytes to hash them.
//   hash stream:                         └ wait ─ block digests ─ D2H digests ─ hashed
#pragma once
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "flashrec/gpu/handles.hpp"
#include "flashrec/gpu/pinning.hpp"
#include "flashrec/ft/region_copier.hpp"

namespace flashrec::gpu {

class DeviceSnapshotCopier final : public ft::RegionCopier {
public:
    struct Options {
        int device = -1;          // -1: the current device at construction
        int stream_priority = 0;  // of the copy stream (cudaDeviceGetStreamPriorityRange)
        // Page-lock (cudaHostRegister, through a PinnedSet) every pageable destination the
        // first time a save writes to it: the shared-memory staging slots get pinned on the
        // first two snapshots, with no help from their owner. The registrations last until
        // the copier is destroyed, so destroy it before the memory is unmapped. If pinning
        // fails, copies go on unpinned (slower) and pin_error() says why.
        bool pin_destinations = true;
        // Compute each device region's checksum on the GPU (ChecksumAlgorithm::xxh3_64_blocks)
        // while it is copied. The kernel is checked against the host's reference at
        // construction (a few blocks); if it disagrees, or cannot run, the copier does not
        // hash (hashes_region is false: the pipeline hashes the landed bytes) and
        // device_hash_error() says why.
        bool hash_on_device = false;
    };

    // `regions` are the trainer's live buffers: device or managed memory on `device` (copied
    // by DMA) or host memory (memcpy'd, for small envelope state kept on the host). Throws
    // flashrec::Error for a device buffer of another device, CudaError without a device.
    explicit DeviceSnapshotCopier(std::vector<ft::LiveRegion> regions, Options options);
    explicit DeviceSnapshotCopier(std::vector<ft::LiveRegion> regions)
        : DeviceSnapshotCopier(std::move(regions), Options{}) {}
    // Waits (bounded, 10 s) for copies still in flight: their destinations may be unmapped
    // right after. Never throws.
    ~DeviceSnapshotCopier() override;
    DeviceSnapshotCopier(const DeviceSnapshotCopier&) = delete;
    DeviceSnapshotCopier& operator=(const DeviceSnapshotCopier&) = delete;

    const char* kind() const override { return "cuda"; }
    int device() const { return device_; }
    cudaStream_t stream() const { return stream_.get(); }
    bool on_device(std::size_t region) const { return on_device_.at(region); }

    // Orders every later copy after the work enqueued so far on `compute` (the optimizer that
    // produced the state to save), on the GPU. Call it on the step loop's thread after
    // update() and before Protection::start_snapshot (whose lock publishes it to the
    // background thread). Without it, copies are not ordered after any trainer stream.
    void mark_state_ready(cudaStream_t compute);
    // RegionCopier's hook: mark_state_ready(static_cast<cudaStream_t>(producer_stream)).
    void state_ready(void* producer_stream) override;

    // The asynchronous API. start() enqueues one D2H copy per chunk of a device region on the
    // copy stream, records an event after each, and returns; chunks of host regions are
    // memcpy'd before it returns. The chunks' destinations must stay valid until ready().
    void start(std::span<const ft::SaveChunk> chunks);
    // Whole regions, one chunk each: region r into destinations[r] (as large as the region).
    void start(std::span<const std::span<std::byte>> destinations);
    // Every chunk of the last start() has landed. Throws CudaError if a copy failed.
    bool ready() const;
    bool chunk_ready(std::size_t chunk) const;
    // Until ready() / chunk_ready(chunk). With `cancelled`, polls it and throws
    // ft::CopyCancelled when it is set (a copy stuck behind a hung kernel cannot block
    // Protection::abort); without, sleeps in cudaEventSynchronize.
    void wait(const std::atomic<bool>* cancelled = nullptr) const;
    void wait_chunk(std::size_t chunk, const std::atomic<bool>* cancelled = nullptr) const;

    // RegionCopier: start(chunks), then wait_chunk(i) and landed(i) for each chunk in order.
    void save(std::span<const ft::SaveChunk> chunks, const std::function<void(std::size_t)>& landed,
              const std::atomic<bool>* cancelled = nullptr) override;
    // H2D on the copy stream, ordered (on the GPU) after the work marked by the last
    // mark_state_ready, then waits for it: call mark_state_ready(compute) first, so that
    // kernels of an abandoned step cannot write the regions after the restore. A kernel that
    // never ends blocks it (the runtime's recovery watchdog bounds that).
    void restore(std::span<const ft::RestoreChunk> chunks) override;

    // The D2H bytes of the last start() and their time on the GPU's clock, from when the copy
    // stream passed the wait for the state (and the copier's pinning) to the last chunk's end:
    // two timing events around the chunks. {0, 0} while the copies run (ready() is false) or
    // when there were none.
    ft::TransferTiming last_transfer() const override;

    // D2H chunks of the last start() whose destination was pageable memory when copied: CUDA
    // copies those synchronously through a bounce buffer. Non-zero means the staging memory
    // is not pinned (pin_destinations off, or pinning failed).
    std::size_t pageable_chunks() const { return pageable_chunks_; }
    // RegionCopier: with Options::hash_on_device (and a kernel that passed its check), every
    // region in device or managed memory.
    bool hashes_region(std::size_t region) const override;
    // After save() (or start() and collect_checksums()): the region's checksum from the GPU.
    std::optional<ft::BufferChecksum> region_checksum(std::size_t region) const override;
    // After start(): waits for the digests of the last start() (polling `cancelled` like
    // wait()) and combines them into each hashed region's checksum. save() calls it.
    void collect_checksums(const std::atomic<bool>* cancelled = nullptr);
    // Why Options::hash_on_device was asked for but is not in use (empty: in use, or not asked).
    const std::string& device_hash_error() const { return device_hash_error_; }
    // Whether the GPU hashes this copier's device regions.
    bool hash_on_device() const { return hash_on_device_; }

    // What this copier has pinned (Options::pin_destinations), and why pinning stopped, if it did.
    const PinnedSet& pinned() const { return pinned_; }
    const std::string& pin_error() const { return pin_error_; }

private:
    const Event& event_of(std::size_t chunk) const;
    enum class HostSide { source, destination };
    // cudaMemcpyAsync on the copy stream, one call per piece of the host side that lies in one
    // registration (PinnedSet::pieces): a copy across two registrations is an invalid argument.
    void copy_host_side(void* dst, const void* src, std::size_t bytes, HostSide host);
    // Hashing on the GPU: buffers, stream, and the known-answer check behind hash_on_device_.
    void set_up_device_hash();
    std::string check_block_digests();  // empty when the kernel agrees with the host reference
    void enqueue_hash(std::span<const ft::SaveChunk> chunks);

    std::vector<bool> on_device_;
    int device_ = -1;
    Stream stream_;
    Event ready_;
    bool ready_marked_ = false;
    std::vector<Event> events_;               // pool, grown on demand
    Event timed_start_, timed_end_;            // with timing: around the last start()'s D2H
    std::size_t timed_bytes_ = 0;
    std::vector<std::ptrdiff_t> chunk_event_;  // last start(): event per chunk, -1 for host chunks
    std::ptrdiff_t last_event_ = -1;
    std::size_t pageable_chunks_ = 0;
    bool pin_destinations_ = true;
    std::string pin_error_;
    bool hash_on_device_ = false;
    std::string device_hash_error_;
    Stream hash_stream_;
    Event hash_done_;
    DeviceBuffer device_digests_;       // every hashed region's block digests, region after region
    PinnedHostBuffer host_digests_;     // their copy on the host
    std::vector<std::size_t> digest_offset_;  // per region: its first digest's index
    std::vector<bool> hash_pending_;    // per region: hashed by the last start(), not yet collected
    std::vector<std::optional<ft::BufferChecksum>> region_checksums_;
    CudaPinBackend pin_backend_;
    PinnedSet pinned_{pin_backend_};  // after its backend: released before it
};

}  // namespace flashrec::gpu
