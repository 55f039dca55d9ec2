// One NCCL communicator of one group of the job (DP, TP or PP: docs/gpu.md, "Device collectives
// for TP and PP"), with what keeps it from hanging and what repairs it:
//
//   - a FailureChannel over the same MPI group and an abort flag (as DeviceDpCollectives had
//     for DP alone): a peer's failure or revoke ends every NCCL wait of the group;
//   - prepare(): before a collective, made for the runtime's current generation (its repair
//     epoch). After a repair the members gather what each still holds over the repaired MPI
//     group and all follow the same ft::plan_group_repair: shrink + grow (survivors from the
//     communicator they revoked, newcomers joining by ncclCommGrow) or abort + re-init;
//   - peer(position): the NCCL rank of a position of the group. Collectives address positions
//     (dp / tp / pp coordinate), so their fixed summation order survives a shrink + grow that
//     renumbered the NCCL ranks.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "flashrec/ft/comm.hpp"
#include "flashrec/ft/group_repair.hpp"
#include "flashrec/gpu/failure_channel.hpp"
#include "flashrec/gpu/nccl_comm.hpp"

namespace flashrec::gpu {

class GroupComm {
public:
    GroupComm() = default;  // makes no CUDA, NCCL or MPI call
    GroupComm(const GroupComm&) = delete;  // the NCCL options point here
    GroupComm& operator=(const GroupComm&) = delete;
    ~GroupComm() = default;  // aborts the communicator if still held (never blocks)

    // Collective over `group` when there is no communicator for `generation` yet (see the header
    // comment), a no-op otherwise. `repair` (recovery.nccl_repair) chooses how a held one is
    // repaired, and whether a failure revokes it (kept for a shrink) or aborts it. Throws
    // ProcessFailure/CommRevoked (MPI), NcclError, CudaError.
    void prepare(const ft::Comm& group, std::uint64_t generation, int device,
                 std::chrono::steady_clock::time_point deadline, ft::NcclRepair repair);

    // The job is failing: sets the abort flag, revokes the communicator (kept for a shrink) or
    // aborts it (re-init), announces it on the failure channel. Local; never throws.
    void abort() noexcept;
    // Collective clean shutdown at the end of the job.
    void finalize() { nccl_.finalize(); }

    bool ready() const { return nccl_.valid(); }
    NcclComm& nccl() { return nccl_; }
    int position() const { return position_; }
    int size() const { return static_cast<int>(rank_of_position_.size()); }
    int peer(int position) const { return rank_of_position_.at(static_cast<std::size_t>(position)); }
    const std::atomic<bool>& abort_flag() const { return abort_flag_; }
    std::size_t builds() const { return builds_; }
    // The communicators made or repaired since the last take_*: the group, how, milliseconds.
    struct Build {
        std::string group;   // the MPI group's name: "dp", "tp", "pp"
        std::string action;  // ft::action_name: create, shrink_grow, reinit
        double ms = 0;
    };
    std::vector<Build> take_builds() noexcept { return std::exchange(pending_, {}); }
    // Their milliseconds in all (and forgets them); 0 if none.
    double take_build_ms() noexcept {
        double ms = 0;
        for (const Build& b : take_builds()) ms += b.ms;
        return ms;
    }
    // The last prepare's plan (action, why): what the repair record and the benchmark report.
    const ft::GroupRepairPlan& last_plan() const { return last_plan_; }

private:
    NcclOptions options(int device, ft::NcclRepair repair);
    ft::GroupMember self() const;

    std::atomic<bool> abort_flag_{false};  // before nccl_: it points here
    FailureChannel channel_;
    NcclComm nccl_;
    ft::NcclRepair repair_ = ft::NcclRepair::automatic;
    std::vector<int> rank_of_position_;
    int position_ = -1;
    std::uint64_t generation_ = 0;
    std::size_t builds_ = 0;
    std::vector<Build> pending_;
    ft::GroupRepairPlan last_plan_;
};

}  // namespace flashrec::gpu
