// The groups of a DP x TP x PP job and which one each step collective runs over (docs/gpu.md,
// "Device collectives for TP and PP"). Pure: the layout Membership splits `work` by, and the
// choice of communicator, unit-tested without MPI or a GPU. With CUDA, DeviceGroups (below) holds
// one NCCL communicator per TP and per PP group for the collectives on device memory (the DP
// group's is DevicePath's DeviceDpCollectives).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "flashrec/ft/group_repair.hpp"
#include "flashrec/runtime/topology.hpp"

namespace flashrec::ft {
class Comm;
}

namespace flashrec::runtime {

enum class Group { dp, tp, pp };
const char* group_name(Group group);

// How Membership splits `work` into a role's group: members share `color`, ordered by `key`,
// which is the role's position in the group (its dp, tp or pp coordinate).
struct GroupSplit {
    int color = 0;
    int key = 0;
};
GroupSplit group_split(const topology::Shape& shape, const topology::Coord& coord, Group group);
// The roles of `coord`'s group, by position (what group_split gives, listed).
std::vector<int> group_roles(const topology::Shape& shape, const topology::Coord& coord, Group group);

// The step collectives and the group each runs over (the same on the CPU and the GPU path).
enum class StepCollective { reduce_scatter, allgather, allreduce, tp_allreduce, tp_allgather, pp_send, pp_recv };
Group group_of(StepCollective collective);
// The recovery record's phase for one group's NCCL communicator made in the first step after a
// repair: "first_step_nccl_tp_shrink_grow" (counted in the first step, not in the repair).
std::string nccl_build_phase(const std::string& group, const std::string& action);

// With CUDA: the NCCL communicators of this role's TP and PP groups and their collectives on
// device memory. Each call first makes or repairs its group's communicator for `generation`
// (collective over the group: gpu::GroupComm::prepare), then runs; errors propagate
// (DevicePath turns a peer's failure into an abandoned step). Built without CUDA it is never
// made (DevicePath is never enabled).
class DeviceGroups {
public:
    struct Call {
        const ft::Comm& group;
        std::uint64_t generation;
        int device;
        std::int64_t deadline_ns;  // steady_clock, since its epoch
        ft::NcclRepair repair;
        void* stream;              // cudaStream_t
    };
    DeviceGroups();
    ~DeviceGroups();
    DeviceGroups(const DeviceGroups&) = delete;
    DeviceGroups& operator=(const DeviceGroups&) = delete;

    void tp_allreduce(const Call& call, std::span<float> data);
    void tp_allgather(const Call& call, std::span<const float> part, std::span<float> full);
    void pp_send(const Call& call, std::span<const float> data, int stage);
    void pp_recv(const Call& call, std::span<float> data, int stage);

    void abort() noexcept;       // both groups' (see gpu::GroupComm::abort)
    void finalize();             // the groups whose communicator was made
    // The TP and PP communicators made or repaired since the last call: (phase name, ms), the
    // name "first_step_nccl_<group>_<action>" (a recovery record's per-group figure).
    std::vector<std::pair<std::string, double>> take_builds();

private:
    struct Held;  // with CUDA: the two gpu::DeviceGroupCollectives
    std::unique_ptr<Held> held_;
};

}  // namespace flashrec::runtime
