#include "flashrec/runtime/membership.hpp"

#include "flashrec/runtime/device_groups.hpp"

namespace flashrec::runtime {

void Membership::build_communicators(const topology::Shape& shape,
                                     std::chrono::steady_clock::time_point deadline) {
    const bool active = role_index >= 0;
    work = universe.split(active ? 0 : -1, role_index, "work");
    if (active) {
        const auto c = topology::coord_of(shape, role_index);
        const auto split = [&](Group g) { return group_split(shape, c, g); };
        dp = work.split(split(Group::dp).color, split(Group::dp).key, "dp");
        tp = work.split(split(Group::tp).color, split(Group::tp).key, "tp");
        pp = work.split(split(Group::pp).color, split(Group::pp).key, "pp");
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
