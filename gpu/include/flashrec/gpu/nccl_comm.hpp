// An NCCL communicator that never blocks forever (docs/gpu.md): made from an MPI
// communicator (the DP group of `work`), non-blocking (ncclConfig_t::blocking = 0), and every
// operation waits in an AbortPoller loop that also watches an external abort flag and an
// optional deadline. When a peer dies, recovery sets the flag, the operation in progress
// aborts the communicator (ncclCommAbort) and throws NcclError; after recovery the
// communicator is rebuilt from the new MPI communicator:
//
//   std::atomic<bool> abort{false};               // set by recovery / the control plane
//   auto nccl = NcclComm::create(dp, "dp", {.abort_flag = &abort, .device = dev});
//   nccl.allreduce_sum(grads, n, stream);         // NcclError if a peer died meanwhile
//   ... recovery: abort = true (wakes the collective), repair MPI, abort = false ...
//   if (!nccl.built_from(new_dp)) nccl.rebuild(new_dp, "dp");
//
// With NcclOptions::keep_after_failure and an NCCL that can revoke and shrink (2.28.7+,
// can_shrink()), a failed operation revokes the communicator instead (in-flight work stops, the
// communicator stays), and the survivors make theirs from it without a new bootstrap:
//   auto survivors = nccl.shrink(dead_ranks, options);   // collective over the survivors
#pragma once
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "flashrec/ft/group_repair.hpp"
#include "flashrec/gpu/abort_poller.hpp"
#include "flashrec/gpu/handles.hpp"

namespace flashrec::ft {
class Comm;
}

namespace flashrec::gpu {

struct NcclOptions {
    // Set by the recovery/control plane when the job must recover; every operation polls it.
    // Must outlive the communicator, and be false again before a rebuild.
    const std::atomic<bool>* abort_flag = nullptr;
    // Longest time one operation (init, a collective, finalize) may take; zero: no deadline
    // (the abort flag alone ends a wait). A deadline catches what no one reports: a peer
    // stuck in a kernel, a frozen node.
    std::chrono::milliseconds timeout{0};
    int device = -1;  // -1: the current device at creation
    // Called at the start of every poll round, before the abort flag is read, so it may set
    // the flag: e.g. a FailureChannel asking MPI (locally) whether a peer failed or someone
    // revoked. This is how a wait learns of a failure with no thread of its own. Keep it cheap
    // (rate-limit inside). Must not throw. Empty: none.
    std::function<void()> before_poll{};
    // On a failed operation (peer failure, abort flag, deadline): revoke instead of abort, so
    // that shrink() can follow. Taken only where can_shrink(); otherwise the comm is aborted.
    bool keep_after_failure = false;
};

// One point-to-point piece of a grouped exchange (NcclComm::exchange): `count` floats.
struct PeerSend {
    const float* data = nullptr;
    std::size_t count = 0;
    int peer = -1;
};
struct PeerReceive {
    float* data = nullptr;
    std::size_t count = 0;
    int peer = -1;
};
// Elements [offset, offset + count) of a buffer, owned by rank `root`.
struct Segment {
    std::size_t offset = 0;
    std::size_t count = 0;
    int root = -1;
};

// Rank `root` of `comm` makes the unique id (make_id, normally ncclGetUniqueId) and
// broadcasts it over MPI (MPI_Bcast of its 128 bytes, plus whether making it worked).
// Collective over `comm`; MPI errors go through ft::check (ProcessFailure, CommRevoked, ...).
// If make_id throws on the root, the root rethrows it after the broadcast and every other rank
// throws flashrec::Error: no rank is left waiting.
ncclUniqueId exchange_unique_id(MPI_Comm comm, const std::string& comm_name,
                                const std::function<ncclUniqueId()>& make_id, int root = 0);

class NcclComm {
public:
    NcclComm() = default;
    // Collective over `mpi`: one NCCL rank per MPI rank, same numbering. The device must not be
    // used by another rank of the same communicator (NCCL refuses duplicate GPUs).
    static NcclComm create(MPI_Comm mpi, const std::string& name, NcclOptions options = {});
    static NcclComm create(const ft::Comm& mpi, NcclOptions options = {});
    // Without MPI: every rank calls it with the same id (tests, other bootstraps).
    static NcclComm create_from_id(const ncclUniqueId& id, int nranks, int rank,
                                   const std::string& name, NcclOptions options = {});

    // Local: a communicator of this process alone on `device`, made and finalized, so that
    // NCCL's one-time set-up in a process (its kernels loaded onto the device: 0.3-0.5 s on an
    // H100 with NCCL 2.28, docs/gpu.md) is done before the first real communicator. A parked hot
    // spare calls it, so a repair's NCCL rebuild no longer waits for it. Returns milliseconds
    // taken; throws NcclError / CudaError.
    static double warm_up(int device);

    NcclComm(NcclComm&& other) noexcept;
    NcclComm& operator=(NcclComm&& other) noexcept;
    NcclComm(const NcclComm&) = delete;
    NcclComm& operator=(const NcclComm&) = delete;
    // Aborts a communicator still held (never blocks, never throws). Call finalize() first
    // for a clean collective shutdown when every member is alive.
    ~NcclComm();

    // In place: data (device memory, `count` floats) becomes the sum over all ranks. Enqueued on
    // `stream` and waited for (host-synchronous) in the poll loop. On an async error, the
    // abort flag or the deadline: aborts the communicator and throws NcclError; the
    // communicator is then invalid until rebuild().
    void allreduce_sum(float* data, std::size_t count, cudaStream_t stream);
    // recv (count * size() floats) gets every rank's `count` floats from send, in rank order.
    void allgather(const float* send, float* recv, std::size_t count, cudaStream_t stream);
    // Every send and receive in one NCCL group (ncclSend/ncclRecv, a peer may be this rank):
    // the all-to-all with uneven parts that NCCL has no collective for. Pieces with count 0
    // are skipped; both ends must agree on every count. Waited for like a collective.
    void exchange(std::span<const PeerSend> sends, std::span<const PeerReceive> receives,
                  cudaStream_t stream);
    // In place: each segment of `data` (device memory) is broadcast from its root to every
    // rank, all in one NCCL group: the all-gather with uneven parts (MPI_Allgatherv).
    void broadcast_segments(float* data, std::span<const Segment> segments, cudaStream_t stream);

    // Local, immediate: ncclCommAbort (operations in flight on the GPU end). Idempotent.
    void abort() noexcept;
    // Whether the NCCL loaded at run time has ncclCommRevoke and ncclCommShrink (looked up, not
    // linked: the library may be older than the headers flashrec was built with).
    static bool can_shrink() noexcept;
    // Local: stops the operations in flight (ncclCommRevoke) and keeps the communicator for
    // shrink(); it takes no more collectives. Without can_shrink(): abort(). Never throws.
    void revoke() noexcept;
    bool revoked() const { return comm_ != nullptr && revoked_; }
    // Collective over the ranks not in `excluded` (ranks of this communicator, e.g. the dead):
    // their communicator, ranks renumbered in the same order, made from this one by
    // ncclCommShrink (no new unique id, no bootstrap over MPI), with `options` (abort flag false
    // again). From a revoked communicator, once its revoke has settled (NCCL_SHRINK_DEFAULT);
    // from a live one that NCCL has not failed, NCCL ends what is in flight first
    // (NCCL_SHRINK_ABORT). This one is aborted after, as NCCL requires of a shrink's parent after
    // a failure. Throws NcclError (this communicator is then aborted: fall back to create() from
    // the repaired MPI communicator), also for an aborted one or an NCCL without shrink.
    NcclComm shrink(std::span<const int> excluded, NcclOptions options);
    // What the NCCL loaded at run time is (ncclGetVersion) and can do: shrink (above) and grow
    // (ncclCommGrow + ncclCommGetUniqueId, 2.29.2+), looked up like shrink.
    static ft::NcclAbilities abilities() noexcept;
    // Grow (docs/gpu.md, "Repairing NCCL: shrink + grow"). On rank 0 of this communicator only:
    // the id the newcomers join with (ncclCommGetUniqueId), to be sent to them over MPI.
    ncclUniqueId grow_id();
    // Collective over this communicator's ranks and the newcomers: a communicator of `nranks`
    // made from this one by ncclCommGrow; this communicator's ranks keep theirs, and this one is
    // aborted after (it takes no more work). `id`: the grow_id() on rank 0, nullptr elsewhere.
    NcclComm grow(int nranks, const ncclUniqueId* id, NcclOptions options);
    // A newcomer's side of grow(): joins as `rank` of `nranks` with the id from rank 0.
    static NcclComm join_grow(const ncclUniqueId& id, int nranks, int rank, const std::string& name,
                              NcclOptions options);
    // Collective clean shutdown (ncclCommFinalize, polled, then ncclCommDestroy). On failure
    // aborts and throws NcclError.
    void finalize();
    // After recovery: aborts this communicator (if still held) and creates a new one from
    // `mpi` with the same options. Collective over `mpi`.
    void rebuild(MPI_Comm mpi, const std::string& name);

    bool valid() const { return comm_ != nullptr && !revoked_; }
    ncclComm_t get() const { return comm_; }
    int rank() const { return rank_; }
    int size() const { return size_; }
    int device() const { return device_; }
    const std::string& name() const { return name_; }
    // True when this communicator is live and was made from `mpi` itself (an MPI attribute
    // tags the MPI communicator it was made from; a communicator re-created after a repair has
    // no tag, even if MPI reuses the handle value). The step loop's test for "rebuild needed".
    bool built_from(MPI_Comm mpi) const;

private:
    using Verdict = AbortPoller::Verdict;
    // Polls until settled; on an abort verdict aborts and throws NcclError naming `what`.
    void wait_settled(const char* what, const std::function<bool()>& op_complete, const char* file,
                      int line);
    // A shrink's or a grow's child, once NCCL handed it out: settled, with its rank and size.
    // This communicator, its parent, is aborted when the child fails to settle.
    void settle_child(NcclComm& child, const char* call);
    void run_collective(const char* what, const std::function<ncclResult_t()>& enqueue,
                        cudaStream_t stream, const char* file, int line);
    void tag(MPI_Comm mpi);
    AbortPoller make_poller() const;
    // After a failed operation: revoke() where options_.keep_after_failure; else the
    // communicator is aborted on a thread of its own (release_in_background), unless
    // FLASHREC_NCCL_RELEASE=sync.
    void release_after_failure() noexcept;
    // ncclCommAbort of a failed communicator waits for NCCL's proxy thread, about 0.5 s with
    // NCCL 2.28 (docs/gpu.md, "Detection on the GPU path"); nothing after a peer's failure needs
    // that wait, so the abort runs beside the repair. This object stops using the
    // communicator at once.
    void release_in_background() noexcept;

    ncclComm_t comm_ = nullptr;
    bool revoked_ = false;
    int rank_ = -1, size_ = 0, device_ = -1;
    std::string name_;
    // ncclConfig_t::commName points here: a heap string, so its address survives moves of
    // this object for as long as NCCL may read it (the communicator's life).
    std::unique_ptr<const std::string> nccl_name_;
    NcclOptions options_;
    std::uintptr_t tag_ = 0;  // the value of the attribute it set on its MPI communicator
    Event done_;              // recorded after each collective on its stream
    // Failed communicators still being aborted (release_in_background); joined when this
    // object goes, kept across the move-assignment that installs a rebuilt communicator.
    std::vector<std::jthread> releasing_;
};

}  // namespace flashrec::gpu
