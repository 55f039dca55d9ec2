// ft::Quarantine keeps what an aborted epoch's transfers may still touch, and releases it only
// after clean steps that follow an abort.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <memory>

#include "flashrec/ft/quarantine.hpp"

using flashrec::ft::Quarantine;

namespace {
struct Tracked {
    explicit Tracked(int& alive) : alive_(alive) { ++alive_; }
    ~Tracked() { --alive_; }
    int& alive_;
};
}  // namespace

TEST_CASE("nothing is released without an abort") {
    int alive = 0;
    Quarantine q;
    q.hold(std::make_unique<Tracked>(alive));
    for (int i = 0; i < 10; ++i) q.clean_step();
    CHECK(alive == 1);
    CHECK_FALSE(q.after_abort());
}

TEST_CASE("after an abort, everything held is released after kCleanSteps clean steps") {
    int alive = 0;
    Quarantine q;
    q.hold(std::make_unique<Tracked>(alive));
    q.epoch_aborted();
    auto staging = q.buffer(64);
    CHECK(staging.size() == 64);
    q.hold(std::make_shared<Tracked>(alive));
    CHECK(q.after_abort());
    for (int i = 1; i < Quarantine::kCleanSteps; ++i) q.clean_step();
    CHECK(alive == 2);
    q.epoch_aborted();  // another failure restarts the count
    for (int i = 1; i < Quarantine::kCleanSteps; ++i) q.clean_step();
    CHECK(alive == 2);
    q.clean_step();
    CHECK(alive == 0);
    CHECK_FALSE(q.after_abort());
}

TEST_CASE("release() frees at once") {
    int alive = 0;
    Quarantine q;
    Tracked& t = q.hold(std::make_unique<Tracked>(alive));
    CHECK(&t.alive_ == &alive);
    q.epoch_aborted();
    q.release();
    CHECK(alive == 0);
}
