// The 3-D example on a GPU (issue 49): DP x TP x PP through the runtime's device collectives.
// Each pipeline stage is one Megatron MLP block (model.hpp): column-parallel W1, row-parallel W2,
// the partial outputs summed by step.tp_allreduce; GPipe-style exchanges between the stages by
// step.pp_send / pp_recv; ZeRO-1 Adam over DP (step.reduce_scatter, step.allgather). With device
// memory (the default) every one of them takes the NCCL path: one communicator per DP, TP and PP
// group, fixed summation order by coordinate, repaired after a failure (docs/gpu.md).
//
//   state                      where                 protected as
//   params [W1 | W2] (float)   device (host: --cpu)  replicated
//   adam_m, adam_v (shard)     device (host: --cpu)  sharded
//   adam_t (int64)             host                  envelope
//
// `--cpu` runs the same model with host buffers (the MPI path; no CUDA call): the CPU version of
// the same shape, which tools/gpu-3d compares loss by loss with the GPU version. Without --cpu it
// exits 77 where there is no CUDA device.
//
// trainer: width (16), hidden (16, a multiple of job.tp), batch_per_rank (8), lr (0.01),
// log_every (10). Prints `step N loss L` every log_every steps (and the last), `loss first F
// last L`, and exactly one line `final_checksum=<hex>`.
#include <flashrec/flashrec.hpp>
#include <flashrec/gpu/cuda_check.hpp>
#include <flashrec/gpu/device.hpp>
#include <flashrec/gpu/handles.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels.hpp"

namespace gpu = flashrec::gpu;

namespace {

// A float buffer in device memory, or in host memory for --cpu.
class Buffer {
public:
    Buffer(bool device, std::size_t count) : count_(count) {
        if (device && count > 0) {
            device_ = gpu::DeviceBuffer::allocate(count * sizeof(float));
            FLASHREC_CUDA_CHECK(cudaMemset(device_.data(), 0, count * sizeof(float)));
            data_ = device_.as<float>();
        } else {
            host_.assign(count, 0.0f);
            data_ = host_.data();
        }
    }
    float* data() const { return data_; }
    std::span<float> span() const { return {data_, count_}; }
    bool on_device() const { return device_.size() > 0; }
    void upload(const float* from, cudaStream_t s) {
        if (on_device())
            FLASHREC_CUDA_CHECK(cudaMemcpyAsync(data_, from, count_ * sizeof(float), cudaMemcpyHostToDevice, s));
        else
            std::memcpy(data_, from, count_ * sizeof(float));
    }
    void download(float* to, cudaStream_t s) const {
        if (on_device()) {
            FLASHREC_CUDA_CHECK(cudaMemcpyAsync(to, data_, count_ * sizeof(float), cudaMemcpyDeviceToHost, s));
            FLASHREC_CUDA_CHECK(cudaStreamSynchronize(s));
        } else {
            std::memcpy(to, data_, count_ * sizeof(float));
        }
    }

private:
    std::size_t count_;
    std::vector<float> host_;
    gpu::DeviceBuffer device_;
    float* data_ = nullptr;
};

// The CPU side of kernels.hpp: the same elements, in a loop.
void cpu_forward(const mlp3d::Dims& d, const float* p, const float* x, float* h, float* z) {
    for (std::size_t t = 0; t < d.batch * d.local; ++t) h[t] = mlp3d::hidden(d, p, x, t / d.local, t % d.local);
    for (std::size_t t = 0; t < d.batch * d.width; ++t) z[t] = mlp3d::output(d, p, h, t / d.width, t % d.width);
}
void cpu_backward(const mlp3d::Dims& d, const float* p, const float* x, const float* h, const float* dz, float* da,
                  float* grads, float* dx) {
    for (std::size_t t = 0; t < d.batch * d.local; ++t) da[t] = mlp3d::grad_a(d, p, dz, h, t / d.local, t % d.local);
    for (std::size_t t = 0; t < d.w1(); ++t) grads[t] = mlp3d::grad_w1(d, da, x, t / d.width, t % d.width);
    for (std::size_t t = d.w1(); t < d.params(); ++t)
        grads[t] = mlp3d::grad_w2(d, dz, h, (t - d.w1()) / d.local, (t - d.w1()) % d.local);
    if (dx != nullptr)
        for (std::size_t t = 0; t < d.batch * d.width; ++t) dx[t] = mlp3d::grad_x(d, p, da, t / d.width, t % d.width);
}

// This role's slice of a stage's full W1 [hidden, width] and W2 [width, hidden], drawn from
// (seed, stage): the same model whatever the TP size.
std::vector<float> initial_params(const mlp3d::Dims& d, std::size_t hidden, int tp_rank, int stage,
                                  std::uint64_t seed) {
    std::mt19937_64 rng(seed * 1000003ULL + static_cast<std::uint64_t>(stage));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> w1(hidden * d.width), w2(d.width * hidden);
    for (auto& w : w1) w = normal(rng) / std::sqrt(static_cast<float>(d.width));
    for (auto& w : w2) w = normal(rng) / std::sqrt(static_cast<float>(hidden));
    std::vector<float> p(d.params());
    const std::size_t j0 = static_cast<std::size_t>(tp_rank) * d.local;
    for (std::size_t j = 0; j < d.local; ++j)
        for (std::size_t i = 0; i < d.width; ++i) p[j * d.width + i] = w1[(j0 + j) * d.width + i];
    for (std::size_t k = 0; k < d.width; ++k)
        for (std::size_t j = 0; j < d.local; ++j) p[d.w1() + k * d.local + j] = w2[k * hidden + j0 + j];
    return p;
}

// The teacher's target for the last stage: y = tanh(T x), T fixed by the seed (host, fixed order).
std::vector<float> teacher(const mlp3d::Dims& d, const std::vector<float>& x, std::uint64_t seed) {
    std::mt19937_64 rng(seed ^ 0x7eac4e5ULL);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> t(d.width * d.width);
    for (auto& w : t) w = 2.0f * normal(rng) / std::sqrt(static_cast<float>(d.width));
    std::vector<float> y(d.batch * d.width);
    for (std::size_t n = 0; n < d.batch; ++n)
        for (std::size_t k = 0; k < d.width; ++k) {
            float acc = 0.0f;
            for (std::size_t i = 0; i < d.width; ++i) acc += t[k * d.width + i] * x[n * d.width + i];
            y[n * d.width + k] = std::tanh(acc);
        }
    return y;
}

}  // namespace

int main(int argc, char** argv) {
    bool cpu = false;
    for (int i = 1; i < argc; ++i) cpu = cpu || std::strcmp(argv[i], "--cpu") == 0;
    // Before the Runtime (hot spares park inside it): no device means nothing to run here.
    if (!cpu && gpu::device_count_or_zero() == 0) {
        std::fprintf(stderr, "mlp3d_trainer: no CUDA device (--cpu runs the CPU version)\n");
        return 77;
    }
    try {
        if (!cpu) {  // the device and its context before the Runtime (docs/gpu.md, "Using it")
            FLASHREC_CUDA_CHECK(cudaSetDevice(gpu::device_for_local_rank(gpu::local_rank_from_env())));
            FLASHREC_CUDA_CHECK(cudaFree(nullptr));
        }
        flashrec::Runtime rt(argc, argv);
        if (!cpu) {
            const int slot_device = gpu::device_for_local_rank(rt.local_slot());
            FLASHREC_CUDA_CHECK(cudaSetDevice(slot_device));
        }
        const auto positive = [&](const std::string& key, std::int64_t fallback) {
            const std::int64_t v = rt.param_int(key, fallback);
            if (v <= 0)
                throw flashrec::ConfigError("train.yaml", 0, "trainer." + key, "must be positive, got " + std::to_string(v));
            return static_cast<std::size_t>(v);
        };
        const std::size_t hidden = positive("hidden", 16);
        const auto tp = static_cast<std::size_t>(rt.tp_size());
        if (hidden % tp != 0)
            throw flashrec::ConfigError("train.yaml", 0, "trainer.hidden",
                                        "must be a multiple of job.tp (" + std::to_string(tp) + ")");
        mlp3d::Dims d;
        d.width = positive("width", 16);
        d.local = hidden / tp;
        d.batch = positive("batch_per_rank", 8);
        const float lr = static_cast<float>(rt.param_double("lr", 0.01));
        const std::int64_t log_every = rt.param_int("log_every", 10);
        const int stage = rt.role().pp, stages = rt.pp_size();
        const bool first = stage == 0, last = stage == stages - 1;

        gpu::Stream stream = cpu ? gpu::Stream() : gpu::Stream::create();
        const cudaStream_t s = stream.get();
        if (!cpu) rt.set_compute_stream(s);

        const std::vector<float> initial = initial_params(d, hidden, rt.role().tp, stage, rt.seed());
        const flashrec::ShardRange mine = rt.shard_range(initial.size());
        const bool device = !cpu;
        Buffer params(device, d.params()), adam_m(device, mine.size()), adam_v(device, mine.size());
        params.upload(initial.data(), s);
        std::vector<std::int64_t> adam_t(1, 0);
        rt.protect("params", params.span(), flashrec::Redundancy::replicated);
        rt.protect("adam_m", adam_m.span(), flashrec::Redundancy::sharded);
        rt.protect("adam_v", adam_v.span(), flashrec::Redundancy::sharded);
        rt.protect("adam_t", std::span(adam_t), flashrec::Redundancy::envelope);

        // Scratch, recomputed every step.
        Buffer x(device, d.batch * d.width), h(device, d.batch * d.local), z(device, d.batch * d.width),
            dz(device, d.batch * d.width), da(device, d.batch * d.local), dx(device, d.batch * d.width),
            grads(device, d.params()), grad_shard(device, mine.size());
        std::vector<float> x_host(d.batch * d.width), z_host(d.batch * d.width), dz_host(d.batch * d.width);
        const float norm = 1.0f / static_cast<float>(d.batch * static_cast<std::size_t>(rt.dp_size()));
        double first_loss = -1, last_loss = -1;

        for (auto step : rt.steps()) {
            // The rows of (step, dp rank): the same on every stage and TP peer of this DP rank.
            std::mt19937_64 rng(step.data_seed());
            std::normal_distribution<float> normal(0.0f, 1.0f);
            for (auto& v : x_host) v = normal(rng);
            // Forward: stage 0 reads the data, the others the previous stage's output.
            if (first) x.upload(x_host.data(), s);
            else step.pp_recv(x.span(), stage - 1);
            if (device) FLASHREC_CUDA_CHECK(mlp3d::forward(d, params.data(), x.data(), h.data(), z.data(), s));
            else cpu_forward(d, params.data(), x.data(), h.data(), z.data());
            step.tp_allreduce(z.span());  // the row-parallel W2's partial sums
            if (!last) step.pp_send(z.span(), stage + 1);
            // The loss at the last stage (host: a few rows), its gradient uploaded.
            std::vector<float> loss{0.0f};
            if (last && !step.abandoned()) {
                z.download(z_host.data(), s);
                const std::vector<float> y = teacher(d, x_host, rt.seed());
                double sum = 0;
                for (std::size_t t = 0; t < z_host.size(); ++t) {
                    dz_host[t] = z_host[t] - y[t];
                    sum += 0.5 * static_cast<double>(dz_host[t]) * dz_host[t];
                }
                loss[0] = static_cast<float>(sum);
                dz.upload(dz_host.data(), s);
            }
            // Backward: the last stage from the loss, the others from the next stage's gradient.
            if (!last) step.pp_recv(dz.span(), stage + 1);
            float* dx_out = first ? nullptr : dx.data();
            if (device)
                FLASHREC_CUDA_CHECK(mlp3d::backward(d, params.data(), x.data(), h.data(), dz.data(), da.data(),
                                                    grads.data(), dx_out, s));
            else
                cpu_backward(d, params.data(), x.data(), h.data(), dz.data(), da.data(), grads.data(), dx_out);
            if (!first) {
                step.tp_allreduce(dx.span());  // the column-parallel W1's partial input gradients
                step.pp_send(dx.span(), stage - 1);
            }
            if (stages > 1 && last) step.pp_send(loss, 0);  // host memory: the MPI path
            if (stages > 1 && first) step.pp_recv(loss, stages - 1);

            step.reduce_scatter(grads.span(), grad_shard.span());  // DP sum by dp coordinate
            step.update([&] {
                const auto t = ++adam_t[0];
                const mlp3d::Adam a{norm, lr, 0.9f, 0.999f, 1e-8f,
                                    1.0f - std::pow(0.9f, static_cast<float>(t)),
                                    1.0f - std::pow(0.999f, static_cast<float>(t))};
                float* p = params.data() + mine.first;
                if (device)
                    FLASHREC_CUDA_CHECK(mlp3d::adam(a, grad_shard.data(), adam_m.data(), adam_v.data(), p, mine.size(), s));
                else
                    for (std::size_t i = 0; i < mine.size(); ++i)
                        mlp3d::adam(a, grad_shard.data()[i], adam_m.data()[i], adam_v.data()[i], p[i]);
            });
            step.allgather(params.span());
            step.allreduce(loss);  // host: the DP sum of the loss
            const double mean_loss = static_cast<double>(loss[0]) * norm;
            step.report_loss(mean_loss);
            if (step.abandoned()) continue;
            if (first_loss < 0) first_loss = mean_loss;
            last_loss = mean_loss;
            if (rt.is_leader() && (step.index() % log_every == 0 || step.index() + 1 == rt.total_steps()))
                std::printf("step %lld loss %.9g\n", static_cast<long long>(step.index()), mean_loss);
        }
        const std::string checksum = rt.state_checksum();
        if (rt.is_leader()) {
            std::printf("loss first %.6f last %.6f\n", first_loss, last_loss);
            std::printf("final_checksum=%s\n", checksum.c_str());
        }
        std::fflush(stdout);
    } catch (const flashrec::ConfigError& e) {
        std::fprintf(stderr, "mlp3d_trainer: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mlp3d_trainer: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
