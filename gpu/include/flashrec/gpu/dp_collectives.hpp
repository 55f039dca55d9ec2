// The runtime's data-parallel collectives for buffers in device memory: what
// Step::reduce_scatter / allgather / allreduce do when the trainer passes device pointers
// (docs/gpu.md, "Gradients through NCCL"). NCCL moves the bytes; the arithmetic keeps the CPU
// path's fixed order, so results are bitwise independent of where ranks run and of failures:
//
//   reduce_scatter: every rank sends part j of its gradient to DP rank j (ncclSend/ncclRecv
//                   in one group, the uneven all-to-all that MPI_Alltoallv does on the CPU),
//                   and each rank adds the d copies of its part in DP-rank order itself
//                   (((g0 + g1) + g2) + ...), one thread per element: the same float additions,
//                   in the same order, as the CPU path. No ncclAllReduce/ncclReduceScatter,
//                   whose order depends on NCCL's algorithm and on the hardware it finds.
//   allgather:      each rank's part broadcast from its owner (ncclBroadcast per part, in
//                   one group): data movement only.
//
// Failures and repairs: the DP group's GroupComm (group_comm.hpp): every wait polls an abort
// flag that the group's FailureChannel and abort() set; prepare() repairs the communicator after
// every recovery (a new generation) by shrink + grow or re-init. Peers are addressed by DP
// position, so the summation order stays by DP rank whatever NCCL ranks a repair gave.
#pragma once
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "flashrec/ft/comm.hpp"
#include "flashrec/gpu/group_comm.hpp"
#include "flashrec/gpu/handles.hpp"
#include "flashrec/gpu/ordered_sum.hpp"

namespace flashrec::gpu {

// DP rank `part`'s share [first, last) of `count` elements among `parts` ranks: the runtime's
// ZeRO-1 sharding (Runtime::shard_range), shared by the CPU and the GPU path.
inline std::pair<std::size_t, std::size_t> dp_part(std::size_t count, int parts, int part) {
    const auto d = static_cast<std::size_t>(parts), j = static_cast<std::size_t>(part);
    return {count * j / d, count * (j + 1) / d};
}

class DeviceDpCollectives {
public:
    DeviceDpCollectives() = default;  // makes no CUDA or NCCL call
    DeviceDpCollectives(const DeviceDpCollectives&) = delete;  // the NCCL options point here
    DeviceDpCollectives& operator=(const DeviceDpCollectives&) = delete;
    ~DeviceDpCollectives() = default;  // aborts the communicator if still held (never blocks)

    // Before a collective: (re)builds the failure channel and the NCCL communicator from `dp`
    // (unique id broadcast over MPI) when there is none, when it was aborted, or when
    // `generation` differs from the one it was built for (the runtime passes its repair epoch).
    // Collective over `dp` in that case, a no-op otherwise. Throws ProcessFailure/CommRevoked,
    // NcclError, CudaError.
    void prepare(const ft::Comm& dp, std::uint64_t generation, int device,
                 std::chrono::steady_clock::time_point deadline,
                 ft::NcclRepair repair = ft::NcclRepair::automatic) {
        group_.prepare(dp, generation, device, deadline, repair);
    }

    // See the header comment. `stream` is the trainer's compute stream: the NCCL operations are
    // enqueued on it and waited for (polled) on the host; the ordered sum is enqueued after
    // them and not waited for (later work on the stream is ordered after it).
    void reduce_scatter(const float* grads, std::size_t count, float* shard, cudaStream_t stream);
    void allgather(float* full, std::size_t count, cudaStream_t stream);
    // reduce_scatter + allgather through a device scratch shard: the full sum on every rank.
    void allreduce(float* data, std::size_t count, cudaStream_t stream);

    // The job is failing: sets the abort flag, aborts the NCCL communicator, announces it on
    // the failure channel (every DP peer's NCCL wait aborts). Local; never blocks on a peer,
    // never throws. The next prepare() rebuilds.
    void abort() noexcept { group_.abort(); }
    // Collective clean shutdown at the end of the job (ncclCommFinalize, polled).
    void finalize() { group_.finalize(); }

    bool ready() const { return group_.ready(); }
    int rank() const { return group_.position(); }  // the DP rank
    int size() const { return group_.size(); }
    const std::atomic<bool>& abort_flag() const { return group_.abort_flag(); }
    // Communicators made so far (1 after the first prepare, +1 per rebuild).
    std::size_t builds() const { return group_.builds(); }
    // Milliseconds spent building (failure channel + NCCL init) since the last call; 0 if none.
    double take_build_ms() noexcept { return group_.take_build_ms(); }
    GroupComm& group() { return group_; }

private:
    float* scratch(std::size_t floats);
    float* shard_scratch(std::size_t floats);

    GroupComm group_;
    DeviceBuffer scratch_;        // reduce_scatter: d copies of this rank's part
    DeviceBuffer shard_scratch_;  // allreduce: this rank's part of the sum
};

}  // namespace flashrec::gpu
