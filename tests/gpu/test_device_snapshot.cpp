// Needs a GPU (label gpu; exit 77 = skipped without one): the RAII handles on a real device,
// and the device snapshot copier's round trip D2H/H2D with events, into pinned memory of its
// own and into a shared-memory snapshot slot pinned with cudaHostRegister, driven the way
// Protection drives a RegionCopier.
#include "gpu_test_main.hpp"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "flashrec/errors.hpp"
#include "flashrec/ft/snapshot.hpp"
#include "flashrec/gpu/cuda_check.hpp"
#include "flashrec/gpu/handles.hpp"
#include "flashrec/gpu/snapshot_copier.hpp"

using namespace flashrec::gpu;
using flashrec::ft::LiveRegion;
using flashrec::ft::SaveChunk;

namespace {

std::vector<std::byte> pattern(std::size_t n, int seed) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i)
        v[i] = static_cast<std::byte>((i * 131 + static_cast<std::size_t>(seed) * 17 + i / 4096) & 0xff);
    return v;
}

void upload(const DeviceBuffer& d, const std::vector<std::byte>& host) {
    FLASHREC_CUDA_CHECK(cudaMemcpy(d.data(), host.data(), host.size(), cudaMemcpyHostToDevice));
}

std::vector<std::byte> download(const DeviceBuffer& d) {
    std::vector<std::byte> host(d.size());
    FLASHREC_CUDA_CHECK(cudaMemcpy(host.data(), d.data(), d.size(), cudaMemcpyDeviceToHost));
    return host;
}

class ScratchJob {
public:
    ScratchJob() : name_("tgpudev" + std::to_string(::getpid())) {}
    ScratchJob(const ScratchJob&) = delete;
    ScratchJob& operator=(const ScratchJob&) = delete;
    ~ScratchJob() {
        try {
            flashrec::ft::remove_all(name_);
        } catch (...) {
        }
    }
    const std::string& name() const { return name_; }

private:
    std::string name_;
};

}  // namespace

TEST_CASE("handles on a device: stream, event, device and pinned buffers") {
    Stream stream = Stream::create();
    Event event = Event::create();
    REQUIRE(stream);
    REQUIRE(event);
    DeviceBuffer d = DeviceBuffer::allocate(1 << 20);
    PinnedHostBuffer h = PinnedHostBuffer::allocate(1 << 20);
    CHECK(memory_kind(d.data()) == MemoryKind::device);
    CHECK(memory_kind(h.data()) == MemoryKind::pinned);
    std::vector<std::byte> pageable(16);
    CHECK(memory_kind(pageable.data()) == MemoryKind::pageable);
    CHECK(pointer_device(d.data()) == current_device());

    FLASHREC_CUDA_CHECK(cudaMemsetAsync(d.data(), 0x5a, d.size(), stream.get()));
    FLASHREC_CUDA_CHECK(cudaMemcpyAsync(h.data(), d.data(), d.size(), cudaMemcpyDeviceToHost, stream.get()));
    event.record(stream.get());
    event.synchronize();
    CHECK(event.query());
    CHECK(stream.query());
    CHECK(h.data()[0] == std::byte{0x5a});
    CHECK(h.data()[h.size() - 1] == std::byte{0x5a});

    // Registering existing memory, and moving handles.
    std::vector<std::byte> host(3 * 4096 + 100);
    {
        HostRegistration reg = HostRegistration::pin(host.data(), host.size());
        CHECK(memory_kind(host.data()) == MemoryKind::pinned);
        HostRegistration moved = std::move(reg);
        CHECK(moved.data() == host.data());
        CHECK(reg.data() == nullptr);
    }
    CHECK(memory_kind(host.data()) == MemoryKind::pageable);  // unregistered by the destructor
    Stream other = std::move(stream);
    CHECK(other);
    CHECK_FALSE(stream);
}

TEST_CASE("snapshot copier: D2H into pinned staging with events, then H2D restore") {
    const std::vector<std::size_t> sizes = {4 << 20, 12345, 0};
    std::vector<DeviceBuffer> device;
    std::vector<std::vector<std::byte>> expected;
    for (std::size_t r = 0; r < sizes.size(); ++r) {
        device.push_back(DeviceBuffer::allocate(sizes[r]));
        expected.push_back(pattern(sizes[r], static_cast<int>(r)));
        if (sizes[r] > 0) upload(device.back(), expected.back());
    }
    std::vector<std::byte> envelope = pattern(24, 9);  // a host region in the same copier
    expected.push_back(envelope);

    std::vector<LiveRegion> regions;
    for (const auto& d : device) regions.push_back({d.data(), d.size()});
    regions.push_back({envelope.data(), envelope.size()});
    DeviceSnapshotCopier copier(regions);
    CHECK(std::string(copier.kind()) == "cuda");
    CHECK(copier.on_device(0));
    CHECK(copier.on_device(1));
    CHECK_FALSE(copier.on_device(2));  // empty
    CHECK_FALSE(copier.on_device(3));  // host

    std::vector<PinnedHostBuffer> staging;
    std::vector<std::span<std::byte>> dst;
    for (const auto& region : regions) {
        staging.push_back(PinnedHostBuffer::allocate(region.bytes));
        dst.push_back(staging.back().span());
    }
    copier.start(dst);
    copier.wait();
    CHECK(copier.ready());
    CHECK(copier.pageable_chunks() == 0);
    // The D2H bytes (the device regions' only) and their time on the GPU's clock.
    const flashrec::ft::TransferTiming d2h = copier.last_transfer();
    CHECK(d2h.bytes == sizes[0] + sizes[1]);
    CHECK(d2h.seconds > 0);
    for (std::size_t r = 0; r < regions.size(); ++r) {
        CAPTURE(r);
        if (!expected[r].empty()) CHECK(std::memcmp(dst[r].data(), expected[r].data(), expected[r].size()) == 0);
    }

    // The live state is lost (overwritten); restore brings the snapshot back.
    for (const auto& d : device)
        if (d.size() > 0) FLASHREC_CUDA_CHECK(cudaMemset(d.data(), 0, d.size()));
    std::fill(envelope.begin(), envelope.end(), std::byte{0});
    std::vector<std::span<const std::byte>> src(dst.begin(), dst.end());
    copier.restore(flashrec::ft::plan_restore(copier, src));
    for (std::size_t r = 0; r < device.size(); ++r)
        if (device[r].size() > 0) CHECK(download(device[r]) == expected[r]);
    CHECK(envelope == expected[3]);
}

TEST_CASE("snapshot copier: chunks land in order, each with its own event") {
    DeviceBuffer d = DeviceBuffer::allocate(8 << 20);
    const auto bytes = pattern(d.size(), 3);
    upload(d, bytes);
    DeviceSnapshotCopier copier({{d.data(), d.size()}});
    PinnedHostBuffer staging = PinnedHostBuffer::allocate(d.size());
    std::vector<std::span<std::byte>> dst = {staging.span()};
    const auto chunks = flashrec::ft::plan_save(copier, dst, 1 << 20);
    REQUIRE(chunks.size() == 8);
    std::vector<std::size_t> order;
    copier.save(chunks, [&](std::size_t i) {
        CHECK(copier.chunk_ready(i));
        CHECK(std::memcmp(chunks[i].dst, bytes.data() + chunks[i].offset, chunks[i].bytes) == 0);
        order.push_back(i);
    });
    std::vector<std::size_t> want(chunks.size());
    std::iota(want.begin(), want.end(), 0);
    CHECK(order == want);
    CHECK(copier.last_transfer().bytes == d.size());

    // A pageable destination is pinned on first use, and stays pinned while the copier lives
    // (so the copier is made after the memory, and goes first).
    std::vector<std::byte> pageable(d.size());
    {
        DeviceSnapshotCopier pinning({{d.data(), d.size()}});
        std::vector<std::span<std::byte>> pageable_dst = {std::span<std::byte>(pageable)};
        pinning.start(pageable_dst);
        pinning.wait();
        CHECK(pinning.pageable_chunks() == 0);
        CHECK(pinning.pin_error().empty());
        CHECK(pinning.pinned().covers(pageable.data(), pageable.size()));
        CHECK(memory_kind(pageable.data()) == MemoryKind::pinned);
        CHECK(pageable == bytes);
    }
    CHECK(memory_kind(pageable.data()) == MemoryKind::pageable);

    // Without pinning, pageable staging still works (synchronously, through CUDA's bounce
    // buffer) and is counted.
    std::vector<std::byte> plain(d.size());
    DeviceSnapshotCopier unpinned({{d.data(), d.size()}}, {.pin_destinations = false});
    std::vector<std::span<std::byte>> plain_dst = {std::span<std::byte>(plain)};
    unpinned.start(plain_dst);
    unpinned.wait();
    CHECK(unpinned.pageable_chunks() == 1);
    CHECK(memory_kind(plain.data()) == MemoryKind::pageable);
    CHECK(plain == bytes);

    // Cancelled before it starts: nothing lands.
    std::atomic<bool> cancelled{true};
    int landed = 0;
    CHECK_THROWS_AS(copier.save(chunks, [&](std::size_t) { ++landed; }, &cancelled),
                    flashrec::ft::CopyCancelled);
    CHECK(landed == 0);
    CHECK_THROWS_AS(copier.chunk_ready(99), flashrec::Error);
}

TEST_CASE("snapshot copier: the copy waits on the GPU for the trainer's stream") {
    Stream compute = Stream::create();
    DeviceBuffer big = DeviceBuffer::allocate(std::size_t{1} << 30);  // keeps `compute` busy a while
    DeviceBuffer state = DeviceBuffer::allocate(1 << 20);
    FLASHREC_CUDA_CHECK(cudaMemset(state.data(), 0x11, state.size()));
    DeviceSnapshotCopier copier({{state.data(), state.size()}});
    PinnedHostBuffer staging = PinnedHostBuffer::allocate(state.size());
    std::vector<std::span<std::byte>> dst = {staging.span()};

    for (int round = 0; round < 5; ++round) {
        const auto value = static_cast<unsigned char>(0x20 + round);
        // The "optimizer": slow work, then the new state, all on the trainer's stream.
        for (int k = 0; k < 4; ++k)
            FLASHREC_CUDA_CHECK(cudaMemsetAsync(big.data(), k, big.size(), compute.get()));
        FLASHREC_CUDA_CHECK(cudaMemsetAsync(state.data(), value, state.size(), compute.get()));
        if (round % 2 == 0)
            copier.mark_state_ready(compute.get());  // the host does not wait here
        else
            static_cast<flashrec::ft::RegionCopier&>(copier).state_ready(compute.get());
        copier.start(dst);
        copier.wait();
        CAPTURE(round);
        CHECK(staging.data()[0] == std::byte{value});
        CHECK(staging.data()[state.size() - 1] == std::byte{value});
    }
    compute.synchronize();
}

TEST_CASE("snapshot copier: a restore lands after the trainer's stream (the runtime's recovery)") {
    Stream compute = Stream::create();
    DeviceBuffer big = DeviceBuffer::allocate(std::size_t{1} << 30);  // keeps `compute` busy a while
    DeviceBuffer state = DeviceBuffer::allocate(1 << 20);
    DeviceSnapshotCopier copier({{state.data(), state.size()}});
    const std::vector<std::byte> snapshot(state.size(), std::byte{0x5a});
    // A late kernel of an abandoned step writes the state after slow work on the trainer's
    // stream; the restore must not be overwritten by it.
    for (int k = 0; k < 4; ++k)
        FLASHREC_CUDA_CHECK(cudaMemsetAsync(big.data(), k, big.size(), compute.get()));
    FLASHREC_CUDA_CHECK(cudaMemsetAsync(state.data(), 0x77, state.size(), compute.get()));
    copier.mark_state_ready(compute.get());
    const std::vector<std::span<const std::byte>> src = {std::span(snapshot)};
    copier.restore(flashrec::ft::plan_restore(copier, src));
    std::vector<std::byte> back(state.size());
    FLASHREC_CUDA_CHECK(cudaMemcpy(back.data(), state.data(), back.size(), cudaMemcpyDeviceToHost));
    CHECK(back.front() == std::byte{0x5a});
    CHECK(back.back() == std::byte{0x5a});
    compute.synchronize();
}

TEST_CASE("Protection's way: stage into a pinned shared-memory snapshot slot, commit, restore") {
    ScratchJob job;
    const flashrec::ft::SnapshotLayout layout = {{"params", 3 << 20}, {"adam_m", 100000}, {"adam_t", 8}};
    std::vector<DeviceBuffer> device;
    std::vector<std::vector<std::byte>> live_bytes;
    std::vector<LiveRegion> regions;
    for (std::size_t b = 0; b < 2; ++b) {
        device.push_back(DeviceBuffer::allocate(layout[b].bytes));
        regions.push_back({device.back().data(), layout[b].bytes});
    }
    std::int64_t adam_t = 0;  // host envelope state
    regions.push_back({&adam_t, sizeof adam_t});
    flashrec::ft::SnapshotStore store(job.name(), "dp0.tp0.pp0", layout);
    DeviceSnapshotCopier copier(regions);  // after the store: its pins go before the store unmaps

    for (std::int64_t step = 1; step <= 3; ++step) {
        live_bytes.clear();
        for (std::size_t b = 0; b < 2; ++b) {
            live_bytes.push_back(pattern(layout[b].bytes, static_cast<int>(step * 10 + static_cast<std::int64_t>(b))));
            upload(device[b], live_bytes.back());
        }
        adam_t = step;
        flashrec::ft::WriteView view = store.begin_write(step, 0);
        std::vector<std::span<std::byte>> dst;
        for (const auto& buffer : view.buffers) dst.push_back(buffer.bytes);
        const auto chunks = flashrec::ft::plan_save(copier, dst, 1 << 20);
        copier.save(chunks, [&](std::size_t i) {
            store.note_written(chunks[i].region, chunks[i].offset, chunks[i].bytes);
        });
        CHECK(copier.pageable_chunks() == 0);  // the shm slot got pinned: true async DMA
        CHECK(copier.pin_error().empty());
        store.commit();
    }
    CHECK(copier.pinned().ranges().size() >= 2);  // both ping-pong slots, registered once each
    const std::size_t pinned_after_3 = copier.pinned().pinned_bytes();

    const flashrec::ft::SnapshotView committed = store.committed(3);
    REQUIRE(committed.ok);
    for (std::size_t b = 0; b < 2; ++b)
        CHECK(std::memcmp(committed.buffers[b].bytes.data(), live_bytes[b].data(), live_bytes[b].size()) == 0);

    for (const auto& d : device) FLASHREC_CUDA_CHECK(cudaMemset(d.data(), 0xff, d.size()));
    adam_t = -1;
    std::vector<std::span<const std::byte>> src;
    for (const auto& buffer : committed.buffers) src.push_back(buffer.bytes);
    // params spans three registrations (the slot was pinned chunk by chunk): one copy per piece.
    CHECK(copier.pinned().pieces(src[0].data(), src[0].size()).size() > 1);
    copier.restore(flashrec::ft::plan_restore(copier, src));
    for (std::size_t b = 0; b < 2; ++b) CHECK(download(device[b]) == live_bytes[b]);
    CHECK(adam_t == 3);

    // A 4th snapshot reuses a slot: nothing new is pinned.
    flashrec::ft::WriteView view = store.begin_write(4, 0);
    std::vector<std::span<std::byte>> dst;
    for (const auto& buffer : view.buffers) dst.push_back(buffer.bytes);
    copier.save(flashrec::ft::plan_save(copier, dst, 1 << 20), {});
    CHECK(copier.pinned().pinned_bytes() == pinned_after_3);
}
