// A spare's own admission check of /dev/shm (runtime/spare_health.hpp): the named fake's scopes
// and the room it reports (the decision is plan_repair's: test_recovery_plan.cpp).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "flashrec/errors.hpp"
#include "flashrec/runtime/spare_health.hpp"

using namespace flashrec::runtime::spare_health;

TEST_CASE("the fake /dev/shm room applies only in its scope") {
    CHECK_FALSE(fake_shm_room(nullptr, 0, false).has_value());
    CHECK_FALSE(fake_shm_room("", 0, false).has_value());
    CHECK(fake_shm_room("all:100", -1, true) == std::optional<std::int64_t>(100));
    CHECK(fake_shm_room("spare:1:0", 1, false) == std::optional<std::int64_t>(0));
    CHECK_FALSE(fake_shm_room("spare:1:0", 0, false).has_value());
    CHECK_FALSE(fake_shm_room("spare:1:0", 1, true).has_value());  // a spawned process is no hot spare
    CHECK(fake_shm_room("spawned:5", -1, true) == std::optional<std::int64_t>(5));
    CHECK_FALSE(fake_shm_room("spawned:5", 0, false).has_value());
    CHECK_THROWS_AS(fake_shm_room("100", 0, false), flashrec::Error);
    CHECK_THROWS_AS(fake_shm_room("spare:x:1", 0, false), flashrec::Error);
    CHECK_THROWS_AS(fake_shm_room("all:-1", 0, false), flashrec::Error);
    CHECK_THROWS_AS(fake_shm_room("nodes:1", 0, false), flashrec::Error);
}

TEST_CASE("the room counts the slots made ahead") {
    const std::int64_t free_now = shm_room(0, -1, false);
    CHECK(free_now > 0);
    CHECK(shm_room(std::size_t{1} << 30, -1, false) > free_now);  // free space may change a little meanwhile
}
