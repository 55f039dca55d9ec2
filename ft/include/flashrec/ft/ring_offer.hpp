// What each role tells the others when protection (re)starts (docs/snapshots.md): the owners
// whose payload at the starting version its stores hold already (a ring successor sends only
// what its holder lacks), and the layout of its own payload (its ring successors size the slots
// that keep it). A typed record in a fixed, versioned binary form, exchanged with one allgather.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "flashrec/ft/snapshot.hpp"

namespace flashrec::ft {

struct RingOffer {
    // The encoding's version: a decoder refuses any other (every process of a job runs one build).
    static constexpr std::uint32_t kFormat = 1;
    std::vector<int> holds;   // owner roles whose payload at the starting version is held here
    SnapshotLayout payload;   // this role's payload: its replicated regions' (name, bytes)

    bool holds_payload_of(int owner) const;
    std::string encode() const;
    // Throws Error naming what is wrong: a collective that a failure interrupted can complete
    // on some processes with a dead peer's part blank or torn.
    static RingOffer decode(std::string_view bytes);
    bool operator==(const RingOffer& other) const;
};

}  // namespace flashrec::ft
