// Reference copy bandwidths of device 0 for the GPU protection benchmark (bench/gpu/gpu_overhead.py),
// measured in the same run as the trainer jobs:
//
//   bench_cuda_copy BYTES [CHUNK_BYTES]
//
//   cuda_d2h_pinned_GBps    one cudaMemcpyAsync of BYTES, device -> page-locked host memory
//                           (cudaMallocHost): what the copy engine does at best;
//   cuda_d2h_pageable_GBps  the same into ordinary (pageable, pre-faulted) host memory: CUDA
//                           stages it through a bounce buffer, synchronously;
//   cuda_h2d_pinned_GBps    pinned host -> device (what a restore does);
//   cuda_d2h_chunked_GBps   BYTES device -> pinned as the snapshot copier does it: one
//                           cudaMemcpyAsync per CHUNK_BYTES piece (default 256 KiB, the
//                           protection.chunk_bytes default), an event recorded after each.
//   cuda_block_hash_GBps    the GPU hash's kernel alone over BYTES of device memory (the block
//                           digests of protection.device_hash: docs/gpu.md, "The hash on the GPU").
//   host_xxh3_GBps, host_block_checksum_GBps  the host's XXH3-64 and its block checksum (the
//                           reference a restore verifies GPU-hashed buffers with) over BYTES of
//                           pinned memory, one thread, median of 3 (not cached: BYTES >> cache).
//
// Each figure is the median of 7 timed copies after one warm-up, timed with CUDA events on a
// stream of its own. Prints `device=<name> cc=<major.minor> memory_GiB=<total>` and then one
// line `cuda_d2h_pinned_GBps=X cuda_d2h_pageable_GBps=Y cuda_h2d_pinned_GBps=Z
// cuda_d2h_chunked_GBps=W bytes=N chunk_bytes=C`. Exits 77 without a CUDA device, 2 on bad
// arguments.
#include <flashrec/ft/checksum.hpp>
#include <flashrec/gpu/block_hash.hpp>
#include <flashrec/gpu/cuda_check.hpp>
#include <flashrec/gpu/device.hpp>
#include <flashrec/gpu/handles.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace gpu = flashrec::gpu;
namespace ft = flashrec::ft;

namespace {

constexpr int kRuns = 7;

std::optional<std::size_t> parse_bytes(const char* text) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v == 0 || text[0] == '-') return std::nullopt;
    return static_cast<std::size_t>(v);
}

// The median GB/s of kRuns timed runs of `enqueue` on `stream`, after one untimed warm-up.
double median_gbps(std::size_t bytes, cudaStream_t stream, const std::function<void()>& enqueue) {
    gpu::Event start = gpu::Event::create(cudaEventDefault), stop = gpu::Event::create(cudaEventDefault);
    enqueue();
    FLASHREC_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<double> gbps;
    for (int i = 0; i < kRuns; ++i) {
        start.record(stream);
        enqueue();
        stop.record(stream);
        stop.synchronize();
        float ms = 0;
        FLASHREC_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
        gbps.push_back(ms > 0 ? static_cast<double>(bytes) / (static_cast<double>(ms) * 1e-3) / 1e9 : 0.0);
    }
    std::nth_element(gbps.begin(), gbps.begin() + kRuns / 2, gbps.end());
    return gbps[kRuns / 2];
}

}  // namespace

int main(int argc, char** argv) {
    const std::optional<std::size_t> bytes = argc > 1 ? parse_bytes(argv[1]) : std::nullopt;
    const std::optional<std::size_t> chunk = argc > 2 ? parse_bytes(argv[2]) : std::optional<std::size_t>(256 << 10);
    if (argc < 2 || argc > 3 || !bytes || !chunk) {
        std::fprintf(stderr, "usage: bench_cuda_copy BYTES [CHUNK_BYTES]  (positive integers)\n");
        return 2;
    }
    if (gpu::device_count_or_zero() == 0) {
        std::fprintf(stderr, "bench_cuda_copy: no CUDA device (nothing measured)\n");
        return 77;
    }
    try {
        FLASHREC_CUDA_CHECK(cudaSetDevice(0));
        cudaDeviceProp prop{};
        FLASHREC_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        std::printf("device=%s cc=%d.%d memory_GiB=%.1f\n", prop.name, prop.major, prop.minor,
                    static_cast<double>(prop.totalGlobalMem) / (1 << 30));
        std::fflush(stdout);

        const std::size_t n = *bytes;
        gpu::Stream stream = gpu::Stream::create();
        const cudaStream_t s = stream.get();
        gpu::DeviceBuffer device = gpu::DeviceBuffer::allocate(n);
        FLASHREC_CUDA_CHECK(cudaMemsetAsync(device.data(), 1, n, s));
        gpu::PinnedHostBuffer pinned = gpu::PinnedHostBuffer::allocate(n);
        std::memset(pinned.data(), 0, n);
        const auto pageable = std::make_unique<std::byte[]>(n);
        std::memset(pageable.get(), 0, n);  // faulted in: the copy measures the staging, not page faults

        const auto copy = [&](void* dst, const void* src, cudaMemcpyKind kind) {
            return [=] { FLASHREC_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, kind, s)); };
        };
        const double d2h_pinned = median_gbps(n, s, copy(pinned.data(), device.data(), cudaMemcpyDeviceToHost));
        const double d2h_pageable =
            median_gbps(n, s, copy(pageable.get(), device.data(), cudaMemcpyDeviceToHost));
        const double h2d_pinned = median_gbps(n, s, copy(device.data(), pinned.data(), cudaMemcpyHostToDevice));
        // As gpu::DeviceSnapshotCopier::start does: a copy and an event per chunk.
        std::vector<gpu::Event> events;
        for (std::size_t off = 0; off < n; off += *chunk) events.push_back(gpu::Event::create());
        const double d2h_chunked = median_gbps(n, s, [&] {
            std::size_t i = 0;
            for (std::size_t off = 0; off < n; off += *chunk, ++i) {
                FLASHREC_CUDA_CHECK(cudaMemcpyAsync(pinned.data() + off, device.as<std::byte>() + off,
                                                    std::min(*chunk, n - off), cudaMemcpyDeviceToHost, s));
                events[i].record(s);
            }
        });
        gpu::DeviceBuffer digests = gpu::DeviceBuffer::allocate(gpu::block_digest_count(n) * sizeof(std::uint64_t));
        const double block_hash = median_gbps(n, s, [&] {
            FLASHREC_CUDA_CHECK(gpu::launch_block_digests(device.data(), n, digests.as<std::uint64_t>(), s));
        });
        std::printf("cuda_d2h_pinned_GBps=%.2f cuda_d2h_pageable_GBps=%.2f cuda_h2d_pinned_GBps=%.2f "
                    "cuda_d2h_chunked_GBps=%.2f cuda_block_hash_GBps=%.2f bytes=%zu chunk_bytes=%zu\n",
                    d2h_pinned, d2h_pageable, h2d_pinned, d2h_chunked, block_hash, n, *chunk);
        std::fflush(stdout);
        const auto host_gbps = [&](auto&& hash) {
            std::vector<double> rates;
            for (int i = 0; i < 3; ++i) {
                const auto t = std::chrono::steady_clock::now();
                volatile std::uint64_t sink = hash(pinned.data(), n);
                (void)sink;
                rates.push_back(static_cast<double>(n) /
                                std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count() / 1e9);
            }
            std::sort(rates.begin(), rates.end());
            return rates[1];
        };
        std::printf("host_xxh3_GBps=%.2f host_block_checksum_GBps=%.2f\n",
                    host_gbps([](const void* p, std::size_t b) { return ft::checksum(p, b); }),
                    host_gbps([](const void* p, std::size_t b) { return ft::block_checksum(p, b); }));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_cuda_copy: %s\n", e.what());
        return 1;
    }
    return 0;
}
