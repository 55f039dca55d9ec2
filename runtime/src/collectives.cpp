// The step collectives beyond the DP basics of runtime.cpp: in-place and averaged
// reduce-scatter, the tensor- and pipeline-parallel exchanges, and an explicit abandon.
// All of them run through Impl::guarded, so a failed or revoked peer abandons the step exactly
// as in a DP collective, and all of them sum in a fixed order by coordinate, so results do not
// depend on which process holds a role or on MPI's algorithms.
#include <mpi.h>

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "flashrec/runtime/runtime_impl.hpp"

namespace flashrec {

namespace {

constexpr int kPipelineTag = 0x9e1;  // one tag: MPI keeps messages between two stages in order

void divide(std::span<float> data, int by) {
    const auto d = static_cast<float>(by);
    for (float& x : data) x /= d;
}

// Device memory is not for these collectives (they are MPI on host buffers).
void require_host(const Runtime::Impl& im, const void* data, const char* what) {
    if (im.is_device_pointer(data))
        throw Error(std::string(what) + ": this collective takes host memory; the buffer is in device memory");
}

}  // namespace

void Step::reduce_scatter(std::span<const float> grads, std::span<float> shard, Reduce how) {
    auto& im = *rt_->impl_;
    if (how == Reduce::mean && im.is_device_pointer(grads.data()))
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
    im.tp_scratch.resize(static_cast<std::size_t>(t) * n);
    im.guarded([&] {
        ft::check(MPI_Allgather(data.data(), static_cast<int>(n), MPI_FLOAT, im.tp_scratch.data(),
                                static_cast<int>(n), MPI_FLOAT, im.membership.tp.get()),
                  "MPI_Allgather(tp_allreduce)", im.membership.tp);
    });
    if (im.abandoned) return;
    std::copy_n(im.tp_scratch.begin(), n, data.begin());
    for (int j = 1; j < t; ++j) {
        const float* part = im.tp_scratch.data() + static_cast<std::size_t>(j) * n;
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

void Step::abandon(const std::string& why) {
    auto& im = *rt_->impl_;
    if (im.abandoned) return;
    im.on_failure(std::runtime_error("abandoned by the trainer: " + why));
}

}  // namespace flashrec
