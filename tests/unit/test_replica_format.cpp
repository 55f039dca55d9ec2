// The replica format, both directions, in ft: a ring copy written in payload_layout order and
// read back by region with payload_by_region (what recovery sends a replacement).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "flashrec/errors.hpp"
#include "flashrec/ft/protection.hpp"
#include "flashrec/ft/snapshot.hpp"

using namespace flashrec::ft;

namespace {
std::vector<ProtectedRegion> regions_of(std::vector<float>& params, std::vector<float>& master,
                                        std::vector<float>& rng) {
    // Registration order: replicated, sharded, envelope (as a trainer protects them).
    return {{"params", params.data(), params.size() * sizeof(float), false},
            {"master", master.data(), master.size() * sizeof(float), true},
            {"rng", rng.data(), rng.size() * sizeof(float), true}};
}
}  // namespace

TEST_CASE("a held replica reads back by region; regions it does not carry are empty") {
    std::vector<float> params(16, 1.0f), master(8, 2.0f), rng(2, 3.0f);
    const auto regions = regions_of(params, master, rng);
    CHECK(payload_index(regions) == std::vector<int>{-1, 0, 1});
    const SnapshotLayout payload = payload_layout(regions);
    REQUIRE(payload.size() == 2);

    const std::string job = "replica" + std::to_string(::getpid());
    {
        SnapshotStore held(job, peer_role_key("dp1.tp0.pp0", "dp2.tp0.pp0"), payload);
        const WriteView write = held.begin_write(5, 0);
        std::memcpy(write.buffers[0].bytes.data(), master.data(), write.buffers[0].bytes.size());
        std::memcpy(write.buffers[1].bytes.data(), rng.data(), write.buffers[1].bytes.size());
        held.commit();
        const SnapshotView view = held.committed(5);
        REQUIRE(view.ok);
        const auto by_region = payload_by_region(view, regions);
        REQUIRE(by_region.size() == 3);
        CHECK(by_region[0].empty());
        CHECK(by_region[1].size() == master.size() * sizeof(float));
        CHECK(std::memcmp(by_region[1].data(), master.data(), by_region[1].size()) == 0);
        CHECK(std::memcmp(by_region[2].data(), rng.data(), by_region[2].size()) == 0);

        // The holder's own shard differs in size from the owner's (a buffer that does not
        // divide by dp): the held copy is read back with the owner's sizes.
        std::vector<float> holders_shard(7, 5.0f);
        const auto holder = regions_of(params, holders_shard, rng);
        const auto owners = payload_by_region(view, holder);
        CHECK(owners[1].size() == master.size() * sizeof(float));
        CHECK(std::memcmp(owners[1].data(), master.data(), owners[1].size()) == 0);

        // Another trainer build registered other buffers: not this payload.
        auto renamed = regions;
        renamed[1].name = "adam_m";
        CHECK_THROWS_AS(payload_by_region(view, renamed), flashrec::CorruptState);
        auto more = regions;
        more.push_back({"extra", rng.data(), 4, true});
        CHECK_THROWS_AS(payload_by_region(view, more), flashrec::CorruptState);
    }
    remove_all(job);
}

TEST_CASE("uneven and empty shards: every role's payload round-trips with its own sizes") {
    // 676 elements over dp 8 (84 or 85 per role) and 4 over dp 8 (roles with an empty shard),
    // as shard_range splits them: role j holds [n*j/d, n*(j+1)/d).
    const std::string job = "uneven" + std::to_string(::getpid());
    for (const std::size_t n : {std::size_t{676}, std::size_t{4}, std::size_t{9}}) {
        constexpr std::size_t d = 8;
        std::vector<float> params(n, 1.0f), rng(2, 3.0f);
        for (std::size_t owner = 0; owner < d; ++owner) {
            const std::size_t first = n * owner / d, last = n * (owner + 1) / d;
            std::vector<float> master(last - first);
            for (std::size_t i = 0; i < master.size(); ++i) master[i] = static_cast<float>(first + i);
            const auto owner_regions = regions_of(params, master, rng);
            const SnapshotLayout payload = payload_layout(owner_regions);
            CHECK(payload[0].bytes == master.size() * sizeof(float));
            // Held by its ring successor, whose own shard has another size.
            const std::size_t holder = (owner + 1) % d;
            std::vector<float> holders(n * (holder + 1) / d - n * holder / d, -1.0f);
            const auto holder_regions = regions_of(params, holders, rng);
            SnapshotStore held(job, peer_role_key("dp" + std::to_string(owner) + ".tp0.pp0",
                                                  "dp" + std::to_string(holder) + ".tp0.pp0"),
                               payload);
            const WriteView write = held.begin_write(3, 0);
            if (!master.empty()) std::memcpy(write.buffers[0].bytes.data(), master.data(), write.buffers[0].bytes.size());
            std::memcpy(write.buffers[1].bytes.data(), rng.data(), write.buffers[1].bytes.size());
            held.commit();
            const SnapshotView view = held.committed(3);
            REQUIRE(view.ok);
            const auto by_region = payload_by_region(view, holder_regions);
            CHECK(by_region[1].size() == master.size() * sizeof(float));
            if (!master.empty()) CHECK(std::memcmp(by_region[1].data(), master.data(), by_region[1].size()) == 0);
            CHECK(std::memcmp(by_region[2].data(), rng.data(), by_region[2].size()) == 0);
        }
        remove_all(job);
    }
}
