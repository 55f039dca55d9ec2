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
// Failures: the communicator is non-blocking and every wait polls an abort flag, which the
// FailureChannel of the same DP group sets when MPI reports a failed member or a revoke
// (NcclOptions::before_poll), and which abort() sets when the runtime itself learns of a
// failure. abort() also aborts the NCCL communicator (ncclCommAbort) and announces the failure
// on the channel, so the DP peers' waits end too. prepare() rebuilds everything after every
// recovery (a new generation) and after an abort.
#pragma once
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "flashrec/ft/comm.hpp"
#include "flashrec/gpu/failure_channel.hpp"
#include "flashrec/gpu/handles.hpp"
#include "flashrec/gpu/nccl_comm.hpp"
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
                 std::chrono::steady_clock::time_point deadline);

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
    void abort() noexcept;
    // Collective clean shutdown at the end of the job (ncclCommFinalize, polled).
    void finalize();

    bool ready() const { return nccl_.valid(); }
    int rank() const { return nccl_.rank(); }
    int size() const { return nccl_.size(); }
    const std::atomic<bool>& abort_flag() const { return abort_flag_; }
    // Communicators made so far (1 after the first prepare, +1 per rebuild).
    std::size_t builds() const { return builds_; }
    // Milliseconds spent building (failure channel + NCCL init) since the last call; 0 if none.
    double take_build_ms() noexcept { return std::exchange(build_ms_, 0.0); }

private:
    float* scratch(std::size_t floats);
    float* shard_scratch(std::size_t floats);

    std::atomic<bool> abort_flag_{false};  // before nccl_: it points here
    FailureChannel channel_;
    NcclComm nccl_;
    std::uint64_t generation_ = 0;
    std::size_t builds_ = 0;
    double build_ms_ = 0;
    DeviceBuffer scratch_;        // reduce_scatter: d copies of this rank's part
    DeviceBuffer shard_scratch_;  // allreduce: this rank's part of the sum
};

}  // namespace flashrec::gpu
