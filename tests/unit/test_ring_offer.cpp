// The ring offer exchanged when protection starts: typed, versioned, and refused with a clear
// error when torn (a collective that a failure interrupted).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>

#include "flashrec/errors.hpp"
#include "flashrec/ft/ring_offer.hpp"

using flashrec::ft::RingOffer;

namespace {
RingOffer sample() {
    RingOffer offer;
    offer.holds = {3, 5};
    offer.payload = {{"master", 4096}, {"rng\tstate", 16}, {"", 0}};
    return offer;
}
}  // namespace

TEST_CASE("a ring offer reads back as written") {
    const RingOffer offer = sample();
    CHECK(RingOffer::decode(offer.encode()) == offer);
    CHECK(offer.holds_payload_of(5));
    CHECK_FALSE(offer.holds_payload_of(4));
    const RingOffer empty;
    CHECK(RingOffer::decode(empty.encode()) == empty);
}

TEST_CASE("a torn, blank or foreign ring offer is refused with what is wrong") {
    const std::string bytes = sample().encode();
    CHECK_THROWS_WITH_AS(RingOffer::decode(""), doctest::Contains("blank"), flashrec::Error);
    for (std::size_t cut = 1; cut < bytes.size(); ++cut)
        CHECK_THROWS_AS(RingOffer::decode(bytes.substr(0, cut)), flashrec::Error);
    CHECK_THROWS_WITH_AS(RingOffer::decode(bytes.substr(0, bytes.size() - 3)), doctest::Contains("torn"),
                         flashrec::Error);
    CHECK_THROWS_WITH_AS(RingOffer::decode(bytes + "x"), doctest::Contains("after its last buffer"), flashrec::Error);
    std::string other = bytes;
    other[4] = 2;  // format 2
    CHECK_THROWS_WITH_AS(RingOffer::decode(other), doctest::Contains("format 2"), flashrec::Error);
    CHECK_THROWS_WITH_AS(RingOffer::decode("XXXX" + bytes.substr(4)), doctest::Contains("FRRO"), flashrec::Error);
}
