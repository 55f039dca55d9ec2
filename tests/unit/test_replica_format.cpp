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

        // The registered buffers changed size (another trainer build): not this payload.
        std::vector<float> bigger(9, 2.0f);
        const auto other = regions_of(params, bigger, rng);
        CHECK_THROWS_AS(payload_by_region(view, other), flashrec::CorruptState);
    }
    remove_all(job);
}
