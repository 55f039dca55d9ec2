// A small GPT trained with 3-D parallelism on the CPU, kept alive by flashrec:
//   DP   ZeRO-1: every DP rank holds the role's full parameters (replicated), and its own part
//        of the fp64 master weights and AdamW moments (sharded). Gradients are averaged over DP
//        with an in-place reduce-scatter; the updated parts are all-gathered.
//   TP   Megatron column/row-parallel attention and MLP (model.hpp); their sums go through
//        Step::tp_allreduce.
//   PP   GPipe: every stage runs all micro-batches forward, then all backward; activations and
//        gradients move between stages through Step::pp_send / pp_recv.
// Every sum runs in a fixed order (the kernels are single-threaded loops; flashrec's
// collectives add by coordinate), so a run is bitwise reproducible, independent of where the
// roles run, and a recovered run ends bitwise identical to one that never failed.
// Data: each micro-batch's token sequences come from step.data_seed() (model.hpp).
// Prints the loss and, at the end, exactly one line `final_checksum=<hex>`.
#include <flashrec/flashrec.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model.hpp"

namespace {

std::size_t size_param(const flashrec::Runtime& rt, const std::string& key, std::int64_t fallback) {
    const std::int64_t v = rt.param_int(key, fallback);
    if (v <= 0) throw flashrec::ConfigError("train.yaml", 0, "trainer." + key, "must be positive, got " + std::to_string(v));
    return static_cast<std::size_t>(v);
}

void require(bool ok, const std::string& field, const std::string& problem) {
    if (!ok) throw flashrec::ConfigError("train.yaml", 0, field, problem);
}

}  // namespace

int main(int argc, char** argv) {
    try {
        flashrec::Runtime rt(argc, argv);
        gpt::Config c;
        c.vocab = size_param(rt, "model.vocab", 64);
        c.seq = size_param(rt, "model.seq", 16);
        c.d_model = size_param(rt, "model.d_model", 32);
        c.heads = size_param(rt, "model.heads", 4);
        c.layers = size_param(rt, "model.layers", 2);
        c.mlp = size_param(rt, "model.mlp", 4 * c.d_model);
        c.batch = size_param(rt, "batch_per_micro", 2);
        c.tp = rt.tp_size(), c.pp = rt.pp_size();
        c.tp_rank = rt.role().tp, c.stage = rt.role().pp;
        require(c.d_model % c.heads == 0, "trainer.model.d_model", "must be a multiple of model.heads");
        require(c.heads % static_cast<std::size_t>(c.tp) == 0, "trainer.model.heads", "must be a multiple of job.tp");
        require(c.mlp % static_cast<std::size_t>(c.tp) == 0, "trainer.model.mlp", "must be a multiple of job.tp");
        require(c.layers % static_cast<std::size_t>(c.pp) == 0, "trainer.model.layers", "must be a multiple of job.pp");
        const std::size_t micro = size_param(rt, "micro_batches", 2);
        const double lr = rt.param_double("lr", 3e-3), weight_decay = rt.param_double("weight_decay", 0.01);
        const std::int64_t log_every = rt.param_int("log_every", 10);
        const double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;

        // State: the same code on every process, replacements included (user-guide.md, rule 3).
        const gpt::Layout layout = gpt::make_layout(c);
        const gpt::Stage stage(c, layout);
        std::vector<float> params = gpt::init_params(c, layout, rt.seed());
        const flashrec::ShardRange shard = rt.shard_range(params.size());  // this DP role's ZeRO-1 part
        std::vector<double> master(params.begin() + static_cast<std::ptrdiff_t>(shard.first),
                                   params.begin() + static_cast<std::ptrdiff_t>(shard.last));
        std::vector<float> adam_m(shard.size(), 0.0f), adam_v(shard.size(), 0.0f);
        std::vector<std::int64_t> adam_t(1, 0);
        rt.protect("params", std::span(params), flashrec::Redundancy::replicated);
        rt.protect("master", std::span(master), flashrec::Redundancy::sharded);
        rt.protect("adam_m", std::span(adam_m), flashrec::Redundancy::sharded);
        rt.protect("adam_v", std::span(adam_v), flashrec::Redundancy::sharded);
        rt.protect("adam_t", std::span(adam_t), flashrec::Redundancy::envelope);

        const int prev = c.stage - 1, next = c.stage + 1;
        const std::size_t rows = c.tokens() * c.d_model;
        const float scale = 1.0f / static_cast<float>(micro * c.tokens());  // mean over this rank's tokens
        std::vector<float> grads(params.size()), act(rows), grad_in(rows);
        std::vector<gpt::MicroBatch> mbs(micro);
        double first_loss = -1, last_loss = -1;
        for (auto step : rt.steps()) {
            const gpt::TpSum tp_sum = [&](std::span<float> x) { step.tp_allreduce(x); };
            std::fill(grads.begin(), grads.end(), 0.0f);
            // Forward, all micro-batches: stage 0 embeds, the others receive activations.
            double loss_sum = 0;
            for (std::size_t m = 0; m < micro; ++m) {
                gpt::make_micro_batch(c, step.data_seed() + m, mbs[m].tokens, mbs[m].targets);
                if (!c.first()) step.pp_recv(act, prev);
                loss_sum += stage.forward(params.data(), grads.data(), mbs[m], act, scale, tp_sum);
                if (!c.last()) step.pp_send(mbs[m].out, next);
                if (step.abandoned()) break;  // a peer failed: nothing of this step counts
            }
            // Backward, all micro-batches in the same order: gradients accumulate in fixed order.
            for (std::size_t m = 0; m < micro && !step.abandoned(); ++m) {
                if (c.last()) grad_in = mbs[m].dout;
                else step.pp_recv(grad_in, next);
                stage.backward(params.data(), grads.data(), mbs[m], grad_in, tp_sum);
                if (!c.first()) step.pp_send(grad_in, prev);
            }
            // The loss lives on the last stage; stage 0 (where role 0 is) reports it.
            std::vector<float> loss{static_cast<float>(loss_sum * scale)};
            if (c.pp > 1 && c.last()) step.pp_send(loss, 0);
            if (c.pp > 1 && c.first()) step.pp_recv(loss, c.pp - 1);

            step.reduce_scatter(grads, flashrec::Reduce::mean);  // DP mean, in place: my part
            step.update([&] {
                const auto t = ++adam_t[0];
                const double c1 = 1 - std::pow(beta1, static_cast<double>(t));
                const double c2 = 1 - std::pow(beta2, static_cast<double>(t));
                for (std::size_t i = 0; i < master.size(); ++i) {
                    const float g = grads[shard.first + i];
                    adam_m[i] = static_cast<float>(beta1 * adam_m[i] + (1 - beta1) * g);
                    adam_v[i] = static_cast<float>(beta2 * adam_v[i] + (1 - beta2) * g * g);
                    master[i] -= lr * ((adam_m[i] / c1) / (std::sqrt(adam_v[i] / c2) + eps) +
                                       weight_decay * master[i]);
                    params[shard.first + i] = static_cast<float>(master[i]);
                }
            });
            step.allgather(params);
            step.allreduce(loss, flashrec::Reduce::mean);  // over DP: the global mean loss
            step.report_loss(loss[0]);
            if (step.abandoned()) continue;
            if (first_loss < 0) first_loss = loss[0];
            last_loss = loss[0];
            if (rt.is_leader() && (step.index() % log_every == 0 || step.index() + 1 == rt.total_steps()))
                std::printf("step %lld loss %.6f\n", static_cast<long long>(step.index()), static_cast<double>(loss[0]));
        }
        const std::string checksum = rt.state_checksum();
        if (rt.is_leader()) {
            std::printf("loss first %.6f last %.6f\n", first_loss, last_loss);
            std::printf("final_checksum=%s\n", checksum.c_str());
        }
        std::fflush(stdout);
    } catch (const flashrec::ConfigError& e) {
        std::fprintf(stderr, "gpt_trainer: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gpt_trainer: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
