// A real (small) data-parallel trainer: a 2-layer MLP (tanh hidden layer) learns a fixed random
// "teacher" MLP from synthetic inputs, with a ZeRO-1 Adam optimizer:
//   params  (float, full)              replicated on every DP rank
//   master  (double, this rank's part) sharded: fp64 master weights
//   adam_m, adam_v (float, part)       sharded: Adam moments
//   adam_t  (int64)                    envelope: optimizer step counter
//   ema     (float, trainer.extra_sharded_mib MiB) sharded: an exponential moving average of
//           the gradient shard, to give benchmarks a large optimizer state at small compute
// trainer.device_ms (default 0) makes the step device-like: after its host compute the rank waits
// that long without using a core, as a GPU trainer's host thread waits for its kernels, so that
// benchmarks can measure what protection costs when the host core is free.
// Data for (step, dp rank) come from step.data_seed(), so a replayed step sees the same batch.
// Prints the loss and, at the end, exactly one line `final_checksum=<hex>`.
#include <flashrec/flashrec.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "mlp_shape.hpp"

namespace {

using mlp::Shape;

// One sample through the MLP `p`: hidden activations `h`, outputs `out`.
void forward(const Shape& s, const std::vector<float>& p, const float* x, float* h, float* out) {
    for (std::size_t j = 0; j < s.hidden; ++j) {
        float a = p[s.b1() + j];
        for (std::size_t i = 0; i < s.in; ++i) a += p[s.w1() + j * s.in + i] * x[i];
        h[j] = std::tanh(a);
    }
    for (std::size_t k = 0; k < s.out; ++k) {
        float a = p[s.b2() + k];
        for (std::size_t j = 0; j < s.hidden; ++j) a += p[s.w2() + k * s.hidden + j] * h[j];
        out[k] = a;
    }
}

// Loss and gradient (accumulated into `grad`) of the MSE of the MLP `p` on a batch.
double loss_and_grad(const Shape& s, const std::vector<float>& p, const std::vector<float>& x,
                     const std::vector<float>& y, std::size_t batch, std::vector<float>& g) {
    std::vector<float> h(s.hidden), out(s.out), dout(s.out), dh(s.hidden);
    double loss = 0;
    for (std::size_t n = 0; n < batch; ++n) {
        const float* xn = &x[n * s.in];
        forward(s, p, xn, h.data(), out.data());
        for (std::size_t k = 0; k < s.out; ++k) {
            const float diff = out[k] - y[n * s.out + k];
            loss += 0.5 * static_cast<double>(diff) * diff;
            dout[k] = diff;
        }
        for (std::size_t j = 0; j < s.hidden; ++j) dh[j] = 0;
        for (std::size_t k = 0; k < s.out; ++k) {
            g[s.b2() + k] += dout[k];
            for (std::size_t j = 0; j < s.hidden; ++j) {
                g[s.w2() + k * s.hidden + j] += dout[k] * h[j];
                dh[j] += dout[k] * p[s.w2() + k * s.hidden + j];
            }
        }
        for (std::size_t j = 0; j < s.hidden; ++j) {
            const float da = dh[j] * (1 - h[j] * h[j]);
            g[s.b1() + j] += da;
            for (std::size_t i = 0; i < s.in; ++i) g[s.w1() + j * s.in + i] += da * xn[i];
        }
    }
    return loss;
}

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

}  // namespace

int main(int argc, char** argv) {
    try {
        flashrec::Runtime rt(argc, argv);
        const Shape shape{static_cast<std::size_t>(rt.param_int("model.input", 32)),
                          static_cast<std::size_t>(rt.param_int("model.hidden", 64)),
                          static_cast<std::size_t>(rt.param_int("model.output", 8))};
        const auto batch = static_cast<std::size_t>(rt.param_int("batch_per_rank", 16));
        const double lr = rt.param_double("lr", 3e-3);
        const std::int64_t log_every = rt.param_int("log_every", 10);
        const std::chrono::milliseconds device_time{rt.param_int("device_ms", 0)};
        // Tests only: the mistake replay checking catches. The batch comes from how many steps this
        // process ran, not from step.data_seed() alone: the same in a run without failures, other
        // data when a repair replays steps (docs/snapshots.md, "Checking that replay is exact").
        const bool data_from_counter = rt.param_int("data_from_counter", 0) != 0;
        std::uint64_t steps_run = 0;
        const double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;

        const std::vector<float> teacher = random_mlp(shape, rt.seed() ^ 0x7eac4e5ULL, 2.0f);
        std::vector<float> params = random_mlp(shape, rt.seed(), 1.0f);
        const flashrec::ShardRange mine = rt.shard_range(params.size());  // captured below
        std::vector<double> master(params.begin() + static_cast<std::ptrdiff_t>(mine.first),
                                   params.begin() + static_cast<std::ptrdiff_t>(mine.last));
        std::vector<float> adam_m(mine.size(), 0.0f), adam_v(mine.size(), 0.0f);
        std::vector<std::int64_t> adam_t(1, 0);
        rt.protect("params", std::span(params), flashrec::Redundancy::replicated);
        rt.protect("master", std::span(master), flashrec::Redundancy::sharded);
        rt.protect("adam_m", std::span(adam_m), flashrec::Redundancy::sharded);
        rt.protect("adam_v", std::span(adam_v), flashrec::Redundancy::sharded);
        rt.protect("adam_t", std::span(adam_t), flashrec::Redundancy::envelope);
        const auto extra_mib = rt.param_int("extra_sharded_mib", 0);
        std::vector<float> ema(static_cast<std::size_t>(extra_mib) * (1 << 20) / sizeof(float), 0.0f);
        if (!ema.empty()) rt.protect("ema", std::span(ema), flashrec::Redundancy::sharded);

        std::vector<float> grads(params.size()), grad_shard(mine.size()), x, y, hidden(shape.hidden);
        const float norm = 1.0f / static_cast<float>(batch * static_cast<std::size_t>(rt.dp_size()));
        double first_loss = -1, last_loss = -1;
        for (auto step : rt.steps()) {
            std::mt19937_64 rng(data_from_counter ? step.data_seed() ^ (steps_run++ - static_cast<std::uint64_t>(step.index()))
                                                  : step.data_seed());
            std::normal_distribution<float> normal(0.0f, 1.0f);
            x.resize(batch * shape.in);
            for (auto& v : x) v = normal(rng);
            y.resize(batch * shape.out);
            for (std::size_t n = 0; n < batch; ++n)
                forward(shape, teacher, &x[n * shape.in], hidden.data(), &y[n * shape.out]);
            std::fill(grads.begin(), grads.end(), 0.0f);
            const double local_loss = loss_and_grad(shape, params, x, y, batch, grads);
            if (device_time.count() > 0) std::this_thread::sleep_for(device_time);

            step.reduce_scatter(grads, grad_shard);
            step.update([&] {
                const auto t = ++adam_t[0];
                const double c1 = 1 - std::pow(beta1, static_cast<double>(t));
                const double c2 = 1 - std::pow(beta2, static_cast<double>(t));
                for (std::size_t i = 0; i < master.size(); ++i) {
                    const float g = grad_shard[i] * norm;
                    adam_m[i] = static_cast<float>(beta1 * adam_m[i] + (1 - beta1) * g);
                    adam_v[i] = static_cast<float>(beta2 * adam_v[i] + (1 - beta2) * g * g);
                    master[i] -= lr * (adam_m[i] / c1) / (std::sqrt(adam_v[i] / c2) + eps);
                    params[mine.first + i] = static_cast<float>(master[i]);
                }
                for (std::size_t i = 0; i < ema.size() && !grad_shard.empty(); ++i)
                    ema[i] = 0.9f * ema[i] + 0.1f * grad_shard[i % grad_shard.size()];
            });
            step.allgather(params);

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
        const std::string checksum = rt.state_checksum();
        if (rt.is_leader()) {
            std::printf("loss first %.6f last %.6f\n", first_loss, last_loss);
            std::printf("final_checksum=%s\n", checksum.c_str());
        }
        std::fflush(stdout);
    } catch (const flashrec::ConfigError& e) {
        std::fprintf(stderr, "mlp_trainer: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "mlp_trainer: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
