// Pinned-memory bookkeeping (which pages to cudaHostRegister, once each, and releasing them),
// with a fake backend: no GPU. Label unit.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashrec/errors.hpp"
#include "flashrec/gpu/pinning.hpp"

using namespace flashrec::gpu;

namespace {

constexpr std::size_t kPage = 4096;
constexpr std::uintptr_t kBase = 0x7f0000000000;  // a fake, page-aligned mapping

const void* at(std::uintptr_t address) { return reinterpret_cast<const void*>(address); }

struct Call {
    bool pin;
    HostRange range;
};

// Records what would be registered; optionally fails the n-th pin like cudaHostRegister would.
class FakeBackend final : public PinBackend {
public:
    void pin(void* data, std::size_t bytes) override {
        const HostRange r = range_of(data, bytes);
        if (fail_at >= 0 && pins == fail_at) {
            ++pins;
            throw flashrec::Error("cudaHostRegister failed (fake)");
        }
        ++pins;
        for (const HostRange& live : registered)
            if (r.begin < live.end() && live.begin < r.end())
                throw std::logic_error("overlapping registration: cudaErrorHostMemoryAlreadyRegistered");
        registered.push_back(r);
        calls.push_back({true, r});
    }
    void unpin(void* data, std::size_t bytes) noexcept override {
        const HostRange r = range_of(data, bytes);
        calls.push_back({false, r});
        std::erase(registered, r);
    }
    int fail_at = -1;
    int pins = 0;
    std::vector<HostRange> registered;
    std::vector<Call> calls;
};

}  // namespace

TEST_CASE("plan_pinning rounds to pages and merges spans that share or touch pages") {
    // Snapshot slot: header + table in the first page, then 64-byte aligned buffers.
    const std::vector<HostRange> buffers = {{kBase + 4096, 1000},   // params
                                            {kBase + 5120, 1000},   // adam_m, same page
                                            {kBase + 6144, 3000},   // adam_v, into the next page
                                            {kBase + 9152, 8}};     // rng
    const auto plan = plan_pinning(buffers, kPage);
    REQUIRE(plan.size() == 1);
    CHECK(plan[0] == HostRange{kBase + 4096, 2 * kPage});

    // Far apart: separate ranges, sorted whatever the input order.
    const std::vector<HostRange> apart = {{kBase + 10 * kPage + 5, 10}, {kBase + 1, 10}};
    const auto two = plan_pinning(apart, kPage);
    REQUIRE(two.size() == 2);
    CHECK(two[0] == HostRange{kBase, kPage});
    CHECK(two[1] == HostRange{kBase + 10 * kPage, kPage});

    // Pages that merely touch stay separate registrations (they may be two mappings);
    // overlapping spans merge; empty spans are ignored.
    const std::vector<HostRange> touching = {{kBase, kPage}, {kBase + kPage, 1}, {kBase + 99, 0}};
    const auto apart_pages = plan_pinning(touching, kPage);
    REQUIRE(apart_pages.size() == 2);
    CHECK(apart_pages[0] == HostRange{kBase, kPage});
    CHECK(apart_pages[1] == HostRange{kBase + kPage, kPage});
    const std::vector<HostRange> overlapping = {{kBase + 100, kPage}, {kBase + kPage + 5, kPage}};
    const auto one = plan_pinning(overlapping, kPage);
    REQUIRE(one.size() == 1);
    CHECK(one[0] == HostRange{kBase, 3 * kPage});

    CHECK(plan_pinning({}, kPage).empty());
    CHECK_THROWS_AS(plan_pinning(buffers, 3000), flashrec::Error);
}

TEST_CASE("split_at_ranges: one piece per registration or gap, in order") {
    const std::vector<HostRange> pinned = {{kBase, kPage}, {kBase + kPage, kPage}, {kBase + 4 * kPage, kPage}};
    // Across two touching registrations, a gap, a third and past it: five pieces.
    const auto pieces = split_at_ranges({kBase + 100, 5 * kPage}, pinned);
    REQUIRE(pieces.size() == 5);
    CHECK(pieces[0] == HostRange{kBase + 100, kPage - 100});
    CHECK(pieces[1] == HostRange{kBase + kPage, kPage});
    CHECK(pieces[2] == HostRange{kBase + 2 * kPage, 2 * kPage});  // the gap
    CHECK(pieces[3] == HostRange{kBase + 4 * kPage, kPage});
    CHECK(pieces[4] == HostRange{kBase + 5 * kPage, 100});        // past the last
    // Inside one registration, or outside all: the span itself.
    CHECK(split_at_ranges({kBase + 10, 20}, pinned) == std::vector<HostRange>{{kBase + 10, 20}});
    CHECK(split_at_ranges({kBase + 9 * kPage, 20}, pinned) == std::vector<HostRange>{{kBase + 9 * kPage, 20}});
    CHECK(split_at_ranges({kBase, 0}, pinned).empty());
}

TEST_CASE("subtract_ranges") {
    const std::vector<HostRange> wanted = {{0, 100}, {200, 100}};
    const std::vector<HostRange> have = {{50, 20}, {90, 150}};
    const auto rest = subtract_ranges(wanted, have);
    REQUIRE(rest.size() == 3);
    CHECK(rest[0] == HostRange{0, 50});
    CHECK(rest[1] == HostRange{70, 20});
    CHECK(rest[2] == HostRange{240, 60});
    CHECK(subtract_ranges(wanted, {}).size() == 2);
    const std::vector<HostRange> all = {{0, 1000}};
    CHECK(subtract_ranges(wanted, all).empty());
}

TEST_CASE("PinnedSet registers each page once and releases everything, newest first") {
    FakeBackend backend;
    {
        PinnedSet set(backend, kPage);
        const std::vector<HostRange> slot0 = {{kBase + 4096, 1000}, {kBase + 5120, 1000}};
        set.pin(slot0);
        CHECK(backend.pins == 1);
        set.pin(slot0);  // already covered: no call
        set.pin(at(kBase + 4100), 10);
        CHECK(backend.pins == 1);
        CHECK(set.covers(at(kBase + 4096), 2000));
        CHECK_FALSE(set.covers(at(kBase + 4096), kPage + 1));
        CHECK(set.covers(at(kBase), 0));

        // A span that reaches past what is pinned: only the new pages are registered, and
        // the fake backend would throw on any overlap.
        set.pin(at(kBase + 4096), 3 * kPage);
        CHECK(backend.pins == 2);
        CHECK(backend.calls.back().range == HostRange{kBase + 2 * kPage, 2 * kPage});
        CHECK(set.covers(at(kBase + 4096), 3 * kPage));
        CHECK(set.pinned_bytes() == 3 * kPage);
        REQUIRE(set.ranges().size() == 2);
        CHECK(set.ranges()[0].begin < set.ranges()[1].begin);

        // A second slot elsewhere.
        set.pin(at(kBase + 100 * kPage), 10);
        CHECK(backend.pins == 3);
        CHECK(backend.registered.size() == 3);
    }
    CHECK(backend.registered.empty());
    REQUIRE(backend.calls.size() == 6);
    CHECK_FALSE(backend.calls[3].pin);
    CHECK(backend.calls[3].range.begin == kBase + 100 * kPage);  // newest first
    CHECK(backend.calls[5].range.begin == kBase + kPage);
}

TEST_CASE("PinnedSet: a failed registration keeps the earlier ones owned and propagates") {
    FakeBackend backend;
    backend.fail_at = 1;
    PinnedSet set(backend, kPage);
    const std::vector<HostRange> spans = {{kBase, 10}, {kBase + 10 * kPage, 10}, {kBase + 20 * kPage, 10}};
    CHECK_THROWS_AS(set.pin(spans), flashrec::Error);
    CHECK(set.ranges().size() == 1);
    CHECK(backend.registered.size() == 1);
    set.clear();
    CHECK(backend.registered.empty());
    CHECK(set.ranges().empty());
    set.clear();  // idempotent
}

TEST_CASE("PinnedSet moves its registrations") {
    FakeBackend backend;
    PinnedSet a(backend, kPage);
    a.pin(at(kBase), 10);
    PinnedSet b(std::move(a));
    CHECK(b.ranges().size() == 1);
    CHECK(backend.registered.size() == 1);
    {
        PinnedSet c(backend, kPage);
        c = std::move(b);
        CHECK(backend.registered.size() == 1);  // moved, not re-registered or dropped
    }
    CHECK(backend.registered.empty());  // c released it
    CHECK_THROWS_AS((void)PinnedSet(backend, 1000), flashrec::Error);
}
