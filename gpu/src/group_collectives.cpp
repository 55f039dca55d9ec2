#include "flashrec/gpu/group_collectives.hpp"

#include <vector>

#include "flashrec/errors.hpp"
#include "flashrec/gpu/cuda_check.hpp"
#include "flashrec/gpu/device.hpp"
#include "flashrec/gpu/ordered_sum.hpp"

namespace flashrec::gpu {

namespace {
void require_ready(GroupComm& group, const char* what) {
    if (!group.ready()) throw Error(std::string(what) + " before GroupComm::prepare()");
}
}  // namespace

void DeviceGroupCollectives::allreduce(float* data, std::size_t count, cudaStream_t stream) {
    require_ready(group_, "DeviceGroupCollectives::allreduce");
    const int t = group_.size();
    if (t == 1 || count == 0) return;
    const std::size_t bytes = count * static_cast<std::size_t>(t) * sizeof(float);
    if (scratch_.size() < bytes) {
        DeviceGuard guard(group_.nccl().device());
        scratch_ = DeviceBuffer::allocate(bytes);
    }
    float* copies = scratch_.as<float>();
    std::vector<PeerSend> sends;
    std::vector<PeerReceive> receives;
    for (int q = 0; q < t; ++q) {
        sends.push_back({data, count, group_.peer(q)});
        receives.push_back({copies + static_cast<std::size_t>(q) * count, count, group_.peer(q)});
    }
    group_.nccl().exchange(sends, receives, stream);
    DeviceGuard guard(group_.nccl().device());
    FLASHREC_CUDA_CHECK(launch_ordered_sum(copies, t, count, data, stream));
}

void DeviceGroupCollectives::allgather(const float* part, std::size_t count, float* full, cudaStream_t stream) {
    require_ready(group_, "DeviceGroupCollectives::allgather");
    std::vector<PeerSend> sends;
    std::vector<PeerReceive> receives;
    for (int q = 0; q < group_.size(); ++q) {
        sends.push_back({part, count, group_.peer(q)});
        receives.push_back({full + static_cast<std::size_t>(q) * count, count, group_.peer(q)});
    }
    group_.nccl().exchange(sends, receives, stream);
}

void DeviceGroupCollectives::send(const float* data, std::size_t count, int position, cudaStream_t stream) {
    require_ready(group_, "DeviceGroupCollectives::send");
    const PeerSend piece{data, count, group_.peer(position)};
    group_.nccl().exchange(std::span(&piece, 1), {}, stream);
}

void DeviceGroupCollectives::recv(float* data, std::size_t count, int position, cudaStream_t stream) {
    require_ready(group_, "DeviceGroupCollectives::recv");
    const PeerReceive piece{data, count, group_.peer(position)};
    group_.nccl().exchange({}, std::span(&piece, 1), stream);
}

}  // namespace flashrec::gpu
