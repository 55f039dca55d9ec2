#include "flashrec/gpu/snapshot_copier.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "flashrec/ft/checksum.hpp"
#include "flashrec/gpu/block_hash.hpp"
#include "flashrec/gpu/cuda_check.hpp"
#include "flashrec/gpu/device.hpp"

namespace flashrec::gpu {

namespace {

using Clock = std::chrono::steady_clock;

// Polls `event` until it completes; `cancelled` ends the wait with CopyCancelled. A short
// spin first (a chunk of a few MiB lands in well under a millisecond on PCIe 4+), then sleeps.
void poll_event(const Event& event, const std::atomic<bool>& cancelled) {
    for (int spin = 0; !event.query(); ++spin) {
        if (cancelled.load(std::memory_order_acquire))
            throw ft::CopyCancelled("snapshot copy cancelled while waiting for the GPU");
        if (spin < 64)
            std::this_thread::yield();
        else
            std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
}

}  // namespace

DeviceSnapshotCopier::DeviceSnapshotCopier(std::vector<ft::LiveRegion> regions, Options options)
    : RegionCopier(std::move(regions)), pin_destinations_(options.pin_destinations) {
    device_ = options.device >= 0 ? options.device : current_device();
    DeviceGuard guard(device_);
    on_device_.reserve(regions_.size());
    for (std::size_t r = 0; r < regions_.size(); ++r) {
        const ft::LiveRegion& region = regions_[r];
        if (region.data == nullptr || region.bytes == 0) {
            on_device_.push_back(false);
            continue;
        }
        const MemoryKind kind = memory_kind(region.data);
        const bool device_memory = kind == MemoryKind::device || kind == MemoryKind::managed;
        if (kind == MemoryKind::device && pointer_device(region.data) != device_)
            throw Error("DeviceSnapshotCopier: region " + std::to_string(r) + " is on device " +
                        std::to_string(pointer_device(region.data)) + ", the copier uses device " +
                        std::to_string(device_));
        on_device_.push_back(device_memory);
    }
    stream_ = Stream::create(options.stream_priority);
    ready_ = Event::create();
    timed_start_ = Event::create(cudaEventDefault);
    timed_end_ = Event::create(cudaEventDefault);
    region_checksums_.resize(regions_.size());
    hash_pending_.assign(regions_.size(), false);
    if (options.hash_on_device) {
        hash_stream_ = Stream::create(options.stream_priority);
        set_up_device_hash();
    }
}

void DeviceSnapshotCopier::set_up_device_hash() {
    // A kernel that computes anything else than the host's reference would make every snapshot
    // fail verification when it is read back (restore, checkpoint): find out now, on a few
    // blocks, and hash on the host instead.
    try {
        device_hash_error_ = check_block_digests();
    } catch (const CudaError& e) {
        if (e.sticky()) throw;  // the context is lost: nothing else will work either
        device_hash_error_ = e.what();
    }
    if (!device_hash_error_.empty()) {
        device_hash_error_ = "the GPU hash is not used: " + device_hash_error_;
        return;
    }
    std::size_t digests = 0;
    digest_offset_.assign(regions_.size(), 0);
    for (std::size_t r = 0; r < regions_.size(); ++r) {
        digest_offset_[r] = digests;
        if (on_device_[r]) digests += block_digest_count(regions_[r].bytes);
    }
    if (digests > 0) {
        device_digests_ = DeviceBuffer::allocate(digests * sizeof(std::uint64_t));
        host_digests_ = PinnedHostBuffer::allocate(digests * sizeof(std::uint64_t));
    }
    hash_done_ = Event::create();
    hash_on_device_ = true;
}

std::string DeviceSnapshotCopier::check_block_digests() {
    // Long blocks, a long tail, a tail of <= 240 bytes, at an aligned and an unaligned start.
    constexpr std::size_t kBytes = 3 * 4096 + 300 + 200;
    std::vector<unsigned char> pattern(kBytes + 16);
    std::uint64_t x = 0x9E3779B97F4A7C15ULL;
    for (auto& b : pattern) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b = static_cast<unsigned char>(x);
    }
    DeviceBuffer data = DeviceBuffer::allocate(pattern.size());
    DeviceBuffer digests = DeviceBuffer::allocate(block_digest_count(kBytes) * sizeof(std::uint64_t));
    FLASHREC_CUDA_CHECK(cudaMemcpyAsync(data.data(), pattern.data(), pattern.size(), cudaMemcpyHostToDevice,
                                        hash_stream_.get()));
    for (const std::size_t start : {std::size_t{0}, std::size_t{3}})
        for (const std::size_t bytes : {kBytes, std::size_t{4096 + 300}, std::size_t{200}}) {
            const std::size_t count = block_digest_count(bytes);
            std::vector<std::uint64_t> got(count);
            FLASHREC_CUDA_CHECK(launch_block_digests(data.as<unsigned char>() + start, bytes,
                                                     digests.as<std::uint64_t>(), hash_stream_.get()));
            FLASHREC_CUDA_CHECK(cudaMemcpyAsync(got.data(), digests.data(), count * sizeof(std::uint64_t),
                                                cudaMemcpyDeviceToHost, hash_stream_.get()));
            hash_stream_.synchronize();
            const unsigned char* in = pattern.data() + start;
            const std::uint64_t want = ft::block_checksum(in, bytes);
            const std::uint64_t have = ft::combine_block_digests(got.data(), count);
            if (have != want)
                return "the kernel's checksum of " + std::to_string(bytes) + " bytes at offset " + std::to_string(start) +
                       " is " + ft::checksum_hex(have) + ", the host's " + ft::checksum_hex(want);
        }
    return {};
}

bool DeviceSnapshotCopier::hashes_region(std::size_t region) const {
    return hash_on_device_ && region < on_device_.size() && on_device_[region];
}

std::optional<ft::BufferChecksum> DeviceSnapshotCopier::region_checksum(std::size_t region) const {
    return region < region_checksums_.size() ? region_checksums_[region] : std::nullopt;
}

// On the hash stream, beside the copies: it waits for the same state, reads the device regions
// (not the landed bytes) and is done long before the D2H (HBM is ~50x faster than the link).
void DeviceSnapshotCopier::enqueue_hash(std::span<const ft::SaveChunk> chunks) {
    std::fill(hash_pending_.begin(), hash_pending_.end(), false);
    std::fill(region_checksums_.begin(), region_checksums_.end(), std::nullopt);
    if (!hash_on_device_) return;
    for (const ft::SaveChunk& c : chunks)
        if (hashes_region(c.region)) hash_pending_[c.region] = true;
    if (std::none_of(hash_pending_.begin(), hash_pending_.end(), [](bool b) { return b; })) return;
    if (ready_marked_) ready_.make_wait(hash_stream_.get());
    for (std::size_t r = 0; r < regions_.size(); ++r) {
        if (!hash_pending_[r]) continue;
        const std::size_t count = block_digest_count(regions_[r].bytes);
        std::uint64_t* device = device_digests_.as<std::uint64_t>() + digest_offset_[r];
        FLASHREC_CUDA_CHECK(launch_block_digests(regions_[r].data, regions_[r].bytes, device, hash_stream_.get()));
        FLASHREC_CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<std::uint64_t*>(host_digests_.data()) + digest_offset_[r],
                                            device, count * sizeof(std::uint64_t), cudaMemcpyDeviceToHost,
                                            hash_stream_.get()));
    }
    hash_done_.record(hash_stream_.get());
}

void DeviceSnapshotCopier::collect_checksums(const std::atomic<bool>* cancelled) {
    if (std::none_of(hash_pending_.begin(), hash_pending_.end(), [](bool b) { return b; })) return;
    DeviceGuard guard(device_);
    if (cancelled == nullptr)
        hash_done_.synchronize();
    else
        poll_event(hash_done_, *cancelled);
    const auto* digests = reinterpret_cast<const std::uint64_t*>(host_digests_.data());
    for (std::size_t r = 0; r < regions_.size(); ++r) {
        if (!hash_pending_[r]) continue;
        region_checksums_[r] = ft::BufferChecksum{
            ft::ChecksumAlgorithm::xxh3_64_blocks,
            ft::combine_block_digests(digests + digest_offset_[r], block_digest_count(regions_[r].bytes))};
        hash_pending_[r] = false;
    }
}

DeviceSnapshotCopier::~DeviceSnapshotCopier() {
    if (!stream_) return;
    const auto give_up = Clock::now() + std::chrono::seconds(10);
    for (const Stream* stream : {&stream_, &hash_stream_}) {
        if (!*stream) continue;
        for (;;) {
            const cudaError_t rc = cudaStreamQuery(stream->get());
            if (rc != cudaErrorNotReady) break;  // done, or failed: nothing more will land
            if (Clock::now() > give_up) break;
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    }
    (void)cudaGetLastError();
}

void DeviceSnapshotCopier::mark_state_ready(cudaStream_t compute) {
    DeviceGuard guard(device_);
    ready_.record(compute);
    ready_marked_ = true;
}

void DeviceSnapshotCopier::state_ready(void* producer_stream) {
    mark_state_ready(static_cast<cudaStream_t>(producer_stream));
}

void DeviceSnapshotCopier::start(std::span<const ft::SaveChunk> chunks) {
    for (const ft::SaveChunk& c : chunks) check_chunk(c.region, c.offset, c.bytes, c.dst);
    DeviceGuard guard(device_);
    chunk_event_.assign(chunks.size(), -1);
    last_event_ = -1;
    pageable_chunks_ = 0;
    if (ready_marked_) ready_.make_wait(stream_.get());

    // Pin the pageable destinations (in practice: each staging slot, on its first snapshot).
    std::vector<bool> pageable(chunks.size(), false);
    std::vector<HostRange> to_pin;
    enqueue_hash(chunks);
    for (std::size_t i = 0; i < chunks.size(); ++i) {
        const ft::SaveChunk& c = chunks[i];
        if (!on_device_[c.region] || c.bytes == 0) continue;
        pageable[i] = memory_kind(c.dst) == MemoryKind::pageable;
        if (pageable[i]) to_pin.push_back(range_of(c.dst, c.bytes));
    }
    if (pin_destinations_ && !to_pin.empty()) {
        try {
            pinned_.pin(to_pin);
            std::fill(pageable.begin(), pageable.end(), false);
        } catch (const CudaError& e) {
            pin_destinations_ = false;  // go on unpinned; do not retry every step
            pin_error_ = e.what();
        }
    }

    std::size_t used = 0;
    timed_bytes_ = 0;
    for (std::size_t i = 0; i < chunks.size(); ++i) {
        const ft::SaveChunk& c = chunks[i];
        if (!on_device_[c.region] || c.bytes == 0) continue;
        if (used == 0) timed_start_.record(stream_.get());
        timed_bytes_ += c.bytes;
        if (pageable[i]) ++pageable_chunks_;
        const auto* src = static_cast<const std::byte*>(regions_[c.region].data) + c.offset;
        copy_host_side(c.dst, src, c.bytes, HostSide::destination);
        if (used == events_.size()) events_.push_back(Event::create());
        events_[used].record(stream_.get());
        chunk_event_[i] = static_cast<std::ptrdiff_t>(used);
        last_event_ = static_cast<std::ptrdiff_t>(used);
        ++used;
    }
    if (used > 0) timed_end_.record(stream_.get());
    // Host regions while the DMA runs.
    for (const ft::SaveChunk& c : chunks)
        if (!on_device_[c.region] && c.bytes > 0)
            std::memcpy(c.dst, static_cast<const std::byte*>(regions_[c.region].data) + c.offset,
                        c.bytes);
}

void DeviceSnapshotCopier::start(std::span<const std::span<std::byte>> destinations) {
    std::vector<ft::SaveChunk> chunks;
    if (destinations.size() != regions_.size())
        throw Error("DeviceSnapshotCopier::start: " + std::to_string(destinations.size()) +
                    " destinations for " + std::to_string(regions_.size()) + " regions");
    for (std::size_t r = 0; r < destinations.size(); ++r) {
        if (destinations[r].size() != regions_[r].bytes)
            throw Error("DeviceSnapshotCopier::start: destination of region " + std::to_string(r) +
                        " has " + std::to_string(destinations[r].size()) + " bytes, the region " +
                        std::to_string(regions_[r].bytes));
        chunks.push_back({r, 0, regions_[r].bytes, destinations[r].data()});
    }
    start(chunks);
}

const Event& DeviceSnapshotCopier::event_of(std::size_t chunk) const {
    if (chunk >= chunk_event_.size())
        throw Error("DeviceSnapshotCopier: chunk " + std::to_string(chunk) + " of " +
                    std::to_string(chunk_event_.size()) + " in the last start()");
    return events_[static_cast<std::size_t>(chunk_event_[chunk])];
}

bool DeviceSnapshotCopier::ready() const {
    if (last_event_ < 0) return true;
    DeviceGuard guard(device_);
    return events_[static_cast<std::size_t>(last_event_)].query();
}

bool DeviceSnapshotCopier::chunk_ready(std::size_t chunk) const {
    if (chunk < chunk_event_.size() && chunk_event_[chunk] < 0) return true;  // host chunk
    DeviceGuard guard(device_);
    return event_of(chunk).query();
}

void DeviceSnapshotCopier::wait(const std::atomic<bool>* cancelled) const {
    if (last_event_ < 0) return;
    DeviceGuard guard(device_);
    const Event& last = events_[static_cast<std::size_t>(last_event_)];
    if (cancelled == nullptr)
        last.synchronize();
    else
        poll_event(last, *cancelled);
}

void DeviceSnapshotCopier::wait_chunk(std::size_t chunk, const std::atomic<bool>* cancelled) const {
    if (chunk < chunk_event_.size() && chunk_event_[chunk] < 0) return;  // host chunk
    DeviceGuard guard(device_);
    const Event& event = event_of(chunk);
    if (cancelled == nullptr)
        event.synchronize();
    else
        poll_event(event, *cancelled);
}

void DeviceSnapshotCopier::copy_host_side(void* dst, const void* src, std::size_t bytes, HostSide host) {
    const void* host_bytes = host == HostSide::source ? src : dst;
    for (const HostRange& piece : pinned_.pieces(host_bytes, bytes)) {
        const std::size_t at = piece.begin - reinterpret_cast<std::uintptr_t>(host_bytes);
        FLASHREC_CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(dst) + at, static_cast<const std::byte*>(src) + at,
                                            piece.bytes, cudaMemcpyDefault, stream_.get()));
    }
}

void DeviceSnapshotCopier::save(std::span<const ft::SaveChunk> chunks,
                                const std::function<void(std::size_t)>& landed,
                                const std::atomic<bool>* cancelled) {
    if (cancelled != nullptr && cancelled->load(std::memory_order_acquire))
        throw ft::CopyCancelled("snapshot copy cancelled");
    DeviceGuard guard(device_);  // the background thread's current device
    start(chunks);
    for (std::size_t i = 0; i < chunks.size(); ++i) {
        wait_chunk(i, cancelled);
        if (landed) landed(i);
    }
    // The digests were done long before the last chunk; the optimizer may overwrite the state
    // only after this returns, so the kernel never reads a half-updated region either.
    collect_checksums(cancelled);
}

ft::TransferTiming DeviceSnapshotCopier::last_transfer() const {
    if (timed_bytes_ == 0 || !ready()) return {};
    DeviceGuard guard(device_);
    // Only an event record follows the last chunk's event: it completes at once.
    timed_end_.synchronize();
    float ms = 0;
    FLASHREC_CUDA_CHECK(cudaEventElapsedTime(&ms, timed_start_.get(), timed_end_.get()));
    return {timed_bytes_, static_cast<double>(ms) * 1e-3};
}

void DeviceSnapshotCopier::restore(std::span<const ft::RestoreChunk> chunks) {
    for (const ft::RestoreChunk& c : chunks) check_chunk(c.region, c.offset, c.bytes, c.src);
    DeviceGuard guard(device_);
    // After the trainer's work marked so far (the abandoned step's kernels, an optimizer that
    // ran before the failure): they must not write the regions after the restore did.
    if (ready_marked_) ready_.make_wait(stream_.get());
    for (const ft::RestoreChunk& c : chunks) {
        if (c.bytes == 0) continue;
        auto* dst = static_cast<std::byte*>(regions_[c.region].data) + c.offset;
        if (on_device_[c.region])
            copy_host_side(dst, c.src, c.bytes, HostSide::source);
        else
            std::memcpy(dst, c.src, c.bytes);
    }
    stream_.synchronize();
}

}  // namespace flashrec::gpu
