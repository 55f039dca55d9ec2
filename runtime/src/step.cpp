// The trainer's Step (flashrec.hpp): its data seed, its collectives (the DP reduce-scatter,
// allgather and allreduce, in-place and averaged forms, the tensor- and pipeline-parallel
// exchanges, an explicit abandon) and the sync point that ends it (begin_update).
// Every collective runs through Impl::guarded, so a failed or revoked peer abandons the step
// exactly as in a DP collective, and each sums in a fixed order by coordinate, so results do
// not depend on which process holds a role or on MPI's algorithms. Device memory goes to the
// DevicePath's NCCL collectives first (im.device, bound by im.device_step()); a collective
// that has no device form refuses device memory (require_host).
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>

#include "runtime_impl.hpp"

namespace flashrec {

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

constexpr int kPipelineTag = 0x9e1;  // one tag: MPI keeps messages between two stages in order

void divide(std::span<float> data, int by) {
    const auto d = static_cast<float>(by);
    for (float& x : data) x /= d;
}

// Device memory is not for these collectives (they are MPI on host buffers).
void require_host(const Runtime::Impl& im, const void* data, const char* what) {
    if (im.device.is_device_pointer(data))
        throw Error(std::string(what) + ": this collective takes host memory; the buffer is in device memory");
}

}  // namespace

// --- data parallel ---------------------------------------------------------------------------

std::uint64_t Step::data_seed() const {
    const auto& im = *rt_->impl_;
    return splitmix64(im.cfg.job.seed ^ splitmix64(static_cast<std::uint64_t>(index_) ^
                                                   splitmix64(static_cast<std::uint64_t>(
                                                       im.coord().dp + 1))));
}

void Step::reduce_scatter(std::span<const float> grads, std::span<float> shard) {
    auto& im = *rt_->impl_;
    const int d = im.shape.dp;
    const std::size_t n = grads.size();
    const auto [first, last] = rt_->shard_range(n);
    if (shard.size() != last - first)
        throw Error("reduce_scatter: shard has " + std::to_string(shard.size()) +
                    " elements, this role's part of " + std::to_string(n) + " is " +
                    std::to_string(last - first));
    im.enter(Phase::allreduce, index_);
    if (im.device.reduce_scatter(im.device_step(), grads, shard)) return;  // device memory: NCCL, same order
    // Every role receives every peer's copy of its part and sums them in dp order itself:
    // the result does not depend on MPI's reduction algorithm or on which process holds a role.
    std::vector<int> send_counts(d), send_displs(d), recv_counts(d), recv_displs(d);
    const auto mine = static_cast<int>(last - first);
    for (int j = 0; j < d; ++j) {
        const std::size_t a = n * static_cast<std::size_t>(j) / static_cast<std::size_t>(d);
        const std::size_t b = n * static_cast<std::size_t>(j + 1) / static_cast<std::size_t>(d);
        send_counts[j] = static_cast<int>(b - a);
        send_displs[j] = static_cast<int>(a);
        recv_counts[j] = mine;
        recv_displs[j] = j * mine;
    }
    im.scratch.dp.resize(static_cast<size_t>(d) * last - static_cast<size_t>(d) * first);
    im.guarded([&] {
        ft::check(MPI_Alltoallv(grads.data(), send_counts.data(), send_displs.data(), MPI_FLOAT,
                                im.scratch.dp.data(), recv_counts.data(), recv_displs.data(),
                                MPI_FLOAT, im.membership.dp.get()),
                  "MPI_Alltoallv(gradients)", im.membership.dp);
    });
    if (im.abandoned) return;
    std::copy_n(im.scratch.dp.begin(), mine, shard.begin());
    for (int j = 1; j < d; ++j) {
        const float* part = im.scratch.dp.data() + static_cast<std::size_t>(j) * shard.size();
        for (std::size_t i = 0; i < shard.size(); ++i) shard[i] += part[i];
    }
}

void Step::allgather(std::span<float> full) {
    auto& im = *rt_->impl_;
    if (im.device.allgather(im.device_step(), full)) return;  // device memory: NCCL broadcasts
    const int d = im.shape.dp;
    const std::size_t n = full.size();
    std::vector<int> counts(d), displs(d);
    for (int j = 0; j < d; ++j) {
        const std::size_t a = n * static_cast<std::size_t>(j) / static_cast<std::size_t>(d);
        const std::size_t b = n * static_cast<std::size_t>(j + 1) / static_cast<std::size_t>(d);
        counts[j] = static_cast<int>(b - a);
        displs[j] = static_cast<int>(a);
    }
    im.guarded([&] {
        ft::check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, full.data(), counts.data(),
                                 displs.data(), MPI_FLOAT, im.membership.dp.get()),
                  "MPI_Allgatherv(parameters)", im.membership.dp);
    });
}

void Step::allreduce(std::span<float> data) {
    auto& im = *rt_->impl_;
    if (im.device.is_device_pointer(data.data())) {
        im.enter(Phase::allreduce, index_);
        im.device.allreduce(im.device_step(), data);
        return;
    }
    const auto [first, last] = rt_->shard_range(data.size());
    std::vector<float> part(last - first);
    reduce_scatter(data, part);
    std::copy(part.begin(), part.end(), data.begin() + static_cast<std::ptrdiff_t>(first));
    allgather(data);
}

void Step::reduce_scatter(std::span<const float> grads, std::span<float> shard, Reduce how) {
    auto& im = *rt_->impl_;
    if (how == Reduce::mean && im.device.is_device_pointer(grads.data()))
        throw Error("reduce_scatter: Reduce::mean takes host memory; these gradients are in device memory "
                    "(use Reduce::sum and divide by dp_size() in the optimizer)");
    reduce_scatter(grads, shard);
    if (how == Reduce::mean && !im.abandoned) divide(shard, im.shape.dp);
}

void Step::reduce_scatter(std::span<float> grads, Reduce how) {
    const auto [first, last] = rt_->shard_range(grads.size());
    // The sum is written only after every peer's part has arrived (runtime.cpp, and the NCCL
    // path likewise), so the shard may alias the gradients it is made from.
    reduce_scatter(std::span<const float>(grads), grads.subspan(first, last - first), how);
}

void Step::allreduce(std::span<float> data, Reduce how) {
    if (how == Reduce::sum) {
        allreduce(data);
        return;
    }
    reduce_scatter(data, how);
    allgather(data);
}

// --- tensor and pipeline parallel --------------------------------------------------------------

void Step::tp_allreduce(std::span<float> data) {
    auto& im = *rt_->impl_;
    if (im.abandoned) return;
    im.enter(Phase::tp_exchange, index_);
    const int t = im.shape.tp;
    if (t == 1) return;
    if (im.device.tp_allreduce(im.device_step(), data)) return;  // device memory: NCCL, same order
    const std::size_t n = data.size();
    if (n > static_cast<std::size_t>(std::numeric_limits<int>::max()))
        throw Error("tp_allreduce: " + std::to_string(n) + " elements is more than one MPI count");
    // Every peer gets every contribution and adds them in tp order itself: the same bits on
    // every TP peer, which the replicated parts of a Megatron layer rely on.
    im.scratch.tp.resize(static_cast<std::size_t>(t) * n);
    im.guarded([&] {
        ft::check(MPI_Allgather(data.data(), static_cast<int>(n), MPI_FLOAT, im.scratch.tp.data(),
                                static_cast<int>(n), MPI_FLOAT, im.membership.tp.get()),
                  "MPI_Allgather(tp_allreduce)", im.membership.tp);
    });
    if (im.abandoned) return;
    std::copy_n(im.scratch.tp.begin(), n, data.begin());
    for (int j = 1; j < t; ++j) {
        const float* part = im.scratch.tp.data() + static_cast<std::size_t>(j) * n;
        for (std::size_t i = 0; i < n; ++i) data[i] += part[i];
    }
}

void Step::tp_allgather(std::span<const float> part, std::span<float> full) {
    auto& im = *rt_->impl_;
    const int t = im.shape.tp;
    if (full.size() != part.size() * static_cast<std::size_t>(t))
        throw Error("tp_allgather: full has " + std::to_string(full.size()) + " elements, tp (" +
                    std::to_string(t) + ") x part (" + std::to_string(part.size()) + ") is " +
                    std::to_string(part.size() * static_cast<std::size_t>(t)));
    if (part.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
        throw Error("tp_allgather: " + std::to_string(part.size()) + " elements is more than one MPI count");
    if (im.abandoned) return;
    im.enter(Phase::tp_exchange, index_);
    if (im.device.tp_allgather(im.device_step(), part, full)) return;  // device memory: NCCL
    require_host(im, part.data(), "tp_allgather");
    const int n = static_cast<int>(part.size());
    im.guarded([&] {
        ft::check(MPI_Allgather(part.data(), n, MPI_FLOAT, full.data(), n, MPI_FLOAT, im.membership.tp.get()),
                  "MPI_Allgather(tp_allgather)", im.membership.tp);
    });
}

namespace {
// What pp_send and pp_recv refuse before any MPI or NCCL call: a stage that is not another
// stage of this role's pipeline, a message longer than one MPI count.
void check_pipeline_call(const Runtime::Impl& im, std::size_t count, int stage, const char* what) {
    if (stage < 0 || stage >= im.shape.pp || stage == im.coord().pp)
        throw Error(std::string(what) + ": stage " + std::to_string(stage) + " is not another stage of " +
                    topology::role_key(im.coord()) + "'s pipeline (job.pp = " + std::to_string(im.shape.pp) +
                    ", this role is stage " + std::to_string(im.coord().pp) + ")");
    if (count > static_cast<std::size_t>(std::numeric_limits<int>::max()))
        throw Error(std::string(what) + ": " + std::to_string(count) + " elements is more than one MPI count");
}
}  // namespace

void Step::pp_send(std::span<const float> data, int stage) {
    auto& im = *rt_->impl_;
    check_pipeline_call(im, data.size(), stage, "pp_send");
    if (im.abandoned) return;
    im.enter(Phase::pp_exchange, index_);
    if (im.device.pp_send(im.device_step(), data, stage)) return;  // device memory: NCCL
    // The PP group is ordered by pp coordinate: its rank of stage s is s.
    im.guarded([&] {
        ft::check(MPI_Send(data.data(), static_cast<int>(data.size()), MPI_FLOAT, stage, kPipelineTag,
                           im.membership.pp.get()),
                  "MPI_Send(pp_send)", im.membership.pp);
    });
}

void Step::pp_recv(std::span<float> data, int stage) {
    auto& im = *rt_->impl_;
    check_pipeline_call(im, data.size(), stage, "pp_recv");
    if (im.abandoned) return;
    im.enter(Phase::pp_exchange, index_);
    if (im.device.pp_recv(im.device_step(), data, stage)) return;  // device memory: NCCL
    MPI_Status status;
    bool too_long = false;
    im.guarded([&] {
        const int rc = MPI_Recv(data.data(), static_cast<int>(data.size()), MPI_FLOAT, stage, kPipelineTag,
                                im.membership.pp.get(), &status);
        int error_class = MPI_SUCCESS;
        if (rc != MPI_SUCCESS) MPI_Error_class(rc, &error_class);
        // A longer message is the trainer's bug, not a failure: recovering would replay it forever.
        too_long = error_class == MPI_ERR_TRUNCATE;
        if (!too_long) ft::check(rc, "MPI_Recv(pp_recv)", im.membership.pp);
    });
    int got = 0;
    if (!too_long && im.abandoned) return;
    if (!too_long) MPI_Get_count(&status, MPI_FLOAT, &got);
    if (too_long || static_cast<std::size_t>(got) != data.size())
        throw Error("pp_recv: stage " + std::to_string(stage) + " sent " +
                    (too_long ? std::string("more than ") + std::to_string(data.size()) : std::to_string(got)) +
                    " elements to " + topology::role_key(im.coord()) + ", which expected " +
                    std::to_string(data.size()) + " (the two stages disagree on the message)");
}

// --- the sync point and the step's end ---------------------------------------------------------

bool Step::begin_update() {
    auto& im = *rt_->impl_;
    if (im.abandoned) return false;
    im.enter(Phase::sync, index_);
    // Only a step whose starting version is being snapshotted waits (protection.every).
    const bool snapshotted = im.ring.protection && im.ring.snapshot_version == index_;
    im.guarded([&] {
        if (!im.ring.protection) return;
        if (snapshotted) im.interval.waited_for_snapshot(im.ring.protection->wait() * 1e3);
        im.quarantine.clean_step();  // transfers of an aborted epoch end a few steps later
    });
    const bool exact = !(snapshotted && !im.abandoned) || im.replay.check_replayed(index_, topology::role_key(im.coord()));
    // The one synchronization point: nobody mutates state for this step unless every active
    // role reached it alive (a failure anywhere abandons the step everywhere). It carries whether
    // every role's replayed versions hashed as first committed: the replay probe's verdict.
    int everyone[2] = {1, exact ? 1 : 0};  // {here, exact}
    im.guarded([&] {
        MPI_Request request = MPI_REQUEST_NULL;
        ft::check(MPI_Iallreduce(MPI_IN_PLACE, everyone, 2, MPI_INT, MPI_MIN, im.membership.work.get(), &request),
                  "MPI_Iallreduce(sync point)", im.membership.work);
        im.membership.work.wait(request, "MPI_Iallreduce(sync point)");
    });
    if (im.abandoned) return false;
    if (runtime::probe_verdict_at(im.replay.probe(), index_)) im.judge_replay_probe(everyone[1] == 1);
    im.loop.pristine = false;  // the optimizer changes state from here on
    // Every role's snapshot `index_` is committed now (each waited before the allreduce).
    if (im.checkpointer && snapshotted) im.checkpointer->committed(index_);
    im.enter(Phase::optimizer, -1);
    return true;
}

void Step::end_update() {
    auto& im = *rt_->impl_;
    im.launcher.progress.step_tag.store(index_ + 1, std::memory_order_relaxed);
}

void Step::report_loss(double loss) {
    auto& im = *rt_->impl_;
    if (im.membership.role_index == 0 && !im.abandoned)
        im.launcher.send_event(ft::records::Step{index_, loss}.to_json());
}

bool Step::abandoned() const { return rt_->impl_->abandoned; }

void Step::abandon(const std::string& why) {
    auto& im = *rt_->impl_;
    if (im.abandoned) return;
    im.on_failure(std::runtime_error("abandoned by the trainer: " + why));
}

}  // namespace flashrec
