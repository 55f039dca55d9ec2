// How one group's NCCL communicator (DP, TP or PP) is made again after a repair of the MPI groups
// (docs/gpu.md, "Repairing NCCL: shrink + grow"). Pure: no MPI, no NCCL, no CUDA, so the plan is
// unit-tested on any machine; gpu::GroupComm gathers the members' states over the repaired MPI
// group (every member then holds the same table) and applies the plan.
//
//   shrink_grow: the survivors make their communicator from the one they held (ncclCommShrink,
//                dead ranks excluded, no bootstrap), then the newcomers join it (ncclCommGrow,
//                NCCL 2.29.2+; the grow id goes from the shrunk communicator's rank 0 over MPI).
//   reinit:      every member aborts what it holds and makes a new communicator from the
//                repaired MPI group (ncclCommInitRankConfig, unique id over MPI): always works.
//   create:      nobody holds a communicator yet (the first collective of the group).
//
// Ranks: after a shrink + grow the NCCL ranks are no longer the group's order (survivors keep
// their relative order, newcomers come last), so the plan carries the NCCL rank of each position
// of the group; the collectives address peers through it and keep their fixed summation order by
// position, so results stay bitwise those of the CPU path.
#pragma once
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace flashrec::ft {

// recovery.nccl_repair (docs/config.md).
enum class NcclRepair {
    automatic,    // shrink + grow where every member's NCCL has grow (2.29.2+), else re-init
    shrink_grow,  // shrink + grow; without grow a group nobody joins is still shrunk
    reinit,       // always abort + re-init (the fall-back, forced)
};
NcclRepair parse_nccl_repair(std::string_view name);  // throws flashrec::Error naming the value
std::string_view nccl_repair_name(NcclRepair repair);

// NCCL_VERSION_CODE of a version: 2.29.2 -> 22902.
constexpr int nccl_version_code(int major, int minor, int patch) { return major * 10000 + minor * 100 + patch; }
inline constexpr int kNcclGrowSince = nccl_version_code(2, 29, 2);
// From 2.31 on, a survivor must abort (never destroy) the parent after a shrink that aborted it
// (NCCL_SHRINK_ABORT), or it hangs; gpu::NcclComm::shrink always aborts the parent.
inline constexpr int kNcclAbortParentSince = nccl_version_code(2, 31, 0);

// What the NCCL this process loaded can do (gpu::NcclComm::abilities()).
struct NcclAbilities {
    int version = 0;  // NCCL_VERSION_CODE; 0: unknown
    bool shrink = false;  // ncclCommRevoke + ncclCommShrink
    bool grow = false;    // ncclCommGrow + ncclCommGetUniqueId
};

// One member of the repaired group as it reports itself, indexed by its position in the group.
struct GroupMember {
    int held_rank = -1;   // its rank in the communicator it still holds (revoked); -1: none
    int held_size = 0;    // that communicator's size
    bool can_shrink = false;  // it holds one NCCL has not failed, and its NCCL can shrink
    bool can_grow = false;    // its NCCL can grow (newcomers too)
    bool operator==(const GroupMember&) const = default;
};

struct GroupRepairPlan {
    enum class Action { create, shrink_grow, reinit };
    Action action = Action::create;
    std::string why;              // one line: why this action (logged, recorded)
    std::vector<int> excluded;    // shrink_grow: ranks of the held communicator that are gone
    int survivors = 0;            // shrink_grow: members holding a communicator
    int newcomers = 0;            // shrink_grow: members joining by ncclCommGrow (0: no grow)
    int grow_root = -1;           // shrink_grow with newcomers: the position of new NCCL rank 0
    std::vector<int> rank_of_position;  // the NCCL rank of each position after the repair
};
const char* action_name(GroupRepairPlan::Action action);

// The plan every member computes from the same gathered table. `members[p]` is position p.
// Re-init whenever shrink + grow cannot be done by all: forced, an NCCL without grow anywhere
// (auto; shrink_grow only when someone joins), a holder that cannot shrink (NCCL failed its
// communicator, or no shrink), members that disagree on the held communicator's size, or held
// ranks that are not distinct.
GroupRepairPlan plan_group_repair(std::span<const GroupMember> members, NcclRepair repair);

}  // namespace flashrec::ft
