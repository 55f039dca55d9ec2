#include "flashrec/gpu/dp_collectives.hpp"

#include <string>
#include <vector>

#include "flashrec/errors.hpp"
#include "flashrec/gpu/cuda_check.hpp"
#include "flashrec/gpu/device.hpp"

namespace flashrec::gpu {

void DeviceDpCollectives::prepare(const ft::Comm& dp, std::uint64_t generation, int device,
                                  std::chrono::steady_clock::time_point deadline) {
    if (nccl_.valid() && generation_ == generation) return;
    const auto started = std::chrono::steady_clock::now();
    nccl_.abort();  // never blocks; a communicator of an earlier generation may hold a dead rank
    // The channel first: once it is agreed on, a failure during the NCCL init below is
    // announced on it and ends every peer's init.
    channel_ = FailureChannel::open(dp, deadline);
    abort_flag_.store(false, std::memory_order_release);
    NcclOptions options;
    options.abort_flag = &abort_flag_;
    options.device = device;
    options.before_poll = [this] {
        if (channel_.failure_seen()) abort_flag_.store(true, std::memory_order_release);
    };
    nccl_ = NcclComm::create(dp, options);
    generation_ = generation;
    ++builds_;
    build_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
}

float* DeviceDpCollectives::scratch(std::size_t floats) {
    if (scratch_.size() < floats * sizeof(float)) {
        DeviceGuard guard(nccl_.device());
        scratch_ = DeviceBuffer::allocate(floats * sizeof(float));
    }
    return scratch_.as<float>();
}

float* DeviceDpCollectives::shard_scratch(std::size_t floats) {
    if (shard_scratch_.size() < floats * sizeof(float)) {
        DeviceGuard guard(nccl_.device());
        shard_scratch_ = DeviceBuffer::allocate(floats * sizeof(float));
    }
    return shard_scratch_.as<float>();
}

void DeviceDpCollectives::reduce_scatter(const float* grads, std::size_t count, float* shard,
                                         cudaStream_t stream) {
    if (!nccl_.valid()) throw Error("DeviceDpCollectives::reduce_scatter before prepare()");
    const int d = nccl_.size(), me = nccl_.rank();
    const auto [first, last] = dp_part(count, d, me);
    const std::size_t mine = last - first;
    float* parts = scratch(mine * static_cast<std::size_t>(d));
    std::vector<PeerSend> sends;
    std::vector<PeerReceive> receives;
    for (int j = 0; j < d; ++j) {
        const auto [a, b] = dp_part(count, d, j);
        sends.push_back({grads + a, b - a, j});
        receives.push_back({parts + static_cast<std::size_t>(j) * mine, mine, j});
    }
    nccl_.exchange(sends, receives, stream);
    DeviceGuard guard(nccl_.device());
    FLASHREC_CUDA_CHECK(launch_ordered_sum(parts, d, mine, shard, stream));
}

void DeviceDpCollectives::allgather(float* full, std::size_t count, cudaStream_t stream) {
    if (!nccl_.valid()) throw Error("DeviceDpCollectives::allgather before prepare()");
    const int d = nccl_.size();
    std::vector<Segment> segments;
    for (int j = 0; j < d; ++j) {
        const auto [a, b] = dp_part(count, d, j);
        segments.push_back({a, b - a, j});
    }
    nccl_.broadcast_segments(full, segments, stream);
}

void DeviceDpCollectives::allreduce(float* data, std::size_t count, cudaStream_t stream) {
    if (!nccl_.valid()) throw Error("DeviceDpCollectives::allreduce before prepare()");
    const auto [first, last] = dp_part(count, nccl_.size(), nccl_.rank());
    float* part = shard_scratch(last - first);
    reduce_scatter(data, count, part, stream);
    if (last > first) {
        DeviceGuard guard(nccl_.device());
        FLASHREC_CUDA_CHECK(cudaMemcpyAsync(data + first, part, (last - first) * sizeof(float),
                                            cudaMemcpyDeviceToDevice, stream));
    }
    allgather(data, count, stream);
}

void DeviceDpCollectives::abort() noexcept {
    abort_flag_.store(true, std::memory_order_release);
    nccl_.abort();
    channel_.announce();
}

void DeviceDpCollectives::finalize() {
    nccl_.finalize();
}

}  // namespace flashrec::gpu
