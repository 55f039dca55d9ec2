#include "flashrec/ft/group_repair.hpp"

#include <algorithm>
#include <numeric>

#include "flashrec/errors.hpp"

namespace flashrec::ft {

NcclRepair parse_nccl_repair(std::string_view name) {
    if (name == "auto") return NcclRepair::automatic;
    if (name == "shrink_grow") return NcclRepair::shrink_grow;
    if (name == "reinit") return NcclRepair::reinit;
    throw Error("recovery.nccl_repair: '" + std::string(name) + "' is not one of auto, shrink_grow, reinit");
}

std::string_view nccl_repair_name(NcclRepair repair) {
    switch (repair) {
        case NcclRepair::automatic: return "auto";
        case NcclRepair::shrink_grow: return "shrink_grow";
        case NcclRepair::reinit: return "reinit";
    }
    return "?";
}

const char* action_name(GroupRepairPlan::Action action) {
    switch (action) {
        case GroupRepairPlan::Action::create: return "create";
        case GroupRepairPlan::Action::shrink_grow: return "shrink_grow";
        case GroupRepairPlan::Action::reinit: return "reinit";
    }
    return "?";
}

namespace {

GroupRepairPlan identity_plan(GroupRepairPlan::Action action, std::size_t size, std::string why) {
    GroupRepairPlan plan;
    plan.action = action;
    plan.why = std::move(why);
    plan.rank_of_position.resize(size);
    std::iota(plan.rank_of_position.begin(), plan.rank_of_position.end(), 0);
    return plan;
}

}  // namespace

GroupRepairPlan plan_group_repair(std::span<const GroupMember> members, NcclRepair repair) {
    using Action = GroupRepairPlan::Action;
    const auto holds = [](const GroupMember& m) { return m.held_rank >= 0; };
    const auto holders = std::count_if(members.begin(), members.end(), holds);
    if (holders == 0) return identity_plan(Action::create, members.size(), "no member holds a communicator");
    if (repair == NcclRepair::reinit)
        return identity_plan(Action::reinit, members.size(), "recovery.nccl_repair: reinit");

    int held_size = 0;
    std::vector<int> held_ranks;
    for (std::size_t p = 0; p < members.size(); ++p) {
        const GroupMember& m = members[p];
        if (!holds(m)) continue;
        if (!m.can_shrink)
            return identity_plan(Action::reinit, members.size(),
                                 "position " + std::to_string(p) +
                                     " cannot shrink its communicator (NCCL failed it, or its NCCL has no shrink)");
        if (held_size != 0 && m.held_size != held_size)
            return identity_plan(Action::reinit, members.size(), "the members disagree on the size of the held communicator");
        held_size = m.held_size;
        held_ranks.push_back(m.held_rank);
    }
    std::vector<int> sorted = held_ranks;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() || sorted.back() >= held_size)
        return identity_plan(Action::reinit, members.size(), "the held ranks are not distinct ranks of one communicator");
    const auto newcomers = static_cast<int>(members.size()) - static_cast<int>(holders);
    // auto takes the shrink path only with NCCL 2.29.2+ everywhere (on 2.28 a revoke took 0.5 s
    // to settle against 10-56 ms for a re-init); shrink_grow takes it without grow too when
    // nobody joins.
    if (newcomers > 0 || repair == NcclRepair::automatic)
        for (std::size_t p = 0; p < members.size(); ++p)
            if (!members[p].can_grow)
                return identity_plan(Action::reinit, members.size(),
                                     "position " + std::to_string(p) + "'s NCCL has no ncclCommGrow (2.29.2+)");

    GroupRepairPlan plan;
    plan.action = Action::shrink_grow;
    plan.survivors = static_cast<int>(holders);
    plan.newcomers = newcomers;
    for (int r = 0; r < held_size; ++r)
        if (!std::binary_search(sorted.begin(), sorted.end(), r)) plan.excluded.push_back(r);
    // ncclCommShrink renumbers the survivors in their old order; ncclCommGrow gives the
    // newcomers the ranks after them, here in position order.
    plan.rank_of_position.resize(members.size());
    int next_newcomer = plan.survivors;
    for (std::size_t p = 0; p < members.size(); ++p) {
        if (holds(members[p])) {
            const auto below = std::lower_bound(sorted.begin(), sorted.end(), members[p].held_rank) - sorted.begin();
            plan.rank_of_position[p] = static_cast<int>(below);
            if (below == 0) plan.grow_root = newcomers > 0 ? static_cast<int>(p) : -1;
        } else {
            plan.rank_of_position[p] = next_newcomer++;
        }
    }
    plan.why = std::to_string(plan.excluded.size()) + " gone, " + std::to_string(newcomers) + " joining";
    return plan;
}

}  // namespace flashrec::ft
