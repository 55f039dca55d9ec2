// The runtime's GPU path (docs/gpu.md), owned by Runtime::Impl: NCCL collectives of the DP
// group, the trainer's compute stream, and the snapshot copier of device state. Host buffers
// never come this way: each function leaves them to the CPU path's code (memcpy, MPI straight
// into the buffer), which is the same with or without CUDA. Until enable() (a device buffer or
// a compute stream registered) it makes no CUDA call; built without CUDA it never is enabled.
#pragma once
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "flashrec/ft/comm.hpp"
#include "flashrec/ft/group_repair.hpp"
#include "flashrec/ft/region_copier.hpp"
#include "flashrec/runtime/device_groups.hpp"
#include "flashrec/runtime/state_registry.hpp"
#include "flashrec/types.hpp"

namespace flashrec::runtime {

class DevicePath {
public:
    // What a step collective on device memory needs from the step: the DP group of this
    // epoch, its deadline, whether the step is abandoned already (then nothing runs), and what
    // to do when a peer fails (abandon the step).
    struct Step {
        const ft::Comm& dp;
        int epoch;
        std::chrono::steady_clock::time_point deadline;
        bool abandoned;
        std::function<void(const std::exception&)> on_failure;
        const ft::Comm* tp = nullptr;  // the TP and PP groups of this epoch (device_groups.hpp)
        const ft::Comm* pp = nullptr;
        ft::NcclRepair nccl_repair = ft::NcclRepair::automatic;  // recovery.nccl_repair
        // The MPI communicator `collective` runs over (runtime::group_of); throws
        // flashrec::Error when this step has none for it.
        const ft::Comm& comm_for(StepCollective collective) const;
    };

    DevicePath();
    ~DevicePath();
    DevicePath(const DevicePath&) = delete;
    DevicePath& operator=(const DevicePath&) = delete;

    // The process uses CUDA for its state: protect() found a device buffer, or the trainer set a
    // compute stream. Throws flashrec::Error when built without CUDA.
    void enable();
    void set_stream(void* cuda_stream) { stream_ = cuda_stream; }
    void* stream() const { return stream_; }  // cudaStream_t; nullptr: CUDA's default stream
    // Whether `data` is device memory: false at once when not enabled (no CUDA call).
    bool is_device_pointer(const void* data) const;
    // The model of the GPU the state lives on (the platform fingerprint); empty when not enabled.
    std::string gpu_model() const;
    // A spare's admission check of its GPU: empty when it works, or when the process uses no
    // CUDA (asked without creating a context: the CPU path stays free of CUDA).
    static std::string check_gpu();
    // When an NCCL wait saw a peer's failure and how long releasing the communicator took
    // before the exception reached the runtime; nullopt for any other exception.
    struct FailureTiming {
        std::int64_t seen_unix_us = 0;
        double release_ms = 0;
    };
    static std::optional<FailureTiming> failure_timing(const std::exception& e);
    // A parked hot spare's head start (docs/gpu.md, "The first step after a repair"): when this
    // process already uses CUDA (the trainer made its context before the Runtime), NCCL's
    // one-time set-up runs on the returned thread, so the replacement's first NCCL communicator
    // does not wait for it. `log` gets one line with what happened. No thread (not joinable)
    // when the process uses no CUDA or flashrec is built without it.
    // FLASHREC_NCCL_WARM_UP=0 turns it off (a benchmark's comparison in one run).
    static std::jthread warm_up_nccl(std::function<void(const std::string&)> log);
    static constexpr const char* kNcclWarmUpEnv = "FLASHREC_NCCL_WARM_UP";

    // Copies host bytes into the live buffers: sources[i] into buffers[which[i]] (device
    // buffers), on the GPU, after the compute stream's work. Waits until they are in place.
    void restore(const std::vector<ProtectedBuffer>& buffers, const std::vector<std::size_t>& which,
                 const std::vector<std::span<const std::byte>>& sources);
    // Buffer b's live bytes, copied to the host (after the compute stream's work).
    std::vector<std::byte> read(const std::vector<ProtectedBuffer>& buffers, std::size_t b);
    // The copier a Protection uses for `buffers` when some are device memory (null when none
    // are): made once, then kept across repairs like the own store it pins. `hash_on_device`
    // (protection.device_hash): the device buffers' checksums are computed on the GPU.
    std::shared_ptr<ft::RegionCopier> snapshot_copier(const std::vector<ProtectedBuffer>& buffers,
                                                      bool hash_on_device);
    // Once, after the copier was made: why the GPU hash asked for is not used (empty: it is,
    // or it was not asked for).
    std::string take_snapshot_hash_problem();

    // The job is failing: revoke (kept for a shrink) or abort every group's NCCL communicator and
    // tell the peers' NCCL waits. Never throws.
    void abort() noexcept;
    // Step collectives; false (nothing done) when `data` is host memory. A failure seen by MPI
    // or NCCL (a peer gone, an abort) goes to step.on_failure; an NcclError that is not a peer
    // failure and a CudaError propagate (this process cannot go on; its peers recover from its exit).
    bool reduce_scatter(const Step& step, std::span<const float> grads, std::span<float> shard);
    bool allgather(const Step& step, std::span<float> full);
    bool allreduce(const Step& step, std::span<float> data);
    // The TP and PP collectives on device memory (DeviceGroups: one NCCL communicator per TP and
    // per PP group); false when `data` is host memory. Failures as above.
    bool tp_allreduce(const Step& step, std::span<float> data);
    bool tp_allgather(const Step& step, std::span<const float> part, std::span<float> full);
    bool pp_send(const Step& step, std::span<const float> data, int stage);
    bool pp_recv(const Step& step, std::span<float> data, int stage);
    // Milliseconds spent (re)building the groups' NCCL communicators since the last call.
    double take_nccl_build_ms() noexcept;
    // The same per group and action (DeviceGroups::take_builds' names, the DP group's too);
    // forgets them like take_nccl_build_ms.
    std::vector<std::pair<std::string, double>> take_nccl_builds();
    // End of the loop: the NCCL communicators are finalized (those that were made).
    void finalize(const Step& step);

private:
    struct Side;  // with CUDA: the NCCL collectives of the DP group, and of the TP and PP groups
    std::unique_ptr<Side> side_;
    void* stream_ = nullptr;
    std::shared_ptr<ft::RegionCopier> copier_;
    std::string hash_problem_;
};

}  // namespace flashrec::runtime
