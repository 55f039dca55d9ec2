// The RegionCopier contract with its host implementation (the CPU path), and the way
// Protection drives it against a real SnapshotStore: chunks land in order, each is noted
// (checksummed) as it lands, the version commits, and restore puts it back. No GPU; the same
// contract is run against DeviceSnapshotCopier in test_device_snapshot.cpp. Label unit.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "flashrec/errors.hpp"
#include "flashrec/ft/snapshot.hpp"
#include "flashrec/ft/region_copier.hpp"

#include "../unit/scratch_job.hpp"

using namespace flashrec::ft;

using flashrec::test::ScratchJob;

namespace {

std::vector<std::byte> bytes_of(std::size_t n, int seed) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 7 + static_cast<std::size_t>(seed) * 13) & 0xff);
    return v;
}

}  // namespace

TEST_CASE("host copier: every chunk lands in order, exactly once, with its bytes already there") {
    std::vector<std::vector<std::byte>> live = {bytes_of(10, 1), bytes_of(0, 2), bytes_of(7, 3)};
    std::vector<LiveRegion> regions;
    for (auto& v : live) regions.push_back({v.data(), v.size()});
    HostRegionCopier copier(regions);
    CHECK(std::string(copier.kind()) == "host");
    copier.state_ready(nullptr);  // nothing to wait for on the host
    CHECK(copier.region_count() == 3);

    std::vector<std::vector<std::byte>> staging = {std::vector<std::byte>(10), {}, std::vector<std::byte>(7)};
    std::vector<std::span<std::byte>> dst;
    for (auto& v : staging) dst.emplace_back(v);
    const auto chunks = plan_save(copier, dst, 4);
    REQUIRE(chunks.size() == 5);  // 4+4+2, (empty region: none), 4+3
    CHECK(chunks[2].bytes == 2);
    CHECK(chunks[3].region == 2);

    std::vector<std::size_t> order;
    copier.save(chunks, [&](std::size_t i) {
        const SaveChunk& c = chunks[i];
        CHECK(std::memcmp(c.dst, live[c.region].data() + c.offset, c.bytes) == 0);
        order.push_back(i);
    });
    std::vector<std::size_t> expected(chunks.size());
    std::iota(expected.begin(), expected.end(), 0);
    CHECK(order == expected);
    CHECK(staging == live);
    CHECK(copier.last_transfer().bytes == 0);  // no DMA: the copy is the CPU's (copy_seconds)

    // Restore puts the staged bytes back.
    std::vector<std::span<const std::byte>> src;
    for (auto& v : staging) src.emplace_back(v);
    for (auto& v : live) std::fill(v.begin(), v.end(), std::byte{0});
    copier.restore(plan_restore(copier, src));
    CHECK(live == staging);
}

TEST_CASE("host copier: bad chunks are refused before anything is copied") {
    std::vector<std::byte> live = bytes_of(16, 4), dst(16);
    HostRegionCopier copier({{live.data(), live.size()}});
    int landed = 0;
    const auto count = [&](std::size_t) { ++landed; };
    const std::vector<SaveChunk> outside = {{0, 0, 8, dst.data()}, {0, 12, 8, dst.data() + 12}};
    CHECK_THROWS_AS(copier.save(outside, count), flashrec::Error);
    const std::vector<SaveChunk> no_region = {{1, 0, 8, dst.data()}};
    CHECK_THROWS_AS(copier.save(no_region, count), flashrec::Error);
    const std::vector<SaveChunk> null_dst = {{0, 0, 8, nullptr}};
    CHECK_THROWS_AS(copier.save(null_dst, count), flashrec::Error);
    CHECK(landed == 0);
    CHECK(dst == std::vector<std::byte>(16));
    const std::vector<RestoreChunk> restore_outside = {{0, 16, 1, dst.data()}};
    CHECK_THROWS_AS(copier.restore(restore_outside), flashrec::Error);

    std::vector<std::span<std::byte>> wrong_size = {std::span<std::byte>(dst).first(15)};
    CHECK_THROWS_AS(plan_save(copier, wrong_size, 4), flashrec::Error);
    std::vector<std::span<std::byte>> right = {std::span<std::byte>(dst)};
    CHECK_THROWS_AS(plan_save(copier, right, 0), flashrec::Error);
    CHECK_THROWS_AS(plan_save(copier, {}, 4), flashrec::Error);
}

TEST_CASE("host copier: cancellation and a failing consumer stop the save") {
    std::vector<std::byte> live = bytes_of(64, 5), dst(64);
    HostRegionCopier copier({{live.data(), live.size()}});
    std::vector<std::span<std::byte>> spans = {std::span<std::byte>(dst)};
    const auto chunks = plan_save(copier, spans, 8);

    std::atomic<bool> cancelled{false};
    std::size_t landed = 0;
    CHECK_THROWS_AS(copier.save(chunks,
                                [&](std::size_t i) {
                                    landed = i + 1;
                                    if (i == 2) cancelled = true;  // Protection::abort meanwhile
                                },
                                &cancelled),
                    CopyCancelled);
    CHECK(landed == 3);

    landed = 0;
    CHECK_THROWS_AS(copier.save(chunks,
                                [&](std::size_t i) {
                                    if (i == 4) throw flashrec::Error("send failed");
                                    landed = i + 1;
                                }),
                    flashrec::Error);
    CHECK(landed == 4);
}

TEST_CASE("how Protection drives a copier: note each chunk as it lands, commit, restore") {
    ScratchJob job;
    const SnapshotLayout layout = {{"params", 10000}, {"adam_m", 3000}, {"step", 8}};
    std::vector<std::vector<std::byte>> live = {bytes_of(10000, 1), bytes_of(3000, 2), bytes_of(8, 3)};
    std::vector<LiveRegion> regions;
    for (auto& v : live) regions.push_back({v.data(), v.size()});
    HostRegionCopier copier(regions);
    SnapshotStore store(job.name(), "dp0.tp0.pp0", layout);

    for (std::int64_t step = 1; step <= 3; ++step) {
        for (auto& v : live) v[0] = static_cast<std::byte>(step);  // the optimizer's update
        WriteView view = store.begin_write(step, 0);
        std::vector<std::span<std::byte>> dst;
        for (const auto& b : view.buffers) dst.push_back(b.bytes);
        const auto chunks = plan_save(copier, dst, 4096);
        copier.save(chunks, [&](std::size_t i) {
            store.note_written(chunks[i].region, chunks[i].offset, chunks[i].bytes);
            // ... and, for a replicated region, transfers.send(chunks[i].dst, chunks[i].bytes, ...)
        });
        store.commit();
    }
    const SnapshotView committed = store.committed(3);
    REQUIRE(committed.ok);
    for (std::size_t b = 0; b < live.size(); ++b)
        CHECK(std::memcmp(committed.buffers[b].bytes.data(), live[b].data(), live[b].size()) == 0);

    // Restore after a failure: the live state is lost, the committed version comes back.
    const auto expected = live;
    for (auto& v : live) std::fill(v.begin(), v.end(), std::byte{0xee});
    std::vector<std::span<const std::byte>> src;
    for (const auto& b : committed.buffers) src.push_back(b.bytes);
    copier.restore(plan_restore(copier, src));
    CHECK(live == expected);
    CHECK(committed.unchanged());

    std::vector<std::span<const std::byte>> short_src = {src[0], src[1]};
    CHECK_THROWS_AS(plan_restore(copier, short_src), flashrec::Error);
}
