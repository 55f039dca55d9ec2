// The tensor- and pipeline-parallel collectives on device memory (Step::tp_allreduce,
// tp_allgather, pp_send, pp_recv with device pointers: docs/gpu.md, "Device collectives for TP
// and PP"), over a GroupComm of the TP or the PP group. As on the DP path, NCCL only moves bytes
// and the arithmetic is the CPU path's:
//
//   allreduce: every peer sends its whole buffer to every peer (ncclSend/ncclRecv in one group,
//              MPI_Allgather on the CPU) and adds the t copies in position (tp) order itself,
//              one thread per element: ((x0 + x1) + x2) + ..., the same bits on every TP peer.
//   allgather: every peer's part to every peer, in position order.
//   send/recv: one ncclSend / ncclRecv to / from the peer at a position (a pipeline stage).
//
// Every call is enqueued on `stream` and waited for (polled, abortable) like the DP ones; the
// allreduce's sum is left enqueued on `stream`.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "flashrec/gpu/group_comm.hpp"
#include "flashrec/gpu/handles.hpp"

namespace flashrec::gpu {

class DeviceGroupCollectives {
public:
    GroupComm& group() { return group_; }

    void allreduce(float* data, std::size_t count, cudaStream_t stream);
    // full (count * size() floats) gets every position's `count` floats, in position order.
    void allgather(const float* part, std::size_t count, float* full, cudaStream_t stream);
    void send(const float* data, std::size_t count, int position, cudaStream_t stream);
    void recv(float* data, std::size_t count, int position, cudaStream_t stream);

private:
    GroupComm group_;
    DeviceBuffer scratch_;  // allreduce: the t copies
};

}  // namespace flashrec::gpu
