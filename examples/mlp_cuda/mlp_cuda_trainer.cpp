// The example trainer of examples/mlp on a GPU: the same 2-layer MLP learning the same
// random teacher from the same deterministic data, with ZeRO-1 Adam, but the state and the
// math live on the device:
//
//   state                         where it lives   protected as
//   params (float, full)          device           replicated
//   master (double, shard)        device           sharded
//   adam_m, adam_v (float, shard) device           sharded
//   adam_t (int64)                host             envelope
//   ema (float, trainer.extra_device_mib MiB)
//                                 device           sharded
//
// For benchmarks (bench/gpu/gpu_overhead.py), as examples/mlp's extra_sharded_mib and device_ms:
//   trainer.extra_device_mib (default 0): a device buffer of that many MiB per rank, an
//     exponential moving average of the gradient shard updated every step in update(), so the
//     state to snapshot is large at small compute (and every step changes it);
//   trainer.device_ms (default 0): after the backward pass a kernel on the compute stream keeps
//     the GPU's timeline busy for that many ms (one sleeping thread: it stands for a model's
//     compute, which the snapshot's D2H copy overlaps; it changes no value).
//
// The runtime does the rest (docs/gpu.md): protect() sees device memory, so snapshots are
// cudaMemcpyAsync'd from the device into pinned shared memory, ordered after the work on the
// compute stream the trainer names with set_compute_stream(); after a failure it restores the
// device buffers itself. step.reduce_scatter / allgather on device pointers go through NCCL
// (built from the DP group, aborted when a peer fails, rebuilt after every repair), with the
// CPU path's fixed summation order. The loss is summed on the host, through MPI.
//
// trainer: keys as examples/mlp. Prints the loss and, at the end, exactly one line
// `final_checksum=<hex>`. Exits 77 where there is no CUDA device.
#include <flashrec/flashrec.hpp>
#include <flashrec/gpu/cuda_check.hpp>
#include <flashrec/gpu/device.hpp>
#include <flashrec/gpu/handles.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "mlp_kernels.hpp"

namespace gpu = flashrec::gpu;
using mlp_cuda::Shape;

namespace {

// Same teacher/initialisation as examples/mlp (host code, so the same bits).
std::vector<float> random_mlp(const Shape& s, std::uint64_t seed, float scale) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> p(s.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
        const bool first_layer = i < s.w2();
        p[i] = normal(rng) * scale / std::sqrt(static_cast<float>(first_layer ? s.in : s.hidden));
    }
    return p;
}

template <class T>
void upload(T* device, const T* host, std::size_t count, cudaStream_t stream) {
    if (count == 0) return;
    FLASHREC_CUDA_CHECK(cudaMemcpyAsync(device, host, count * sizeof(T), cudaMemcpyHostToDevice, stream));
}

template <class T>
std::span<T> device_span(const gpu::DeviceBuffer& buffer, std::size_t count) {
    return {buffer.as<T>(), count};
}

}  // namespace

int main(int argc, char** argv) {
    // Before the Runtime: every process (hot spares too, which stay inside the Runtime's
    // constructor until they are needed) leaves at once, and the job ends.
    if (gpu::device_count_or_zero() == 0) {
        std::fprintf(stderr, "mlp_cuda_trainer: no CUDA device\n");
        return 77;
    }
    try {
        // The device (local rank modulo devices) and its CUDA context, also before the Runtime:
        // a hot spare then makes its context while parked, not after a failure, when the
        // survivors' first collective (the NCCL rebuild) would wait for it.
        const int device = gpu::device_for_local_rank(gpu::local_rank_from_env());
        FLASHREC_CUDA_CHECK(cudaSetDevice(device));
        FLASHREC_CUDA_CHECK(cudaFree(nullptr));  // creates the context now
        flashrec::Runtime rt(argc, argv);
        // The GPU of this role's slot on its node: a replacement gets one no live process there
        // uses (the dead role's when it died on this node), which may not be the one a spare
        // picked while parked. Switching makes a context there (docs/gpu.md, "The replacement's GPU").
        if (const int slot_device = gpu::device_for_local_rank(rt.local_slot()); slot_device != device) {
            std::fprintf(stderr, "mlp_cuda_trainer: role %s takes device %d (slot %d), not %d\n",
                         rt.role().key().c_str(), slot_device, rt.local_slot(), device);
            FLASHREC_CUDA_CHECK(cudaSetDevice(slot_device));
        }
        const Shape shape{static_cast<std::size_t>(rt.param_int("model.input", 32)),
                          static_cast<std::size_t>(rt.param_int("model.hidden", 64)),
                          static_cast<std::size_t>(rt.param_int("model.output", 8))};
        const auto batch = static_cast<std::size_t>(rt.param_int("batch_per_rank", 16));
        const double lr = rt.param_double("lr", 3e-3);
        const std::int64_t log_every = rt.param_int("log_every", 10);
        const auto non_negative = [&](const std::string& key) {
            const std::int64_t v = rt.param_int(key, 0);
            if (v < 0) throw flashrec::Error("trainer." + key + " must be >= 0, not " + std::to_string(v));
            return static_cast<std::size_t>(v);
        };
        const std::size_t extra_mib = non_negative("extra_device_mib");
        const std::size_t device_ms = non_negative("device_ms");
        const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;

        // The compute stream, named to the runtime (snapshots are ordered after its work).
        gpu::Stream stream = gpu::Stream::create();
        const cudaStream_t s = stream.get();
        rt.set_compute_stream(s);

        // Initial values on the host (the CPU trainer's bits), then uploaded.
        const std::vector<float> teacher = random_mlp(shape, rt.seed() ^ 0x7eac4e5ULL, 2.0f);
        const std::vector<float> initial = random_mlp(shape, rt.seed(), 1.0f);
        const std::size_t n = initial.size();
        const flashrec::ShardRange mine = rt.shard_range(n);  // captured below
        const std::size_t shard = mine.size();
        const std::vector<double> initial_master(initial.begin() + static_cast<std::ptrdiff_t>(mine.first),
                                                 initial.begin() + static_cast<std::ptrdiff_t>(mine.last));

        const auto floats = [](std::size_t count) { return gpu::DeviceBuffer::allocate(count * sizeof(float)); };
        gpu::DeviceBuffer d_params = floats(n), d_m = floats(shard), d_v = floats(shard),
                          d_master = gpu::DeviceBuffer::allocate(shard * sizeof(double));
        upload(d_params.as<float>(), initial.data(), n, s);
        upload(d_master.as<double>(), initial_master.data(), shard, s);
        if (shard > 0) {
            FLASHREC_CUDA_CHECK(cudaMemsetAsync(d_m.data(), 0, shard * sizeof(float), s));
            FLASHREC_CUDA_CHECK(cudaMemsetAsync(d_v.data(), 0, shard * sizeof(float), s));
        }
        std::vector<std::int64_t> adam_t(1, 0);

        // The state, where it lives: the runtime snapshots and restores it there.
        rt.protect("params", device_span<float>(d_params, n), flashrec::Redundancy::replicated);
        rt.protect("master", device_span<double>(d_master, shard), flashrec::Redundancy::sharded);
        rt.protect("adam_m", device_span<float>(d_m, shard), flashrec::Redundancy::sharded);
        rt.protect("adam_v", device_span<float>(d_v, shard), flashrec::Redundancy::sharded);
        rt.protect("adam_t", std::span(adam_t), flashrec::Redundancy::envelope);
        const std::size_t ema_count = extra_mib * (std::size_t{1} << 20) / sizeof(float);
        gpu::DeviceBuffer d_ema;
        if (ema_count > 0) {
            d_ema = floats(ema_count);
            FLASHREC_CUDA_CHECK(cudaMemsetAsync(d_ema.data(), 0, ema_count * sizeof(float), s));
            rt.protect("ema", device_span<float>(d_ema, ema_count), flashrec::Redundancy::sharded);
        }

        // Scratch (not state: recomputed every step).
        gpu::DeviceBuffer d_teacher = floats(n), d_grads = floats(n), d_grad_shard = floats(shard),
                          d_x = floats(batch * shape.in), d_y = floats(batch * shape.out),
                          d_h = floats(batch * shape.hidden), d_out = floats(batch * shape.out),
                          d_dout = floats(batch * shape.out), d_da = floats(batch * shape.hidden),
                          d_teacher_h = floats(batch * shape.hidden),
                          d_loss = gpu::DeviceBuffer::allocate(batch * sizeof(double));
        upload(d_teacher.as<float>(), teacher.data(), n, s);

        std::vector<float> x;
        std::vector<double> sample_loss(batch);
        const float norm = 1.0f / static_cast<float>(batch * static_cast<std::size_t>(rt.dp_size()));
        double first_loss = -1, last_loss = -1;

        for (auto step : rt.steps()) {
            // The batch of (step, dp rank): the CPU trainer's data, on the host, then uploaded.
            std::mt19937_64 rng(step.data_seed());
            std::normal_distribution<float> normal(0.0f, 1.0f);
            x.resize(batch * shape.in);
            for (auto& v : x) v = normal(rng);
            upload(d_x.as<float>(), x.data(), x.size(), s);
            FLASHREC_CUDA_CHECK(mlp_cuda::forward(shape, d_teacher.as<float>(), d_x.as<float>(),
                                                  d_teacher_h.as<float>(), d_y.as<float>(), batch, s));

            // Forward, loss, backward.
            FLASHREC_CUDA_CHECK(mlp_cuda::forward(shape, d_params.as<float>(), d_x.as<float>(),
                                                  d_h.as<float>(), d_out.as<float>(), batch, s));
            FLASHREC_CUDA_CHECK(mlp_cuda::output_and_hidden_error(
                shape, d_params.as<float>(), d_h.as<float>(), d_out.as<float>(), d_y.as<float>(),
                d_dout.as<float>(), d_da.as<float>(), d_loss.as<double>(), batch, s));
            FLASHREC_CUDA_CHECK(mlp_cuda::parameter_gradients(shape, d_x.as<float>(), d_h.as<float>(),
                                                              d_dout.as<float>(), d_da.as<float>(),
                                                              d_grads.as<float>(), batch, s));
            FLASHREC_CUDA_CHECK(mlp_cuda::busy_wait(device_ms * 1000000ULL, s));

            // The gradient sum over the DP group, in DP-rank order (NCCL moves the parts).
            step.reduce_scatter(device_span<float>(d_grads, n), device_span<float>(d_grad_shard, shard));
            step.update([&] {
                const auto t = ++adam_t[0];
                const mlp_cuda::AdamStep a{norm, lr, beta1, beta2, eps,
                                           1 - std::pow(beta1, static_cast<double>(t)),
                                           1 - std::pow(beta2, static_cast<double>(t))};
                FLASHREC_CUDA_CHECK(mlp_cuda::adam(a, d_grad_shard.as<float>(), d_m.as<float>(),
                                                   d_v.as<float>(), d_master.as<double>(),
                                                   d_params.as<float>() + mine.first, shard, s));
                FLASHREC_CUDA_CHECK(mlp_cuda::ema(d_grad_shard.as<float>(), shard, d_ema.as<float>(),
                                                  ema_count, s));
            });
            step.allgather(device_span<float>(d_params, n));

            // The loss, in sample order on the host (deterministic), summed over the DP group.
            if (batch > 0)
                FLASHREC_CUDA_CHECK(cudaMemcpyAsync(sample_loss.data(), d_loss.data(), batch * sizeof(double),
                                                    cudaMemcpyDeviceToHost, s));
            stream.synchronize();
            double local_loss = 0;
            for (double l : sample_loss) local_loss += l;
            std::vector<float> loss_sum{static_cast<float>(local_loss)};
            step.allreduce(loss_sum);
            const double mean_loss = loss_sum[0] * norm;
            step.report_loss(mean_loss);
            if (step.abandoned()) continue;
            if (first_loss < 0) first_loss = mean_loss;
            last_loss = mean_loss;
            if (rt.is_leader() && (step.index() % log_every == 0 || step.index() + 1 == rt.total_steps()))
                std::printf("step %lld loss %.6f\n", static_cast<long long>(step.index()), mean_loss);
        }
        const std::string checksum = rt.state_checksum();  // the device buffers, copied to the host
        if (rt.is_leader()) {
            std::printf("loss first %.6f last %.6f\n", first_loss, last_loss);
            std::printf("final_checksum=%s\n", checksum.c_str());
        }
        std::fflush(stdout);
    } catch (const flashrec::ConfigError& e) {
        std::fprintf(stderr, "mlp_cuda_trainer: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mlp_cuda_trainer: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
