#include "flashrec/gpu/dp_collectives.hpp"

#include <string>
#include <vector>

#include "flashrec/errors.hpp"
#include "flashrec/gpu/cuda_check.hpp"
#include "flashrec/gpu/device.hpp"

namespace flashrec::gpu {

float* DeviceDpCollectives::scratch(std::size_t floats) {
    if (scratch_.size() < floats * sizeof(float)) {
        DeviceGuard guard(group_.nccl().device());
        scratch_ = DeviceBuffer::allocate(floats * sizeof(float));
    }
    return scratch_.as<float>();
}

float* DeviceDpCollectives::shard_scratch(std::size_t floats) {
    if (shard_scratch_.size() < floats * sizeof(float)) {
        DeviceGuard guard(group_.nccl().device());
        shard_scratch_ = DeviceBuffer::allocate(floats * sizeof(float));
    }
    return shard_scratch_.as<float>();
}

void DeviceDpCollectives::reduce_scatter(const float* grads, std::size_t count, float* shard,
                                         cudaStream_t stream) {
    if (!ready()) throw Error("DeviceDpCollectives::reduce_scatter before prepare()");
    const int d = group_.size(), me = group_.position();
    const auto [first, last] = dp_part(count, d, me);
    const std::size_t mine = last - first;
    float* parts = scratch(mine * static_cast<std::size_t>(d));
    std::vector<PeerSend> sends;
    std::vector<PeerReceive> receives;
    for (int j = 0; j < d; ++j) {
        const auto [a, b] = dp_part(count, d, j);
        sends.push_back({grads + a, b - a, group_.peer(j)});
        receives.push_back({parts + static_cast<std::size_t>(j) * mine, mine, group_.peer(j)});
    }
    group_.nccl().exchange(sends, receives, stream);
    DeviceGuard guard(group_.nccl().device());
    FLASHREC_CUDA_CHECK(launch_ordered_sum(parts, d, mine, shard, stream));
}

void DeviceDpCollectives::allgather(float* full, std::size_t count, cudaStream_t stream) {
    if (!ready()) throw Error("DeviceDpCollectives::allgather before prepare()");
    const int d = group_.size();
    std::vector<Segment> segments;
    for (int j = 0; j < d; ++j) {
        const auto [a, b] = dp_part(count, d, j);
        segments.push_back({a, b - a, group_.peer(j)});
    }
    group_.nccl().broadcast_segments(full, segments, stream);
}

void DeviceDpCollectives::allreduce(float* data, std::size_t count, cudaStream_t stream) {
    if (!ready()) throw Error("DeviceDpCollectives::allreduce before prepare()");
    const auto [first, last] = dp_part(count, group_.size(), group_.position());
    float* part = shard_scratch(last - first);
    reduce_scatter(data, count, part, stream);
    if (last > first) {
        DeviceGuard guard(group_.nccl().device());
        FLASHREC_CUDA_CHECK(cudaMemcpyAsync(data + first, part, (last - first) * sizeof(float),
                                            cudaMemcpyDeviceToDevice, stream));
    }
    allgather(data, count, stream);
}

}  // namespace flashrec::gpu
