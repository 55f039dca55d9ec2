// The runtime's two paths for protected state and DP collectives, checked bitwise against a
// sum computed here in the documented order (by DP rank):
//
//   --mode host     host buffers, host collectives: the CPU path (label ft, no GPU). Also: the
//                   runtime chose the host copier, and no CUDA context was made in the process.
//   --mode stream   the same after set_compute_stream(nullptr): naming a stream does not move
//                   host buffers off the CPU path (label ft, no GPU).
//   --mode device   the state in device memory, collectives on device pointers (NCCL): the
//                   runtime chose the CUDA copier, and reduce_scatter/allgather/allreduce give
//                   the same bits as the host path (label gpu; exits 77 without a device).
//
// Every mode registers the same names and bytes, so their final_checksum lines must agree
// (tests/gpu/CMakeLists.txt compares the device run with the host run).
// Prints "OK rank <r>: ..." per check passed, "FAIL rank <r>: ..." otherwise, then DONE.
#include <flashrec/flashrec.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "flashrec/gpu/cuda_check.hpp"
#include "flashrec/gpu/device.hpp"
#include "flashrec/gpu/handles.hpp"

namespace gpu = flashrec::gpu;

namespace {

int failures = 0;
int my_rank = -1;

void report(bool ok, const std::string& what) {
    std::printf("%s rank %d: %s\n", ok ? "OK" : "FAIL", my_rank, what.c_str());
    std::fflush(stdout);
    if (!ok) ++failures;
}

// DP rank j's gradient at step s: deterministic, different per rank and element, with
// magnitudes that make float addition order visible.
float gradient(std::int64_t step, int j, std::size_t i) {
    const double x = std::sin(static_cast<double>(step) * 31.0 + j * 7.0 + static_cast<double>(i) * 0.37);
    return static_cast<float>(x * std::pow(10.0, static_cast<double>((i + static_cast<std::size_t>(j)) % 7) - 3.0));
}

// The full sum in DP-rank order, element by element: what the runtime promises on both paths.
std::vector<float> ordered_sum(std::int64_t step, int dp, std::size_t n) {
    std::vector<float> sum(n);
    for (std::size_t i = 0; i < n; ++i) {
        float s = gradient(step, 0, i);
        for (int j = 1; j < dp; ++j) s += gradient(step, j, i);
        sum[i] = s;
    }
    return sum;
}

bool same_bits(const float* a, const float* b, std::size_t n) {
    return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}

template <class T>
void upload(void* device, const T* host, std::size_t count) {
    if (count > 0) FLASHREC_CUDA_CHECK(cudaMemcpy(device, host, count * sizeof(T), cudaMemcpyHostToDevice));
}
template <class T>
void download(T* host, const void* device, std::size_t count) {
    if (count > 0) FLASHREC_CUDA_CHECK(cudaMemcpy(host, device, count * sizeof(T), cudaMemcpyDeviceToHost));
}

}  // namespace

int main(int argc, char** argv) {
    std::string mode = "host";
    for (int i = 1; i + 1 < argc; ++i)
        if (std::string(argv[i]) == "--mode") mode = argv[i + 1];
    const bool on_gpu = mode == "device";
    if (mode != "host" && mode != "stream" && !on_gpu) {
        std::fprintf(stderr, "gpu_runtime_paths: --mode host|stream|device\n");
        return 2;
    }
    if (on_gpu && gpu::device_count_or_zero() == 0) {
        std::printf("SKIP: no CUDA device\n");
        return 77;
    }
    try {
        flashrec::Runtime rt(argc, argv);
        my_rank = rt.role().dp;
        const int dp = rt.dp_size();
        const std::size_t n = 1000 + 7;  // not a multiple of dp: uneven parts
        const flashrec::ShardRange mine = rt.shard_range(n);  // captured below
        const std::size_t first = mine.first, shard = mine.size();

        // The state every mode protects under the same names: params (replicated), master
        // (sharded), steps (envelope, always on the host).
        std::vector<float> params(n);
        for (std::size_t i = 0; i < n; ++i) params[i] = static_cast<float>(i % 13) * 0.25f;
        std::vector<double> master(params.begin() + static_cast<std::ptrdiff_t>(first),
                                   params.begin() + static_cast<std::ptrdiff_t>(mine.last));
        std::vector<std::int64_t> steps_done(1, 0);

        gpu::DeviceBuffer d_params, d_master, d_grads, d_shard, d_loss;
        gpu::Stream stream;
        if (on_gpu) {
            FLASHREC_CUDA_CHECK(cudaSetDevice(gpu::device_for_local_rank(gpu::local_rank_from_env())));
            stream = gpu::Stream::create();
            rt.set_compute_stream(stream.get());
            d_params = gpu::DeviceBuffer::allocate(n * sizeof(float));
            d_master = gpu::DeviceBuffer::allocate(shard * sizeof(double));
            d_grads = gpu::DeviceBuffer::allocate(n * sizeof(float));
            d_shard = gpu::DeviceBuffer::allocate(shard * sizeof(float));
            d_loss = gpu::DeviceBuffer::allocate(3 * sizeof(float));
            upload(d_params.data(), params.data(), n);
            upload(d_master.data(), master.data(), shard);
            rt.protect("params", std::span(d_params.as<float>(), n), flashrec::Redundancy::replicated);
            rt.protect("master", std::span(d_master.as<double>(), shard), flashrec::Redundancy::sharded);
        } else {
            if (mode == "stream") rt.set_compute_stream(nullptr);
            rt.protect("params", std::span(params), flashrec::Redundancy::replicated);
            rt.protect("master", std::span(master), flashrec::Redundancy::sharded);
        }
        rt.protect("steps", std::span(steps_done), flashrec::Redundancy::envelope);
        report(rt.on_device("params") == on_gpu && rt.on_device("master") == on_gpu && !rt.on_device("steps"),
               std::string("protect() placed the buffers: ") + (on_gpu ? "device, device, host" : "host, host, host"));

        bool sums_ok = true, gathers_ok = true, allreduce_ok = true, copier_ok = true;
        std::string copier_seen;
        std::vector<float> grads(n), grad_shard(shard), expected_params = params, loss(3);
        std::vector<double> all_master(params.begin(), params.end());  // every owner's master
        for (auto step : rt.steps()) {
            if (copier_seen.empty()) {
                copier_seen = rt.snapshot_copier();
                copier_ok = copier_seen == (on_gpu ? "cuda" : "host");
            }
            for (std::size_t i = 0; i < n; ++i) grads[i] = gradient(step.index(), my_rank, i);
            const std::vector<float> want = ordered_sum(step.index(), dp, n);

            if (on_gpu) {
                upload(d_grads.data(), grads.data(), n);
                step.reduce_scatter(std::span(d_grads.as<const float>(), n), std::span(d_shard.as<float>(), shard));
                stream.synchronize();
                download(grad_shard.data(), d_shard.data(), shard);
            } else {
                step.reduce_scatter(grads, grad_shard);
            }
            if (step.abandoned()) continue;
            sums_ok = sums_ok && same_bits(grad_shard.data(), want.data() + first, shard);

            step.update([&] {
                ++steps_done[0];
                for (std::size_t i = 0; i < shard; ++i) {
                    master[i] -= 0.01 * grad_shard[i];
                    params[first + i] = static_cast<float>(master[i]);
                }
                if (on_gpu) {
                    upload(d_master.data(), master.data(), shard);
                    upload(d_params.as<float>() + first, params.data() + first, shard);
                }
            });
            // What every rank's parameters must be after the allgather: each part updated by
            // its owner, from the same ordered sum, the same way.
            for (std::size_t i = 0; i < n; ++i) {
                all_master[i] -= 0.01 * want[i];
                expected_params[i] = static_cast<float>(all_master[i]);
            }
            if (on_gpu) {
                step.allgather(std::span(d_params.as<float>(), n));
                stream.synchronize();
                download(params.data(), d_params.data(), n);
            } else {
                step.allgather(params);
            }
            gathers_ok = gathers_ok && same_bits(params.data(), expected_params.data(), n);

            for (std::size_t k = 0; k < loss.size(); ++k) loss[k] = gradient(step.index() + 100, my_rank, k);
            std::vector<float> want_loss(loss.size());
            for (std::size_t k = 0; k < loss.size(); ++k) {
                float s = gradient(step.index() + 100, 0, k);
                for (int j = 1; j < dp; ++j) s += gradient(step.index() + 100, j, k);
                want_loss[k] = s;
            }
            if (on_gpu) {
                upload(d_loss.data(), loss.data(), loss.size());
                step.allreduce(std::span(d_loss.as<float>(), loss.size()));
                stream.synchronize();
                download(loss.data(), d_loss.data(), loss.size());
            } else {
                step.allreduce(loss);
            }
            allreduce_ok = allreduce_ok && same_bits(loss.data(), want_loss.data(), loss.size());
        }
        report(copier_ok, "snapshots copy with the '" + copier_seen + "' copier");
        report(sums_ok, "reduce_scatter: every shard has the DP-rank-order sum, bit for bit");
        report(gathers_ok, "allgather: every rank has every owner's parameters, bit for bit");
        report(allreduce_ok, "allreduce: the DP-rank-order sum on every rank, bit for bit");
        if (!on_gpu) report(!gpu::cuda_in_use(), "the CPU path made no CUDA context");

        const std::string checksum = rt.state_checksum();
        if (on_gpu) {
            // The device state is what this process computed on the host.
            std::vector<float> device_params(n);
            download(device_params.data(), d_params.data(), n);
            report(same_bits(device_params.data(), params.data(), n), "the device buffers hold the state");
        }
        if (rt.is_leader()) std::printf("final_checksum=%s\n", checksum.c_str());
    } catch (const std::exception& e) {
        report(false, std::string("error: ") + e.what());
    }
    if (failures == 0) std::printf("DONE rank %d\n", my_rank);
    std::fflush(stdout);
    return failures == 0 ? 0 : 1;
}
