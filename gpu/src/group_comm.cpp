#include "flashrec/gpu/group_comm.hpp"

#include <mpi.h>

#include <array>
#include <string>
#include <vector>

#include "flashrec/errors.hpp"

namespace flashrec::gpu {

NcclOptions GroupComm::options(int device, ft::NcclRepair repair) {
    NcclOptions options;
    options.abort_flag = &abort_flag_;
    options.device = device;
    options.before_poll = [this] {
        if (channel_.failure_seen()) abort_flag_.store(true, std::memory_order_release);
    };
    // Kept for a shrink: a failed operation revokes instead of aborting.
    options.keep_after_failure = repair != ft::NcclRepair::reinit;
    return options;
}

ft::GroupMember GroupComm::self() const {
    const ft::NcclAbilities abilities = NcclComm::abilities();
    ft::GroupMember me;
    me.can_grow = abilities.grow;
    if (nccl_.get() != nullptr) {  // live, or revoked by the failure: kept for a shrink
        me.held_rank = nccl_.rank();
        me.held_size = nccl_.size();
        me.can_shrink = abilities.shrink;
    }
    return me;
}

void GroupComm::prepare(const ft::Comm& group, std::uint64_t generation, int device,
                        std::chrono::steady_clock::time_point deadline, ft::NcclRepair repair) {
    if (nccl_.valid() && generation_ == generation) return;
    const auto started = std::chrono::steady_clock::now();
    repair_ = repair;
    // Every member's state, gathered over the repaired group: the same table, so the same plan.
    const ft::GroupMember me = self();
    const std::array<int, 4> mine{me.held_rank, me.held_size, me.can_shrink ? 1 : 0, me.can_grow ? 1 : 0};
    const int size = group.size();
    std::vector<int> table(static_cast<std::size_t>(size) * mine.size());
    ft::check(MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT, table.data(),
                            static_cast<int>(mine.size()), MPI_INT, group.get()),
              "MPI_Allgather(NCCL repair plan)", group);
    std::vector<ft::GroupMember> members(static_cast<std::size_t>(size));
    for (std::size_t p = 0; p < members.size(); ++p)
        members[p] = {table[4 * p], table[4 * p + 1], table[4 * p + 2] != 0, table[4 * p + 3] != 0};
    ft::GroupRepairPlan plan = ft::plan_group_repair(members, repair);
    if (plan.action != ft::GroupRepairPlan::Action::shrink_grow) nccl_.abort();  // never blocks

    // The channel first: once it is agreed on, a failure during the NCCL calls below is
    // announced on it and ends every peer's wait.
    channel_ = FailureChannel::open(group, deadline);
    abort_flag_.store(false, std::memory_order_release);
    const int position = group.rank();
    if (plan.action != ft::GroupRepairPlan::Action::shrink_grow) {
        nccl_ = NcclComm::create(group, options(device, repair));
    } else if (me.held_rank >= 0) {
        NcclComm shrunk = nccl_.shrink(plan.excluded, options(device, repair));  // aborts the parent
        if (plan.newcomers == 0) {
            nccl_ = std::move(shrunk);
        } else {
            const ncclUniqueId id = exchange_unique_id(
                group.get(), group.name(), [&shrunk] { return shrunk.grow_id(); }, plan.grow_root);
            nccl_ = shrunk.grow(size, position == plan.grow_root ? &id : nullptr, options(device, repair));
        }
    } else {
        const ncclUniqueId id = exchange_unique_id(
            group.get(), group.name(), [] () -> ncclUniqueId { throw Error("a newcomer cannot make a grow id"); },
            plan.grow_root);
        nccl_ = NcclComm::join_grow(id, size, plan.rank_of_position[static_cast<std::size_t>(position)], group.name(),
                                    options(device, repair));
    }
    if (nccl_.rank() != plan.rank_of_position[static_cast<std::size_t>(position)])
        throw Error("NCCL repair of '" + group.name() + "': position " + std::to_string(position) + " got NCCL rank " +
                    std::to_string(nccl_.rank()) + ", the plan says " +
                    std::to_string(plan.rank_of_position[static_cast<std::size_t>(position)]));
    rank_of_position_ = plan.rank_of_position;
    position_ = position;
    last_plan_ = std::move(plan);
    generation_ = generation;
    ++builds_;
    try {
        pending_.push_back({group.name(), ft::action_name(last_plan_.action),
                            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count()});
    } catch (...) {  // out of memory for a figure: the communicator is made, which is what counts
    }
}

void GroupComm::abort() noexcept {
    abort_flag_.store(true, std::memory_order_release);
    if (repair_ != ft::NcclRepair::reinit)
        nccl_.revoke();  // kept for the shrink; aborted by revoke() where NCCL cannot revoke it
    else
        nccl_.abort();
    channel_.announce();
}

}  // namespace flashrec::gpu
