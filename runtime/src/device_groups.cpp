#include "flashrec/runtime/device_groups.hpp"

#include <chrono>

#include "flashrec/errors.hpp"

#if FLASHREC_WITH_CUDA
#include <cuda_runtime_api.h>

#include "flashrec/ft/comm.hpp"
#include "flashrec/gpu/group_collectives.hpp"
#endif

namespace flashrec::runtime {

const char* group_name(Group group) {
    switch (group) {
        case Group::dp: return "dp";
        case Group::tp: return "tp";
        case Group::pp: return "pp";
    }
    return "?";
}

GroupSplit group_split(const topology::Shape& shape, const topology::Coord& c, Group group) {
    switch (group) {
        case Group::dp: return {c.tp + shape.tp * c.pp, c.dp};
        case Group::tp: return {c.dp + shape.dp * c.pp, c.tp};
        case Group::pp: return {c.tp + shape.tp * c.dp, c.pp};
    }
    throw Error("group_split: unknown group");
}

std::vector<int> group_roles(const topology::Shape& shape, const topology::Coord& coord, Group group) {
    const int size = group == Group::dp ? shape.dp : group == Group::tp ? shape.tp : shape.pp;
    std::vector<int> roles;
    for (int position = 0; position < size; ++position) {
        topology::Coord member = coord;
        (group == Group::dp ? member.dp : group == Group::tp ? member.tp : member.pp) = position;
        roles.push_back(topology::role_index(shape, member));
    }
    return roles;
}

std::string nccl_build_phase(const std::string& group, const std::string& action) {
    return "first_step_nccl_" + group + "_" + action;
}

Group group_of(StepCollective collective) {
    switch (collective) {
        case StepCollective::reduce_scatter:
        case StepCollective::allgather:
        case StepCollective::allreduce: return Group::dp;
        case StepCollective::tp_allreduce:
        case StepCollective::tp_allgather: return Group::tp;
        case StepCollective::pp_send:
        case StepCollective::pp_recv: return Group::pp;
    }
    throw Error("group_of: unknown collective");
}

#if FLASHREC_WITH_CUDA
struct DeviceGroups::Held {
    gpu::DeviceGroupCollectives tp, pp;
};

namespace {
cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

gpu::DeviceGroupCollectives& prepared(gpu::DeviceGroupCollectives& collectives, const DeviceGroups::Call& call) {
    const auto deadline = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(call.deadline_ns));
    collectives.group().prepare(call.group, call.generation, call.device, deadline, call.repair);
    return collectives;
}
}  // namespace

DeviceGroups::DeviceGroups() : held_(std::make_unique<Held>()) {}
DeviceGroups::~DeviceGroups() = default;

void DeviceGroups::tp_allreduce(const Call& call, std::span<float> data) {
    prepared(held_->tp, call).allreduce(data.data(), data.size(), as_stream(call.stream));
}

void DeviceGroups::tp_allgather(const Call& call, std::span<const float> part, std::span<float> full) {
    prepared(held_->tp, call).allgather(part.data(), part.size(), full.data(), as_stream(call.stream));
}

void DeviceGroups::pp_send(const Call& call, std::span<const float> data, int stage) {
    prepared(held_->pp, call).send(data.data(), data.size(), stage, as_stream(call.stream));
}

void DeviceGroups::pp_recv(const Call& call, std::span<float> data, int stage) {
    prepared(held_->pp, call).recv(data.data(), data.size(), stage, as_stream(call.stream));
}

void DeviceGroups::abort() noexcept {
    held_->tp.group().abort();
    held_->pp.group().abort();
}

void DeviceGroups::finalize() {
    for (auto* c : {&held_->tp, &held_->pp})
        if (c->group().ready()) c->group().finalize();
}

std::vector<std::pair<std::string, double>> DeviceGroups::take_builds() {
    std::vector<std::pair<std::string, double>> builds;
    for (auto* c : {&held_->tp, &held_->pp})
        for (const auto& b : c->group().take_builds()) builds.emplace_back(nccl_build_phase(b.group, b.action), b.ms);
    return builds;
}
#else
struct DeviceGroups::Held {};
DeviceGroups::DeviceGroups() = default;
DeviceGroups::~DeviceGroups() = default;
namespace {
[[noreturn]] void without_cuda(const char* what) {
    throw Error(std::string(what) + " on device memory: built without CUDA");
}
}  // namespace
void DeviceGroups::tp_allreduce(const Call&, std::span<float>) { without_cuda("tp_allreduce"); }
void DeviceGroups::tp_allgather(const Call&, std::span<const float>, std::span<float>) { without_cuda("tp_allgather"); }
void DeviceGroups::pp_send(const Call&, std::span<const float>, int) { without_cuda("pp_send"); }
void DeviceGroups::pp_recv(const Call&, std::span<float>, int) { without_cuda("pp_recv"); }
void DeviceGroups::abort() noexcept {}
void DeviceGroups::finalize() {}
std::vector<std::pair<std::string, double>> DeviceGroups::take_builds() { return {}; }
#endif

}  // namespace flashrec::runtime
