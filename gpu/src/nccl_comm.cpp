#include "flashrec/gpu/nccl_comm.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "flashrec/errors.hpp"
#include "flashrec/ft/comm.hpp"
#include "flashrec/gpu/cuda_check.hpp"
#include "flashrec/gpu/device.hpp"

namespace flashrec::gpu {

namespace {

// The MPI attribute that marks a communicator an NCCL communicator was made from. No copy
// callback: a dup of it is a different communicator and gets no tag.
int tag_keyval() {
    static const int keyval = [] {
        int key = MPI_KEYVAL_INVALID;
        ft::check(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &key, nullptr),
                  "MPI_Comm_create_keyval", MPI_COMM_WORLD, "world");
        return key;
    }();
    return keyval;
}

std::atomic<std::uintptr_t> next_tag{1};

NcclError::Cause cause_of(AbortPoller::Verdict verdict) {
    switch (verdict) {
        case AbortPoller::Verdict::comm_error: return NcclError::Cause::async_error;
        case AbortPoller::Verdict::abort_requested: return NcclError::Cause::abort_requested;
        default: return NcclError::Cause::deadline;
    }
}

// ncclCommRevoke (2.28.7) and ncclCommShrink (2.27), found in the NCCL this process loaded.
// ncclCommGrow and ncclCommGetUniqueId (2.29.2) likewise, typed here so that a build against
// an older nccl.h (the CUDA install's 2.28: FLASHREC_NCCL_ROOT empty) compiles too.
using GrowCall = ncclResult_t (*)(ncclComm_t, int, const ncclUniqueId*, int, ncclComm_t*, ncclConfig_t*);
using GrowIdCall = ncclResult_t (*)(ncclComm_t, ncclUniqueId*);
struct RepairCalls {
    decltype(&ncclCommRevoke) revoke = nullptr;
    decltype(&ncclCommShrink) shrink = nullptr;
    GrowCall grow = nullptr;
    GrowIdCall grow_id = nullptr;
};

const RepairCalls& repair_calls() noexcept {
    static const RepairCalls calls = [] {
        RepairCalls c;
        c.revoke = reinterpret_cast<decltype(&ncclCommRevoke)>(dlsym(RTLD_DEFAULT, "ncclCommRevoke"));
        c.shrink = reinterpret_cast<decltype(&ncclCommShrink)>(dlsym(RTLD_DEFAULT, "ncclCommShrink"));
        c.grow = reinterpret_cast<GrowCall>(dlsym(RTLD_DEFAULT, "ncclCommGrow"));
        c.grow_id = reinterpret_cast<GrowIdCall>(dlsym(RTLD_DEFAULT, "ncclCommGetUniqueId"));
        return c;
    }();
    return calls;
}

}  // namespace

// ---- unique id ------------------------------------------------------------------------------

ncclUniqueId exchange_unique_id(MPI_Comm comm, const std::string& comm_name,
                                const std::function<ncclUniqueId()>& make_id, int root) {
    int rank = -1, size = 0;
    ft::check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank", comm, comm_name);
    ft::check(MPI_Comm_size(comm, &size), "MPI_Comm_size", comm, comm_name);
    if (root < 0 || root >= size)
        throw Error("exchange_unique_id: root " + std::to_string(root) + " is not a rank of '" +
                    comm_name + "' (size " + std::to_string(size) + ")");
    // Byte 0: 1 when the root made an id; then the id itself.
    std::array<char, 1 + NCCL_UNIQUE_ID_BYTES> packet{};
    std::exception_ptr failure;
    if (rank == root) {
        try {
            const ncclUniqueId id = make_id();
            std::memcpy(packet.data() + 1, id.internal, NCCL_UNIQUE_ID_BYTES);
            packet[0] = 1;
        } catch (...) {
            failure = std::current_exception();
        }
    }
    ft::check(MPI_Bcast(packet.data(), static_cast<int>(packet.size()), MPI_BYTE, root, comm),
              "MPI_Bcast(ncclUniqueId)", comm, comm_name);
    if (failure) std::rethrow_exception(failure);
    if (packet[0] != 1)
        throw Error("rank " + std::to_string(ft::world_rank()) + ": rank " + std::to_string(root) +
                    " of '" + comm_name + "' could not make the NCCL unique id");
    ncclUniqueId id{};
    std::memcpy(id.internal, packet.data() + 1, NCCL_UNIQUE_ID_BYTES);
    return id;
}

// ---- creation -------------------------------------------------------------------------------

NcclComm NcclComm::create(MPI_Comm mpi, const std::string& name, NcclOptions options) {
    int rank = -1, size = 0;
    ft::check(MPI_Comm_rank(mpi, &rank), "MPI_Comm_rank", mpi, name);
    ft::check(MPI_Comm_size(mpi, &size), "MPI_Comm_size", mpi, name);
    const ncclUniqueId id = exchange_unique_id(mpi, name, [] {
        ncclUniqueId made{};
        prepare_nccl_for_shared_device();
        FLASHREC_NCCL_CHECK(ncclGetUniqueId(&made));
        return made;
    });
    NcclComm comm = create_from_id(id, size, rank, name, options);
    comm.tag(mpi);
    return comm;
}

NcclComm NcclComm::create(const ft::Comm& mpi, NcclOptions options) {
    return create(mpi.get(), mpi.name(), options);
}

NcclComm NcclComm::create_from_id(const ncclUniqueId& id, int nranks, int rank,
                                  const std::string& name, NcclOptions options) {
    if (nranks < 1 || rank < 0 || rank >= nranks)
        throw Error("NcclComm '" + name + "': rank " + std::to_string(rank) + " of " +
                    std::to_string(nranks) + " is not a valid rank");
    prepare_nccl_for_shared_device();
    NcclComm c;
    c.name_ = name;
    c.options_ = options;
    c.device_ = options.device >= 0 ? options.device : current_device();
    DeviceGuard guard(c.device_);
    // Polled with cudaEventQuery, never waited on: no blocking-sync flag needed.
    c.done_ = Event::create(cudaEventDisableTiming);

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;               // every call returns at once; we poll
    c.nccl_name_ = std::make_unique<const std::string>(name);
    config.commName = c.nccl_name_->c_str();
    ncclComm_t handle = nullptr;
    const ncclResult_t rc =
        ncclCommInitRankConfig(&handle, nranks, id, rank, &config);
    c.comm_ = handle;
    c.rank_ = rank;
    c.size_ = nranks;
    if (rc != ncclSuccess && rc != ncclInProgress) {
        const char* last = handle != nullptr ? ncclGetLastError(handle) : nullptr;
        const std::string detail = last != nullptr ? last : "";
        c.abort();
        throw NcclError(rc, NcclError::Cause::call_failed, "ncclCommInitRankConfig", short_file(__FILE__),
                        __LINE__, ft::world_rank(), detail);
    }
    c.wait_settled("ncclCommInitRankConfig", {}, __FILE__, __LINE__);
    return c;
}

double NcclComm::warm_up(int device) {
    const auto start = std::chrono::steady_clock::now();
    DeviceGuard guard(device);
    prepare_nccl_for_shared_device();
    ncclUniqueId id{};
    FLASHREC_NCCL_CHECK(ncclGetUniqueId(&id));
    NcclOptions options;
    options.device = device;
    options.timeout = std::chrono::seconds(60);
    NcclComm alone = create_from_id(id, 1, 0, "warm-up", options);
    alone.finalize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

NcclComm::NcclComm(NcclComm&& other) noexcept
    : comm_(std::exchange(other.comm_, nullptr)),
      revoked_(std::exchange(other.revoked_, false)),
      rank_(std::exchange(other.rank_, -1)),
      size_(std::exchange(other.size_, 0)),
      device_(std::exchange(other.device_, -1)),
      name_(std::move(other.name_)),
      nccl_name_(std::move(other.nccl_name_)),
      options_(other.options_),
      tag_(std::exchange(other.tag_, 0)),
      done_(std::move(other.done_)),
      releasing_(std::move(other.releasing_)) {}

NcclComm& NcclComm::operator=(NcclComm&& other) noexcept {
    if (this != &other) {
        abort();
        comm_ = std::exchange(other.comm_, nullptr);
        revoked_ = std::exchange(other.revoked_, false);
        rank_ = std::exchange(other.rank_, -1);
        size_ = std::exchange(other.size_, 0);
        device_ = std::exchange(other.device_, -1);
        name_ = std::move(other.name_);
        nccl_name_ = std::move(other.nccl_name_);
        options_ = other.options_;
        tag_ = std::exchange(other.tag_, 0);
        done_ = std::move(other.done_);
        for (std::jthread& t : other.releasing_) releasing_.push_back(std::move(t));
        other.releasing_.clear();
    }
    return *this;
}

NcclComm::~NcclComm() { abort(); }

// ---- polling --------------------------------------------------------------------------------

AbortPoller NcclComm::make_poller() const {
    std::optional<AbortPoller::Clock::time_point> deadline;
    if (options_.timeout.count() > 0) deadline = AbortPoller::Clock::now() + options_.timeout;
    ncclComm_t comm = comm_;
    const std::function<void()>* before_poll = options_.before_poll ? &options_.before_poll : nullptr;
    return AbortPoller(
        [comm, before_poll] {
            if (before_poll != nullptr) (*before_poll)();
            ncclResult_t status = ncclSuccess;
            const ncclResult_t rc = ncclCommGetAsyncError(comm, &status);
            return rc == ncclSuccess ? status : rc;
        },
        options_.abort_flag, deadline);
}

void NcclComm::wait_settled(const char* what, const std::function<bool()>& op_complete,
                            const char* file, int line) {
    AbortPoller poller = make_poller();
    Verdict verdict = Verdict::pending;
    try {
        verdict = poll_until_settled(poller, op_complete);
    } catch (...) {
        abort();  // a CUDA error while waiting: the communicator's state is unknown
        throw;
    }
    if (verdict == Verdict::complete) return;
    std::string detail = "communicator '" + name_ + "', rank " + std::to_string(rank_) + " of " +
                         std::to_string(size_);
    if (verdict == Verdict::comm_error) {
        const char* last = ncclGetLastError(comm_);
        if (last != nullptr && *last != '\0') detail += ": " + std::string(last);
    } else if (verdict == Verdict::deadline) {
        detail += ": no completion within " + std::to_string(options_.timeout.count()) + " ms";
    }
    const std::int64_t seen_unix_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                          std::chrono::system_clock::now().time_since_epoch()).count();
    const auto release_start = std::chrono::steady_clock::now();
    release_after_failure();
    NcclError error(poller.last_status(), cause_of(verdict), what, short_file(file), line, ft::world_rank(), detail);
    error.set_failure_timing(seen_unix_us, std::chrono::duration<double, std::milli>(
                                               std::chrono::steady_clock::now() - release_start).count());
    throw error;
}

void NcclComm::run_collective(const char* what, const std::function<ncclResult_t()>& enqueue,
                              cudaStream_t stream, const char* file, int line) {
    if (!valid())
        throw NcclError(ncclInvalidUsage, NcclError::Cause::call_failed, what, short_file(file), line,
                        ft::world_rank(),
                        "communicator '" + name_ + "' was aborted or never made: rebuild it");
    DeviceGuard guard(device_);
    const ncclResult_t rc = enqueue();
    if (rc != ncclSuccess && rc != ncclInProgress) {
        const char* last = ncclGetLastError(comm_);
        const std::string detail = last != nullptr ? last : "";
        abort();  // other ranks may have enqueued theirs: this communicator cannot be trusted
        throw NcclError(rc, NcclError::Cause::call_failed, what, short_file(file), line,
                        ft::world_rank(), detail);
    }
    // Non-blocking communicator: the call may return before the operation is enqueued
    // (ncclInProgress); nothing else may be put on the stream until it is.
    if (rc == ncclInProgress) wait_settled(what, {}, file, line);
    try {
        done_.record(stream);
    } catch (...) {
        abort();
        throw;
    }
    wait_settled(what, [this] { return done_.query(); }, file, line);
}

// ---- collectives ----------------------------------------------------------------------------

void NcclComm::allreduce_sum(float* data, std::size_t count, cudaStream_t stream) {
    if (count == 0) return;
    run_collective(
        "ncclAllReduce(sum)",
        [&] { return ncclAllReduce(data, data, count, ncclFloat32, ncclSum, comm_, stream); }, stream,
        __FILE__, __LINE__);
}

void NcclComm::allgather(const float* send, float* recv, std::size_t count, cudaStream_t stream) {
    if (count == 0) return;
    run_collective(
        "ncclAllGather", [&] { return ncclAllGather(send, recv, count, ncclFloat32, comm_, stream); },
        stream, __FILE__, __LINE__);
}

void NcclComm::exchange(std::span<const PeerSend> sends, std::span<const PeerReceive> receives,
                        cudaStream_t stream) {
    const auto has_work = [](const auto& pieces) {
        return std::any_of(pieces.begin(), pieces.end(), [](const auto& p) { return p.count > 0; });
    };
    if (!has_work(sends) && !has_work(receives)) return;
    for (const PeerSend& p : sends)
        if (p.count > 0 && (p.peer < 0 || p.peer >= size_))
            throw Error("NcclComm::exchange: send to rank " + std::to_string(p.peer) + " of " +
                        std::to_string(size_));
    for (const PeerReceive& p : receives)
        if (p.count > 0 && (p.peer < 0 || p.peer >= size_))
            throw Error("NcclComm::exchange: receive from rank " + std::to_string(p.peer) + " of " +
                        std::to_string(size_));
    run_collective(
        "ncclSend/ncclRecv(group)",
        [&] {
            ncclResult_t rc = ncclGroupStart();
            if (rc != ncclSuccess) return rc;
            for (const PeerSend& p : sends) {
                if (p.count == 0) continue;
                rc = ncclSend(p.data, p.count, ncclFloat32, p.peer, comm_, stream);
                if (rc != ncclSuccess && rc != ncclInProgress) break;
            }
            for (const PeerReceive& p : receives) {
                if (p.count == 0 || (rc != ncclSuccess && rc != ncclInProgress)) continue;
                rc = ncclRecv(p.data, p.count, ncclFloat32, p.peer, comm_, stream);
            }
            const ncclResult_t end = ncclGroupEnd();  // always closes the group
            return rc != ncclSuccess && rc != ncclInProgress ? rc : end;
        },
        stream, __FILE__, __LINE__);
}

void NcclComm::broadcast_segments(float* data, std::span<const Segment> segments, cudaStream_t stream) {
    if (std::none_of(segments.begin(), segments.end(), [](const Segment& s) { return s.count > 0; })) return;
    for (const Segment& s : segments)
        if (s.count > 0 && (s.root < 0 || s.root >= size_))
            throw Error("NcclComm::broadcast_segments: root " + std::to_string(s.root) + " of " +
                        std::to_string(size_));
    run_collective(
        "ncclBroadcast(group)",
        [&] {
            ncclResult_t rc = ncclGroupStart();
            if (rc != ncclSuccess) return rc;
            for (const Segment& s : segments) {
                if (s.count == 0) continue;
                float* at = data + s.offset;
                rc = ncclBroadcast(at, at, s.count, ncclFloat32, s.root, comm_, stream);  // in place
                if (rc != ncclSuccess && rc != ncclInProgress) break;
            }
            const ncclResult_t end = ncclGroupEnd();
            return rc != ncclSuccess && rc != ncclInProgress ? rc : end;
        },
        stream, __FILE__, __LINE__);
}

// ---- lifetime -------------------------------------------------------------------------------

void NcclComm::abort() noexcept {
    if (comm_ == nullptr) return;
    (void)ncclCommAbort(comm_);  // blocking but bounded, also for non-blocking communicators
    comm_ = nullptr;
    revoked_ = false;
}

bool NcclComm::can_shrink() noexcept {
    const RepairCalls& calls = repair_calls();
    return calls.revoke != nullptr && calls.shrink != nullptr;
}

void NcclComm::revoke() noexcept {
    if (comm_ == nullptr || revoked_) return;
    // Revocable only while NCCL itself has not failed the communicator: one that holds an
    // async error (a peer's connection closed under an operation) answers with that error and
    // cannot be shrunk; it is aborted, and the caller re-initialises.
    const ncclResult_t rc = can_shrink() ? repair_calls().revoke(comm_, NCCL_REVOKE_DEFAULT) : ncclInvalidUsage;
    if (rc != ncclSuccess && rc != ncclInProgress) {
        abort();
        return;
    }
    revoked_ = true;
}

void NcclComm::release_after_failure() noexcept {
    const char* mode = std::getenv("FLASHREC_NCCL_RELEASE");
    if (options_.keep_after_failure)
        revoke();
    else if (mode != nullptr && std::strcmp(mode, "sync") == 0)
        abort();
    else
        release_in_background();
}

void NcclComm::release_in_background() noexcept {
    if (comm_ == nullptr) return;
    ncclComm_t failed = std::exchange(comm_, nullptr);
    revoked_ = false;
    try {
        // The name NCCL may still read goes with it; a copy stays for this object's messages.
        std::shared_ptr<const std::string> name(std::move(nccl_name_));
        nccl_name_ = std::make_unique<const std::string>(*name);
        releasing_.emplace_back([failed, device = device_, name] {
            (void)cudaSetDevice(device);
            (void)ncclCommAbort(failed);
        });
    } catch (...) {
        (void)ncclCommAbort(failed);  // no thread to be had: abort here, as before
    }
}

NcclComm NcclComm::shrink(std::span<const int> excluded, NcclOptions options) {
    if (comm_ == nullptr)
        throw NcclError(ncclInvalidUsage, NcclError::Cause::call_failed, "ncclCommShrink", short_file(__FILE__),
                        __LINE__, ft::world_rank(),
                        "communicator '" + name_ + "' was aborted: create a new one instead");
    if (!can_shrink())
        throw NcclError(ncclInvalidUsage, NcclError::Cause::call_failed, "ncclCommShrink", short_file(__FILE__),
                        __LINE__, ft::world_rank(), "the NCCL loaded has no ncclCommRevoke/ncclCommShrink");
    const bool was_revoked = revoked_;
    for (int r : excluded)
        if (r < 0 || r >= size_)
            throw Error("NcclComm::shrink of '" + name_ + "': rank " + std::to_string(r) + " of " +
                        std::to_string(size_) + " to exclude");
    DeviceGuard guard(device_);
    // Revoked: in progress until the operations in flight have stopped, then success. An error
    // instead means NCCL failed it meanwhile: not a state to shrink from.
    const auto settle = [this](const char* what) {
        AbortPoller parent(
            [comm = comm_] {
                ncclResult_t status = ncclSuccess;
                const ncclResult_t rc = ncclCommGetAsyncError(comm, &status);
                return rc == ncclSuccess ? status : rc;
            },
            options_.abort_flag,
            options_.timeout.count() > 0 ? std::optional(AbortPoller::Clock::now() + options_.timeout)
                                         : std::nullopt);
        const Verdict verdict = poll_until_settled(parent, {});
        if (verdict == Verdict::complete) return;
        const ncclResult_t status = parent.last_status();
        abort();
        throw NcclError(status, cause_of(verdict), what, short_file(__FILE__), __LINE__, ft::world_rank(),
                        "communicator '" + name_ + "' (revoked parent of the shrink)");
    };
    if (was_revoked) settle("ncclCommRevoke");
    NcclComm c;
    c.name_ = name_;
    c.options_ = std::move(options);
    c.device_ = device_;
    c.done_ = Event::create(cudaEventDisableTiming);
    c.nccl_name_ = std::make_unique<const std::string>(name_);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.commName = c.nccl_name_->c_str();
    std::vector<int> ranks(excluded.begin(), excluded.end());
    ncclComm_t handle = nullptr;
    // A revoked parent has settled: the default flag. A live one: NCCL ends what it has in
    // flight first (NCCL_SHRINK_ABORT).
    const ncclResult_t rc = repair_calls().shrink(comm_, ranks.data(), static_cast<int>(ranks.size()), &handle,
                                                  &config, was_revoked ? NCCL_SHRINK_DEFAULT : NCCL_SHRINK_ABORT);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        const char* last = ncclGetLastError(comm_);
        abort();
        throw NcclError(rc, NcclError::Cause::call_failed, "ncclCommShrink", short_file(__FILE__), __LINE__,
                        ft::world_rank(), last != nullptr ? last : "");
    }
    // Non-blocking: the child may be handed out only when the parent's part is done.
    if (handle == nullptr) settle("ncclCommShrink");
    if (handle == nullptr) {
        abort();
        throw NcclError(ncclInternalError, NcclError::Cause::call_failed, "ncclCommShrink", short_file(__FILE__),
                        __LINE__, ft::world_rank(), "no communicator came back from the shrink of '" + name_ + "'");
    }
    c.comm_ = handle;
    settle_child(c, "ncclCommShrink");
    abort();  // the parent, released the way NCCL asks after a failure
    return c;
}

void NcclComm::settle_child(NcclComm& child, const char* call) {
    try {
        child.wait_settled(call, {}, __FILE__, __LINE__);
    } catch (...) {
        abort();
        throw;
    }
    FLASHREC_NCCL_CHECK(ncclCommUserRank(child.comm_, &child.rank_));
    FLASHREC_NCCL_CHECK(ncclCommCount(child.comm_, &child.size_));
}

ft::NcclAbilities NcclComm::abilities() noexcept {
    ft::NcclAbilities a;
    int version = 0;
    if (ncclGetVersion(&version) == ncclSuccess) a.version = version;
    const RepairCalls& calls = repair_calls();
    a.shrink = can_shrink();
    a.grow = calls.grow != nullptr && calls.grow_id != nullptr && a.version >= ft::kNcclGrowSince;
    return a;
}

ncclUniqueId NcclComm::grow_id() {
    if (!valid() || !abilities().grow)
        throw NcclError(ncclInvalidUsage, NcclError::Cause::call_failed, "ncclCommGetUniqueId", short_file(__FILE__),
                        __LINE__, ft::world_rank(), "communicator '" + name_ + "' cannot be grown (aborted, or no ncclCommGrow)");
    DeviceGuard guard(device_);
    ncclUniqueId id{};
    const ncclResult_t rc = repair_calls().grow_id(comm_, &id);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        const char* last = ncclGetLastError(comm_);
        throw NcclError(rc, NcclError::Cause::call_failed, "ncclCommGetUniqueId", short_file(__FILE__), __LINE__,
                        ft::world_rank(), last != nullptr ? last : "");
    }
    wait_settled("ncclCommGetUniqueId", {}, __FILE__, __LINE__);
    return id;
}

namespace {
// The grown communicator's config: non-blocking, named like its parent.
ncclConfig_t grow_config(const std::string& name) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.commName = name.c_str();
    return config;
}
}  // namespace

NcclComm NcclComm::grow(int nranks, const ncclUniqueId* id, NcclOptions options) {
    if (!valid() || !abilities().grow)
        throw NcclError(ncclInvalidUsage, NcclError::Cause::call_failed, "ncclCommGrow", short_file(__FILE__), __LINE__,
                        ft::world_rank(), "communicator '" + name_ + "' cannot be grown (aborted, or no ncclCommGrow)");
    if (nranks < size_)
        throw Error("NcclComm::grow of '" + name_ + "': to " + std::to_string(nranks) + " ranks from " +
                    std::to_string(size_));
    DeviceGuard guard(device_);
    NcclComm c;
    c.name_ = name_;
    c.options_ = std::move(options);
    c.device_ = device_;
    c.done_ = Event::create(cudaEventDisableTiming);
    c.nccl_name_ = std::make_unique<const std::string>(name_);
    ncclConfig_t config = grow_config(*c.nccl_name_);
    ncclComm_t handle = nullptr;
    const ncclResult_t rc = repair_calls().grow(comm_, nranks, id, -1, &handle, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        const char* last = ncclGetLastError(comm_);
        abort();
        throw NcclError(rc, NcclError::Cause::call_failed, "ncclCommGrow", short_file(__FILE__), __LINE__,
                        ft::world_rank(), last != nullptr ? last : "");
    }
    c.comm_ = handle;
    settle_child(c, "ncclCommGrow");
    // The parent: healthy, but no longer used. Its release runs beside the job and is joined
    // when the grown communicator goes, not now (this object is usually a temporary).
    release_in_background();
    c.releasing_ = std::move(releasing_);
    return c;
}

NcclComm NcclComm::join_grow(const ncclUniqueId& id, int nranks, int rank, const std::string& name,
                             NcclOptions options) {
    if (!abilities().grow)
        throw NcclError(ncclInvalidUsage, NcclError::Cause::call_failed, "ncclCommGrow", short_file(__FILE__), __LINE__,
                        ft::world_rank(), "the NCCL loaded has no ncclCommGrow");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        throw Error("NcclComm '" + name + "': rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
                    " is not a valid rank to join");
    prepare_nccl_for_shared_device();
    NcclComm c;
    c.name_ = name;
    c.options_ = std::move(options);
    c.device_ = c.options_.device >= 0 ? c.options_.device : current_device();
    DeviceGuard guard(c.device_);
    c.done_ = Event::create(cudaEventDisableTiming);
    c.nccl_name_ = std::make_unique<const std::string>(name);
    ncclConfig_t config = grow_config(*c.nccl_name_);
    ncclComm_t handle = nullptr;
    const ncclResult_t rc = repair_calls().grow(nullptr, nranks, &id, rank, &handle, &config);
    c.comm_ = handle;
    if (rc != ncclSuccess && rc != ncclInProgress) {
        c.abort();
        throw NcclError(rc, NcclError::Cause::call_failed, "ncclCommGrow", short_file(__FILE__), __LINE__,
                        ft::world_rank(), "joining '" + name + "' as rank " + std::to_string(rank));
    }
    c.rank_ = rank;
    c.size_ = nranks;
    c.wait_settled("ncclCommGrow", {}, __FILE__, __LINE__);
    return c;
}

void NcclComm::finalize() {
    if (comm_ == nullptr) return;
    DeviceGuard guard(device_);
    const ncclResult_t rc = ncclCommFinalize(comm_);
    if (rc != ncclSuccess && rc != ncclInProgress) {
        const char* last = ncclGetLastError(comm_);
        const std::string detail = last != nullptr ? last : "";
        abort();
        throw NcclError(rc, NcclError::Cause::call_failed, "ncclCommFinalize", short_file(__FILE__),
                        __LINE__, ft::world_rank(), detail);
    }
    wait_settled("ncclCommFinalize", {}, __FILE__, __LINE__);
    (void)ncclCommDestroy(comm_);  // quiescent now: frees local resources without blocking
    comm_ = nullptr;
}

void NcclComm::rebuild(MPI_Comm mpi, const std::string& name) {
    abort();
    *this = create(mpi, name, options_);
}

// ---- provenance -----------------------------------------------------------------------------

void NcclComm::tag(MPI_Comm mpi) {
    tag_ = next_tag.fetch_add(1);
    ft::check(MPI_Comm_set_attr(mpi, tag_keyval(), reinterpret_cast<void*>(tag_)), "MPI_Comm_set_attr",
              mpi, name_);
}

bool NcclComm::built_from(MPI_Comm mpi) const {
    if (!valid() || tag_ == 0 || mpi == MPI_COMM_NULL) return false;
    void* value = nullptr;
    int found = 0;
    if (MPI_Comm_get_attr(mpi, tag_keyval(), &value, &found) != MPI_SUCCESS) return false;
    return found != 0 && reinterpret_cast<std::uintptr_t>(value) == tag_;
}

}  // namespace flashrec::gpu
