#include "flashrec/runtime/membership.hpp"

#include "flashrec/runtime/device_groups.hpp"

namespace flashrec::runtime {

void Membership::build_communicators(const topology::Shape& shape,
                                     std::chrono::steady_clock::time_point deadline) {
    const bool active = role_index >= 0;
    work = universe.split(active ? 0 : -1, role_index, "work");
    if (active) {
        const auto c = topology::coord_of(shape, role_index);
        // A group of one (tp = 1 or pp = 1: no tensor or pipeline parallelism) is the same
        // communicator as a copy of MPI_COMM_SELF, made without a message: each split over `work`
        // is a collective, and on a loaded machine each cost 30-110 ms of a repair's rebuild
        // (docs/slurm.md, "Direct launch"). Every member takes the same way (the shape is global).
        const auto group = [&](Group g, int size, const char* name) {
            const GroupSplit s = group_split(shape, c, g);
            return size == 1 ? ft::Comm::dup_self(name) : work.split(s.color, s.key, name);
        };
        dp = group(Group::dp, shape.dp, "dp");
        tp = group(Group::tp, shape.tp, "tp");
        pp = group(Group::pp, shape.pp, "pp");
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
