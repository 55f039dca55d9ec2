// Needs a GPU (label gpu; exit 77 = skipped without one): the snapshot checksum computed on the
// GPU (docs/gpu.md, "The hash on the GPU"). The kernel's digests equal the host reference's for
// every length class and alignment; a DeviceSnapshotCopier with hash_on_device hashes its
// device regions itself, the store records the algorithm, and a host reader (restore, the HDF5
// writer) verifies the landed bytes against it, and refuses bytes that landed wrong. The
// arithmetic itself is checked without a GPU in unit.test_block_checksum.
#include "gpu_test_main.hpp"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "flashrec/ft/checksum.hpp"
#include "flashrec/ft/snapshot.hpp"
#include "flashrec/gpu/block_hash.hpp"
#include "flashrec/gpu/cuda_check.hpp"
#include "flashrec/gpu/handles.hpp"
#include "flashrec/gpu/snapshot_copier.hpp"

#include "../unit/scratch_job.hpp"

using namespace flashrec::gpu;
namespace ft = flashrec::ft;

using flashrec::test::ScratchJob;

namespace {

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::byte> v(n);
    for (auto& b : v) b = static_cast<std::byte>(rng());
    return v;
}

DeviceBuffer on_device(const std::vector<std::byte>& host) {
    DeviceBuffer d = DeviceBuffer::allocate(host.size());
    FLASHREC_CUDA_CHECK(cudaMemcpy(d.data(), host.data(), host.size(), cudaMemcpyHostToDevice));
    return d;
}

std::vector<std::uint64_t> kernel_digests(const void* device_data, std::size_t bytes) {
    const std::size_t count = block_digest_count(bytes);
    std::vector<std::uint64_t> out(count);
    if (count == 0) return out;
    DeviceBuffer digests = DeviceBuffer::allocate(count * sizeof(std::uint64_t));
    Stream stream = Stream::create();
    FLASHREC_CUDA_CHECK(launch_block_digests(device_data, bytes, digests.as<std::uint64_t>(), stream.get()));
    FLASHREC_CUDA_CHECK(cudaMemcpyAsync(out.data(), digests.data(), count * sizeof(std::uint64_t),
                                        cudaMemcpyDeviceToHost, stream.get()));
    stream.synchronize();
    return out;
}

}  // namespace

TEST_CASE("the kernel's block digests equal the host reference at every length class and alignment") {
    const auto host = random_bytes((3 << 20) + 64, 11);
    const DeviceBuffer device = on_device(host);
    for (std::size_t start : {0, 1, 8, 16, 61}) {
        for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{16}, std::size_t{240}, std::size_t{241},
                                  std::size_t{4095}, std::size_t{4096}, std::size_t{4097}, std::size_t{4096 + 240},
                                  std::size_t{5 * 4096 + 1000}, std::size_t{(1 << 20) + 13}, std::size_t{3 << 20}}) {
            INFO(bytes << " bytes at offset " << start);
            const auto* in = reinterpret_cast<const unsigned char*>(host.data()) + start;
            const auto digests = kernel_digests(device.as<unsigned char>() + start, bytes);
            REQUIRE(digests.size() == (bytes + 4095) / 4096);
            for (std::size_t b = 0; b < digests.size(); ++b)
                REQUIRE(digests[b] == ft::checksum(in + b * 4096, std::min<std::size_t>(4096, bytes - b * 4096)));
            CHECK(ft::combine_block_digests(digests.data(), digests.size()) == ft::block_checksum(in, bytes));
        }
    }
}

TEST_CASE("a copier with hash_on_device: the store records the GPU's checksums, a host reader verifies and restores") {
    ScratchJob job;
    const auto params = random_bytes((5 << 20) + 100, 12), master = random_bytes(4096 * 3 + 7, 13);
    auto adam_t = random_bytes(8, 14);  // envelope state on the host: hashed on the host
    const DeviceBuffer d_params = on_device(params), d_master = on_device(master);
    DeviceSnapshotCopier::Options options;
    options.hash_on_device = true;
    DeviceSnapshotCopier copier({{d_params.data(), params.size()}, {d_master.data(), master.size()},
                                 {adam_t.data(), adam_t.size()}}, options);
    REQUIRE_MESSAGE(copier.device_hash_error().empty(), copier.device_hash_error());
    REQUIRE(copier.hash_on_device());
    CHECK(copier.hashes_region(0));
    CHECK(copier.hashes_region(1));
    CHECK_FALSE(copier.hashes_region(2));

    const ft::SnapshotLayout layout{{"params", params.size()}, {"master", master.size()}, {"adam_t", adam_t.size()}};
    ft::SnapshotStore store(job.name(), "dp0.tp0.pp0", layout);
    const ft::WriteView view = store.begin_write(1, 0);
    std::vector<std::span<std::byte>> destinations;
    for (const auto& b : view.buffers) destinations.push_back(b.bytes);
    const auto chunks = ft::plan_save(copier, destinations, 256 << 10);
    // As SnapshotRound does: the regions the copier hashes are not hashed from the landed bytes.
    copier.save(chunks, [&](std::size_t i) {
        const ft::SaveChunk& c = chunks[i];
        if (!copier.hashes_region(c.region)) store.note_written(c.region, c.offset, c.bytes);
    });
    for (std::size_t r = 0; r < 3; ++r)
        if (copier.hashes_region(r)) {
            const auto sum = copier.region_checksum(r);
            REQUIRE(sum);
            CHECK(sum->algorithm == ft::ChecksumAlgorithm::xxh3_64_blocks);
            store.set_checksum(r, *sum);
        }
    CHECK_FALSE(copier.region_checksum(2));
    store.commit();
    CHECK(copier.region_checksum(0)->value == ft::block_checksum(params.data(), params.size()));

    const ft::SnapshotReader reader(job.name(), "dp0.tp0.pp0", layout);
    const auto header = reader.committed_header(1);
    REQUIRE(header);
    CHECK(header->algorithms[0] == ft::ChecksumAlgorithm::xxh3_64_blocks);
    CHECK(header->algorithms[2] == ft::ChecksumAlgorithm::xxh3_64);
    std::vector<std::byte> out0(params.size()), out1(master.size()), out2(adam_t.size());
    const std::vector<std::span<std::byte>> outs{out0, out1, out2};
    const ft::SnapshotView copied = reader.copy_committed(1, outs);
    REQUIRE_MESSAGE(copied.ok, copied.problem);
    CHECK(out0 == params);
    CHECK(out1 == master);
    CHECK(out2 == adam_t);
}

TEST_CASE("a byte that lands wrong after the GPU hashed the state fails verification") {
    ScratchJob job;
    const auto params = random_bytes(1 << 20, 15);
    const DeviceBuffer d_params = on_device(params);
    DeviceSnapshotCopier::Options options;
    options.hash_on_device = true;
    DeviceSnapshotCopier copier({{d_params.data(), params.size()}}, options);
    REQUIRE(copier.hash_on_device());
    ft::SnapshotStore store(job.name(), "dp0.tp0.pp0", {{"params", params.size()}});
    const ft::WriteView view = store.begin_write(1, 0);
    const std::vector<std::span<std::byte>> destinations{view.buffers[0].bytes};
    copier.save(ft::plan_save(copier, destinations, 1 << 18), {});
    store.set_checksum(0, *copier.region_checksum(0));
    view.buffers[0].bytes[12345] ^= std::byte{0x40};  // what a faulty copy or a stray write would do
    store.commit();
    const ft::SnapshotStatus status = store.verify(1);
    CHECK_FALSE(status.ok);
    CHECK(status.problem.find("checksum mismatch") != std::string::npos);
}

TEST_CASE("the GPU hash reads the state after the work marked ready on the trainer's stream") {
    const std::size_t bytes = 8 << 20;
    DeviceBuffer state = DeviceBuffer::allocate(bytes);
    FLASHREC_CUDA_CHECK(cudaMemset(state.data(), 0, bytes));
    DeviceSnapshotCopier::Options options;
    options.hash_on_device = true;
    DeviceSnapshotCopier copier({{state.data(), bytes}}, options);
    Stream compute = Stream::create();
    // The "optimizer": the last write before the state is ready.
    FLASHREC_CUDA_CHECK(cudaMemsetAsync(state.data(), 0x7f, bytes, compute.get()));
    copier.mark_state_ready(compute.get());
    std::vector<std::byte> landed(bytes);
    const std::vector<std::span<std::byte>> destinations{landed};
    copier.save(ft::plan_save(copier, destinations, 1 << 20), {});
    const std::vector<std::byte> expected(bytes, std::byte{0x7f});
    CHECK(landed == expected);
    CHECK(copier.region_checksum(0)->value == ft::block_checksum(expected.data(), bytes));
}

TEST_CASE("without hash_on_device the copier hashes nothing (the host path's checksums)") {
    const auto params = random_bytes(4096, 16);
    const DeviceBuffer d_params = on_device(params);
    DeviceSnapshotCopier copier({{d_params.data(), params.size()}});
    CHECK_FALSE(copier.hash_on_device());
    CHECK_FALSE(copier.hashes_region(0));
    std::vector<std::byte> landed(params.size());
    const std::vector<std::span<std::byte>> destinations{landed};
    copier.save(ft::plan_save(copier, destinations, 4096), {});
    CHECK_FALSE(copier.region_checksum(0));
}

TEST_CASE("the kernel's throughput on 1 GiB (printed; judged by the benchmark, not here)") {
    const std::size_t bytes = std::size_t{1} << 30;
    std::size_t free_bytes = 0, total = 0;
    FLASHREC_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    if (free_bytes < bytes + (bytes >> 8)) {
        std::printf("block_hash: skipped the 1 GiB timing, %zu bytes free\n", free_bytes);
        return;
    }
    DeviceBuffer data = DeviceBuffer::allocate(bytes);
    FLASHREC_CUDA_CHECK(cudaMemset(data.data(), 0x5a, bytes));
    DeviceBuffer digests = DeviceBuffer::allocate(block_digest_count(bytes) * sizeof(std::uint64_t));
    Stream stream = Stream::create();
    Event begin = Event::create(cudaEventDefault), end = Event::create(cudaEventDefault);
    FLASHREC_CUDA_CHECK(launch_block_digests(data.data(), bytes, digests.as<std::uint64_t>(), stream.get()));  // warm-up
    begin.record(stream.get());
    for (int i = 0; i < 5; ++i)
        FLASHREC_CUDA_CHECK(launch_block_digests(data.data(), bytes, digests.as<std::uint64_t>(), stream.get()));
    end.record(stream.get());
    end.synchronize();
    float ms = 0;
    FLASHREC_CUDA_CHECK(cudaEventElapsedTime(&ms, begin.get(), end.get()));
    std::printf("block_hash_GBps=%.1f (1 GiB, mean of 5 launches, %.3f ms each)\n",
                5.0 * static_cast<double>(bytes) / (static_cast<double>(ms) * 1e-3) / 1e9, static_cast<double>(ms) / 5);
}
