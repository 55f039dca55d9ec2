// The runtime's GPU path (device_path.hpp). Everything CUDA-specific of the runtime is here.
#include "flashrec/runtime/device_path.hpp"

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "flashrec/errors.hpp"
#include "flashrec/runtime/device_groups.hpp"

#if FLASHREC_WITH_CUDA
#include <cuda_runtime_api.h>

#include "flashrec/gpu/cuda_check.hpp"
#include "flashrec/gpu/device.hpp"
#include "flashrec/gpu/dp_collectives.hpp"
#include "flashrec/gpu/handles.hpp"
#include "flashrec/gpu/nccl_comm.hpp"
#include "flashrec/gpu/snapshot_copier.hpp"
#endif

namespace flashrec::runtime {

#if FLASHREC_WITH_CUDA
struct DevicePath::Side {
    gpu::DeviceDpCollectives dp;  // NCCL over the DP group, repaired after every repair
    DeviceGroups groups;          // NCCL over the TP and the PP group, likewise
};
#else
struct DevicePath::Side {};
#endif

const ft::Comm& DevicePath::Step::comm_for(StepCollective collective) const {
    const Group group = group_of(collective);
    const ft::Comm* comm = group == Group::dp ? &dp : group == Group::tp ? tp : pp;
    if (comm == nullptr)
        throw Error(std::string("DevicePath::Step has no ") + group_name(group) + " communicator for this collective");
    return *comm;
}

DevicePath::DevicePath() = default;
DevicePath::~DevicePath() = default;

#if FLASHREC_WITH_CUDA
namespace {

int state_device(const std::vector<ProtectedBuffer>& buffers) {
    for (const auto& b : buffers)
        if (b.device >= 0) return b.device;
    return -1;
}

// A copier over every registered buffer for the step loop's own copies (restore, checksum):
// no pinning, since its host memory is short-lived.
gpu::DeviceSnapshotCopier live_copier(const std::vector<ProtectedBuffer>& buffers) {
    std::vector<ft::LiveRegion> regions;
    for (const auto& b : buffers) regions.push_back({b.data, b.bytes});
    gpu::DeviceSnapshotCopier::Options options;
    options.device = state_device(buffers);
    options.pin_destinations = false;
    return gpu::DeviceSnapshotCopier(std::move(regions), options);
}

cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Runs a step's collective on device memory: a failure seen by MPI or by NCCL (a peer gone,
// an abort) abandons the step, like Impl::guarded for the MPI collectives. An NcclError that
// is not a peer failure (a bug, a local CUDA problem) and a CudaError propagate: this process
// cannot go on, and its peers recover from its exit.
template <class F>
void guarded_on_device(bool abandoned, const std::function<void(const std::exception&)>& on_failure,
                       F&& collective) {
    if (abandoned) return;
    try {
        collective();
    } catch (const MpiError& e) {
        on_failure(e);
    } catch (const DeadlineExceeded& e) {
        on_failure(e);  // the failure channel's agreement: a peer is stuck or gone
    } catch (const gpu::NcclError& e) {
        if (!e.peer_failure()) throw;
        on_failure(e);
    }
}

// A step's collective on the device memory at `data`: the DP group's NCCL made for this epoch
// first (prepare() is a no-op when it is), all of it guarded like the MPI collectives.
template <class F>
void run_on_device(gpu::DeviceDpCollectives& dp, const DevicePath::Step& step, const void* data, F&& collective) {
    guarded_on_device(step.abandoned, step.on_failure, [&] {
        dp.prepare(step.comm_for(StepCollective::allreduce), static_cast<std::uint64_t>(step.epoch),
                   gpu::device_memory_of(data), step.deadline, step.nccl_repair);
        collective();
    });
}

// A TP or PP collective's call on its group (runtime::group_of picks it).
DeviceGroups::Call group_call(const DevicePath::Step& step, StepCollective collective, const void* data, void* stream) {
    return {step.comm_for(collective), static_cast<std::uint64_t>(step.epoch), gpu::device_memory_of(data),
            std::chrono::duration_cast<std::chrono::nanoseconds>(step.deadline.time_since_epoch()).count(),
            step.nccl_repair, stream};
}

}  // namespace
#endif

void DevicePath::enable() {
#if FLASHREC_WITH_CUDA
    if (!side_) side_ = std::make_unique<Side>();
#else
    throw Error("the GPU path: this flashrec was built without CUDA (FLASHREC_WITH_CUDA=OFF)");
#endif
}

std::string DevicePath::gpu_model() const {
#if FLASHREC_WITH_CUDA
    if (side_) return gpu::current_device_name();
#endif
    return {};
}

std::string DevicePath::check_gpu() {
#if FLASHREC_WITH_CUDA
    if (gpu::cuda_in_use()) return gpu::check_current_device();
#endif
    return {};
}

std::optional<DevicePath::FailureTiming> DevicePath::failure_timing(const std::exception& e) {
#if FLASHREC_WITH_CUDA
    if (const auto* nccl = dynamic_cast<const gpu::NcclError*>(&e); nccl != nullptr && nccl->seen_unix_us() > 0)
        return FailureTiming{nccl->seen_unix_us(), nccl->release_ms()};
#else
    (void)e;
#endif
    return std::nullopt;
}

std::jthread DevicePath::warm_up_nccl(std::function<void(const std::string&)> log) {
#if FLASHREC_WITH_CUDA
    if (!gpu::cuda_in_use()) return {};
    if (const char* off = std::getenv(kNcclWarmUpEnv); off != nullptr && std::string_view(off) == "0") {
        log("hot spare: NCCL warm-up off (" + std::string(kNcclWarmUpEnv) + "=0)");
        return {};
    }
    const int device = gpu::current_device();  // the thread's own current device would be 0
    gpu::prepare_nccl_for_shared_device();      // setenv here, before any thread reads it
    return std::jthread([device, log = std::move(log)] {
        try {
            const double ms = gpu::NcclComm::warm_up(device);
            log("hot spare: NCCL set up on device " + std::to_string(device) + " in " +
                std::to_string(static_cast<long>(ms)) + " ms while parked");
        } catch (const std::exception& e) {
            // Not fatal: the first real communicator does the same set-up later.
            log(std::string("hot spare: NCCL warm-up failed (set up at the first communicator instead): ") + e.what());
        }
    });
#else
    (void)log;
    return {};
#endif
}

bool DevicePath::is_device_pointer(const void* data) const {
#if FLASHREC_WITH_CUDA
    if (!side_ || data == nullptr) return false;  // the CPU path makes no CUDA call
    return gpu::device_memory_of(data) >= 0;
#else
    (void)data;
    return false;
#endif
}

void DevicePath::restore(const std::vector<ProtectedBuffer>& buffers, const std::vector<std::size_t>& which,
                         const std::vector<std::span<const std::byte>>& sources) {
    if (which.empty()) return;
    if (which.size() != sources.size()) throw Error("restore_device_buffers: one source per buffer");
#if FLASHREC_WITH_CUDA
    gpu::DeviceSnapshotCopier copier = live_copier(buffers);
    std::vector<ft::RestoreChunk> chunks;
    for (std::size_t i = 0; i < which.size(); ++i) {
        const ProtectedBuffer& b = buffers.at(which[i]);
        if (sources[i].size() != b.bytes)
            throw Error("restore of buffer '" + b.name + "': " + std::to_string(sources[i].size()) +
                        " bytes for a buffer of " + std::to_string(b.bytes));
        chunks.push_back({which[i], 0, b.bytes, sources[i].data()});
    }
    // After everything the trainer enqueued (an abandoned step's kernels may still run).
    copier.mark_state_ready(as_stream(stream_));
    copier.restore(chunks);
#else
    (void)buffers;
    throw Error("restore_device_buffers: built without CUDA");
#endif
}

std::vector<std::byte> DevicePath::read(const std::vector<ProtectedBuffer>& buffers, std::size_t b) {
    std::vector<std::byte> host(buffers.at(b).bytes);
#if FLASHREC_WITH_CUDA
    gpu::DeviceSnapshotCopier copier = live_copier(buffers);
    copier.mark_state_ready(as_stream(stream_));
    const ft::SaveChunk chunk{b, 0, host.size(), host.data()};
    copier.start(std::span(&chunk, 1));
    copier.wait();
#else
    throw Error("read_device_buffer: built without CUDA");
#endif
    return host;
}

std::shared_ptr<ft::RegionCopier> DevicePath::snapshot_copier(const std::vector<ProtectedBuffer>& buffers,
                                                              bool hash_on_device) {
#if FLASHREC_WITH_CUDA
    const bool any = std::any_of(buffers.begin(), buffers.end(), [](const ProtectedBuffer& b) { return b.device >= 0; });
    if (any && !copier_) {
        // Kept across repairs like the own store it pins (StorePool keeps it mapped while this
        // process has its role), and used by one Protection at a time: an aborted one's thread
        // is joined before the next starts.
        std::vector<ft::LiveRegion> live;
        for (const auto& b : buffers) live.push_back({b.data, b.bytes});
        gpu::DeviceSnapshotCopier::Options options;
        options.device = state_device(buffers);
        options.hash_on_device = hash_on_device;
        auto copier = std::make_shared<gpu::DeviceSnapshotCopier>(std::move(live), options);
        hash_problem_ = copier->device_hash_error();
        copier_ = std::move(copier);
    }
#else
    (void)buffers;
    (void)hash_on_device;
#endif
    return copier_;
}

std::string DevicePath::take_snapshot_hash_problem() { return std::exchange(hash_problem_, {}); }

void DevicePath::abort() noexcept {
#if FLASHREC_WITH_CUDA
    if (side_) {
        side_->dp.abort();
        side_->groups.abort();
    }
#endif
}

bool DevicePath::reduce_scatter(const Step& step, std::span<const float> grads, std::span<float> shard) {
    const void* probe = grads.empty() ? static_cast<const void*>(shard.data()) : grads.data();
    if (!is_device_pointer(probe)) return false;
#if FLASHREC_WITH_CUDA
    if (!shard.empty() && !is_device_pointer(shard.data()))
        throw Error("reduce_scatter: the gradients are in device memory, the shard is not");
    run_on_device(side_->dp, step, probe, [&] {
        side_->dp.reduce_scatter(grads.data(), grads.size(), shard.data(), as_stream(stream_));
    });
#else
    (void)step;
#endif
    return true;
}

bool DevicePath::allgather(const Step& step, std::span<float> full) {
    if (!is_device_pointer(full.data())) return false;
#if FLASHREC_WITH_CUDA
    run_on_device(side_->dp, step, full.data(),
                  [&] { side_->dp.allgather(full.data(), full.size(), as_stream(stream_)); });
#else
    (void)step;
#endif
    return true;
}

bool DevicePath::allreduce(const Step& step, std::span<float> data) {
    if (!is_device_pointer(data.data())) return false;
#if FLASHREC_WITH_CUDA
    run_on_device(side_->dp, step, data.data(),
                  [&] { side_->dp.allreduce(data.data(), data.size(), as_stream(stream_)); });
#else
    (void)step;
#endif
    return true;
}

bool DevicePath::tp_allreduce(const Step& step, std::span<float> data) {
    if (!is_device_pointer(data.data())) return false;
#if FLASHREC_WITH_CUDA
    const auto call = [&] { return group_call(step, StepCollective::tp_allreduce, data.data(), stream_); };
    guarded_on_device(step.abandoned, step.on_failure, [&] { side_->groups.tp_allreduce(call(), data); });
#else
    (void)step;
#endif
    return true;
}

bool DevicePath::tp_allgather(const Step& step, std::span<const float> part, std::span<float> full) {
    if (!is_device_pointer(full.data())) return false;
#if FLASHREC_WITH_CUDA
    if (!part.empty() && !is_device_pointer(part.data()))
        throw Error("tp_allgather: the full buffer is in device memory, the part is not");
    const auto call = [&] { return group_call(step, StepCollective::tp_allgather, full.data(), stream_); };
    guarded_on_device(step.abandoned, step.on_failure, [&] { side_->groups.tp_allgather(call(), part, full); });
#else
    (void)step;
    (void)part;
#endif
    return true;
}

bool DevicePath::pp_send(const Step& step, std::span<const float> data, int stage) {
    if (!is_device_pointer(data.data())) return false;
#if FLASHREC_WITH_CUDA
    const auto call = [&] { return group_call(step, StepCollective::pp_send, data.data(), stream_); };
    guarded_on_device(step.abandoned, step.on_failure, [&] { side_->groups.pp_send(call(), data, stage); });
#else
    (void)step;
    (void)stage;
#endif
    return true;
}

bool DevicePath::pp_recv(const Step& step, std::span<float> data, int stage) {
    if (!is_device_pointer(data.data())) return false;
#if FLASHREC_WITH_CUDA
    const auto call = [&] { return group_call(step, StepCollective::pp_recv, data.data(), stream_); };
    guarded_on_device(step.abandoned, step.on_failure, [&] { side_->groups.pp_recv(call(), data, stage); });
#else
    (void)step;
    (void)stage;
#endif
    return true;
}

double DevicePath::take_nccl_build_ms() noexcept {
    double ms = 0;
    try {
        for (const auto& [phase, build_ms] : take_nccl_builds()) ms += build_ms;
    } catch (...) {  // a figure only
    }
    return ms;
}

std::vector<std::pair<std::string, double>> DevicePath::take_nccl_builds() {
    std::vector<std::pair<std::string, double>> builds;
#if FLASHREC_WITH_CUDA
    if (!side_) return builds;
    for (const auto& b : side_->dp.group().take_builds()) builds.emplace_back(nccl_build_phase(b.group, b.action), b.ms);
    for (auto& b : side_->groups.take_builds()) builds.push_back(std::move(b));
#endif
    return builds;
}

void DevicePath::finalize(const Step& step) {
#if FLASHREC_WITH_CUDA
    if (side_ && side_->dp.ready())
        guarded_on_device(step.abandoned, step.on_failure, [&] { side_->dp.finalize(); });
    if (side_) guarded_on_device(step.abandoned, step.on_failure, [&] { side_->groups.finalize(); });
#else
    (void)step;
#endif
}

}  // namespace flashrec::runtime
