// Needs a GPU (label gpu; exit 77 = skipped without one). NCCL on one rank, made from an MPI
// communicator (a singleton MPI job: MPI_COMM_SELF): all-reduce, all-gather, the abort flag,
// rebuild, the provenance tag, and an init whose peer never comes, ended by the deadline
// instead of hanging.
#define FLASHREC_GPU_TEST_WITH_MPI
#include "gpu_test_main.hpp"
#include "device_vectors.hpp"

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "flashrec/gpu/cuda_check.hpp"
#include "flashrec/gpu/device.hpp"
#include "flashrec/gpu/handles.hpp"
#include "flashrec/gpu/nccl_comm.hpp"

using namespace flashrec::gpu;
using namespace std::chrono_literals;

namespace {

std::vector<float> ramp(std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) * 0.5f - 3.0f;
    return v;
}

}  // namespace

TEST_CASE("one-rank NCCL from MPI: all-reduce, all-gather, provenance, finalize") {
    MPI_Comm self = MPI_COMM_NULL;
    REQUIRE(MPI_Comm_dup(MPI_COMM_SELF, &self) == MPI_SUCCESS);
    std::atomic<bool> abort{false};
    Stream stream = Stream::create();
    {
        NcclComm nccl = NcclComm::create(self, "self", {.abort_flag = &abort, .timeout = 60s, .device = 0});
        CHECK(nccl.valid());
        CHECK(nccl.rank() == 0);
        CHECK(nccl.size() == 1);
        CHECK(nccl.device() == 0);
        CHECK(nccl.built_from(self));
        CHECK_FALSE(nccl.built_from(MPI_COMM_SELF));  // a different communicator: no tag

        const auto values = ramp(1 << 20);
        DeviceBuffer data = upload(values);
        nccl.allreduce_sum(data.as<float>(), values.size(), stream.get());
        CHECK(download(data, values.size()) == values);  // the sum over one rank

        DeviceBuffer gathered = DeviceBuffer::allocate(values.size() * sizeof(float));
        nccl.allgather(data.as<float>(), gathered.as<float>(), values.size(), stream.get());
        CHECK(download(gathered, values.size()) == values);
        nccl.allreduce_sum(data.as<float>(), 0, stream.get());  // nothing to do
        nccl.finalize();
        CHECK_FALSE(nccl.valid());
        CHECK_FALSE(nccl.built_from(self));
    }
    MPI_Comm_free(&self);
}

TEST_CASE("the abort flag aborts the communicator; rebuild makes a working one") {
    MPI_Comm self = MPI_COMM_NULL;
    REQUIRE(MPI_Comm_dup(MPI_COMM_SELF, &self) == MPI_SUCCESS);
    std::atomic<bool> abort{false};
    Stream stream = Stream::create();
    const auto values = ramp(4096);
    DeviceBuffer data = upload(values);

    NcclComm nccl = NcclComm::create(self, "self", {.abort_flag = &abort, .device = 0});
    abort = true;  // recovery started somewhere
    try {
        nccl.allreduce_sum(data.as<float>(), values.size(), stream.get());
        FAIL("no exception");
    } catch (const NcclError& e) {
        CHECK(e.cause() == NcclError::Cause::abort_requested);
        CHECK(e.peer_failure());
    }
    CHECK_FALSE(nccl.valid());
    try {
        nccl.allreduce_sum(data.as<float>(), values.size(), stream.get());
        FAIL("no exception");
    } catch (const NcclError& e) {
        CHECK(e.cause() == NcclError::Cause::call_failed);
        CHECK(std::string(e.what()).find("rebuild it") != std::string::npos);
    }

    // Recovery made a new communicator: clear the flag, rebuild from it.
    MPI_Comm repaired = MPI_COMM_NULL;
    REQUIRE(MPI_Comm_dup(MPI_COMM_SELF, &repaired) == MPI_SUCCESS);
    abort = false;
    CHECK_FALSE(nccl.built_from(repaired));
    nccl.rebuild(repaired, "self-2");
    CHECK(nccl.valid());
    CHECK(nccl.built_from(repaired));
    CHECK_FALSE(nccl.built_from(self));
    nccl.allreduce_sum(data.as<float>(), values.size(), stream.get());
    CHECK(download(data, values.size()) == values);

    // The flag also stops an init.
    abort = true;
    CHECK_THROWS_AS(NcclComm::create(self, "self-3", {.abort_flag = &abort, .device = 0}), NcclError);
    abort = false;
    nccl.abort();
    nccl.abort();  // idempotent
    MPI_Comm_free(&repaired);
    MPI_Comm_free(&self);
}

TEST_CASE("an init whose peer never comes ends at the deadline, not in a hang") {
    ncclUniqueId id{};
    FLASHREC_NCCL_CHECK(ncclGetUniqueId(&id));
    const auto start = std::chrono::steady_clock::now();
    try {
        // Rank 0 of 2; rank 1 never calls init (a peer that died before joining).
        (void)NcclComm::create_from_id(id, 2, 0, "lonely", {.timeout = 3000ms, .device = 0});
        FAIL("no exception");
    } catch (const NcclError& e) {
        CHECK(e.cause() == NcclError::Cause::deadline);
        CHECK(e.peer_failure());
        CHECK(std::string(e.what()).find("no completion within 3000 ms") != std::string::npos);
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    CHECK(waited >= 3s);
    CHECK(waited < 60s);
    CHECK_THROWS_AS((void)NcclComm::create_from_id(id, 2, 2, "bad", {}), flashrec::Error);
}
