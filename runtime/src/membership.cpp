#include "flashrec/runtime/membership.hpp"

namespace flashrec::runtime {

void Membership::build_communicators(const topology::Shape& shape,
                                     std::chrono::steady_clock::time_point deadline) {
    const bool active = role_index >= 0;
    work = universe.split(active ? 0 : -1, role_index, "work");
    if (active) {
        const auto c = topology::coord_of(shape, role_index);
        dp = work.split(c.tp + shape.tp * c.pp, c.dp, "dp");
        tp = work.split(c.dp + shape.dp * c.pp, c.tp, "tp");
        pp = work.split(c.tp + shape.tp * c.dp, c.pp, "pp");
        replication = work.dup("replication");
        checkpoint = work.dup("checkpoint");
    } else {
        dp = ft::Comm(), tp = ft::Comm(), pp = ft::Comm(), replication = ft::Comm();
        checkpoint = ft::Comm();
    }
    // Every member passes this agreement only after creating every communicator above, so
    // revoking them later cannot hit a peer still inside their creation (docs/ulfm-traps.md trap 6).
    universe.agree(1, deadline);
}

void Membership::revoke_all() noexcept {
    for (ft::Comm* c : {&dp, &tp, &pp, &work, &universe}) c->revoke();
}

void Membership::free_all() {
    for (ft::Comm* c : {&dp, &tp, &pp, &replication, &checkpoint, &work, &universe}) *c = ft::Comm();
}

}  // namespace flashrec::runtime
