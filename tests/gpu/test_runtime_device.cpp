// Needs a GPU (label gpu; exit 77 = skipped without one). What the runtime's GPU path relies
// on, on a device: protect()'s detection (no context made by asking; device and managed memory
// recognized, pinned and pageable host memory not), and the DP collectives of device buffers
// on one rank (a singleton MPI job: MPI_COMM_SELF): the fixed-order sum, the all-gather,
// abort (the communicator goes, the next prepare rebuilds it), a new generation rebuilds.
#define FLASHREC_GPU_TEST_WITH_MPI
#include "gpu_test_main.hpp"
#include "device_vectors.hpp"

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <chrono>
#include <vector>

#include "flashrec/ft/comm.hpp"
#include "flashrec/gpu/cuda_check.hpp"
#include "flashrec/gpu/device.hpp"
#include "flashrec/gpu/dp_collectives.hpp"
#include "flashrec/gpu/handles.hpp"

using namespace flashrec::gpu;

namespace {

auto soon() { return std::chrono::steady_clock::now() + std::chrono::seconds(30); }

}  // namespace

// First in this file: nothing has made a context yet (main only counted the devices).
TEST_CASE("asking where host memory lives makes no CUDA context; a context makes CUDA in use") {
    std::vector<float> host(16);
    CHECK_FALSE(cuda_in_use());
    CHECK(device_memory_of(host.data()) == -1);
    CHECK_FALSE(cuda_in_use());
    FLASHREC_CUDA_CHECK(cudaSetDevice(0));
    FLASHREC_CUDA_CHECK(cudaFree(nullptr));  // makes the primary context
    CHECK(cuda_in_use());
}

TEST_CASE("device and managed memory are recognized, host memory is not") {
    FLASHREC_CUDA_CHECK(cudaSetDevice(0));
    DeviceBuffer device = DeviceBuffer::allocate(4096);
    PinnedHostBuffer pinned = PinnedHostBuffer::allocate(4096);
    std::vector<float> pageable(1024);
    void* managed = nullptr;
    FLASHREC_CUDA_CHECK(cudaMallocManaged(&managed, 4096));
    CHECK(device_memory_of(device.data()) == 0);
    CHECK(device_memory_of(managed) == 0);
    CHECK(device_memory_of(pinned.data()) == -1);
    CHECK(device_memory_of(pageable.data()) == -1);
    FLASHREC_CUDA_CHECK(cudaFree(managed));
}

TEST_CASE("DP collectives on one rank: sum, gather, abort, rebuild") {
    FLASHREC_CUDA_CHECK(cudaSetDevice(0));
    const flashrec::ft::Comm self = flashrec::ft::Comm::adopt(MPI_COMM_SELF, "self");
    Stream stream = Stream::create();
    DeviceDpCollectives dp;
    CHECK_FALSE(dp.ready());
    dp.prepare(self, 0, 0, soon());
    REQUIRE(dp.ready());
    CHECK(dp.size() == 1);
    CHECK(dp.builds() == 1);
    dp.prepare(self, 0, 0, soon());  // same generation: nothing to do
    CHECK(dp.builds() == 1);

    std::vector<float> grads(1001);
    for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i) * 0.25f - 7.0f;
    DeviceBuffer d_grads = upload(grads), d_shard = DeviceBuffer::allocate(grads.size() * sizeof(float));
    dp.reduce_scatter(d_grads.as<float>(), grads.size(), d_shard.as<float>(), stream.get());
    stream.synchronize();
    CHECK(download(d_shard, grads.size()) == grads);  // one rank: the sum is the input

    dp.allgather(d_grads.as<float>(), grads.size(), stream.get());
    dp.allreduce(d_grads.as<float>(), grads.size(), stream.get());
    stream.synchronize();
    CHECK(download(d_grads, grads.size()) == grads);

    dp.abort();
    CHECK_FALSE(dp.ready());
    CHECK(dp.abort_flag().load());
    dp.prepare(self, 0, 0, soon());  // aborted: rebuilt even for the same generation
    CHECK(dp.ready());
    CHECK_FALSE(dp.abort_flag().load());
    CHECK(dp.builds() == 2);
    dp.prepare(self, 1, 0, soon());  // a repair: a new generation
    CHECK(dp.builds() == 3);
    dp.finalize();
    CHECK_FALSE(dp.ready());
}
