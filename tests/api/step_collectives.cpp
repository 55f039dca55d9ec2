// The Step collectives for 3-D parallel trainers, checked bitwise against sums computed here in
// the documented order (by coordinate), on a dp x tp x pp job:
//   tp_allreduce, tp_allgather, pp_send / pp_recv (both directions), the in-place and the
//   averaged reduce_scatter, allreduce(Reduce::mean), and the typed errors for bad arguments.
//   --abandon-at <step>: role (dp 1, tp 1, pp 1) abandons that step once (Step::abandon); the
//   loop must repair and repeat it, and the job must end with the final_checksum of a run
//   without it (tests/CMakeLists.txt compares the two).
// Prints "OK rank <r>: ..." per check passed, "FAIL rank <r>: ..." otherwise, then DONE.
#include <flashrec/flashrec.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace {

int world_rank = -1;
std::map<std::string, bool> checks;  // check -> every step passed

void check(bool ok, const std::string& what) {
    auto [it, fresh] = checks.emplace(what, ok);
    if (!fresh) it->second = it->second && ok;
}

// Contribution of coordinate (dp, tp, pp) at step s, element i: magnitudes that make the
// order of float additions visible.
float value(std::int64_t s, int dp, int tp, int pp, std::size_t i) {
    const double x = std::sin(static_cast<double>(s) * 31.0 + dp * 7.0 + tp * 3.3 + pp * 1.9 +
                              static_cast<double>(i) * 0.37);
    return static_cast<float>(x * std::pow(10.0, static_cast<double>((i + static_cast<std::size_t>(dp + tp)) % 7) - 3.0));
}

std::vector<float> values(std::int64_t s, int dp, int tp, int pp, std::size_t n) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = value(s, dp, tp, pp, i);
    return v;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

template <class F>
bool throws_error(F&& f) {
    try {
        f();
    } catch (const flashrec::Error&) {
        return true;
    }
    return false;
}

}  // namespace

int main(int argc, char** argv) {
    std::int64_t abandon_at = -1;
    for (int i = 1; i + 1 < argc; ++i)
        if (std::string(argv[i]) == "--abandon-at") abandon_at = std::atoll(argv[i + 1]);
    try {
        flashrec::Runtime rt(argc, argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
        const auto me = rt.role();
        const int D = rt.dp_size(), T = rt.tp_size(), P = rt.pp_size();
        constexpr std::size_t n = 11;  // not a multiple of dp: uneven shards
        const flashrec::ShardRange range = rt.shard_range(n);  // plain copies: a lambda captures them below
        const std::size_t first = range.first, last = range.last;
        std::vector<float> params(n, 0.0f), acc(last - first, 0.0f);
        std::vector<std::int64_t> steps_done(1, 0);
        rt.protect("params", std::span(params), flashrec::Redundancy::replicated);
        rt.protect("acc", std::span(acc), flashrec::Redundancy::sharded);
        rt.protect("steps_done", std::span(steps_done), flashrec::Redundancy::envelope);

        bool abandoned_once = false, repeated = false;
        std::int64_t furthest = -1;
        for (auto step : rt.steps()) {
            const auto s = step.index();
            if (s <= furthest) repeated = true;
            furthest = std::max(furthest, s);

            // TP: the sum over tp in tp order, the same bits on every TP peer.
            std::vector<float> x = values(s, me.dp, me.tp, me.pp, n);
            step.tp_allreduce(x);
            std::vector<float> want(n);
            for (std::size_t i = 0; i < n; ++i) {
                float sum = value(s, me.dp, 0, me.pp, i);
                for (int j = 1; j < T; ++j) sum += value(s, me.dp, j, me.pp, i);
                want[i] = sum;
            }
            if (!step.abandoned()) check(same_bits(x, want), "tp_allreduce: the sum in tp order, bitwise");

            const std::vector<float> part = values(s, me.dp, me.tp, me.pp, 5);
            std::vector<float> full(5 * static_cast<std::size_t>(T));
            step.tp_allgather(part, full);
            bool gathered = true;
            for (int j = 0; j < T; ++j)
                gathered = gathered && same_bits(std::span(full).subspan(5 * static_cast<std::size_t>(j), 5),
                                                 values(s, me.dp, j, me.pp, 5));
            if (!step.abandoned()) check(gathered, "tp_allgather: every part in tp order");

            // PP: stage p sends to p + 1 what p + 1 can predict, then the same backwards.
            std::vector<float> msg(7);
            if (me.pp + 1 < P) step.pp_send(values(s, me.dp, me.tp, me.pp, 7), me.pp + 1);
            if (me.pp > 0) {
                step.pp_recv(msg, me.pp - 1);
                if (!step.abandoned())
                    check(same_bits(msg, values(s, me.dp, me.tp, me.pp - 1, 7)), "pp_recv: the previous stage's activations");
                step.pp_send(values(s + 1000, me.dp, me.tp, me.pp, 7), me.pp - 1);
            }
            if (me.pp + 1 < P) {
                step.pp_recv(msg, me.pp + 1);
                if (!step.abandoned())
                    check(same_bits(msg, values(s + 1000, me.dp, me.tp, me.pp + 1, 7)), "pp_recv: the next stage's gradients");
            }

            if (s == 0) {
                check(throws_error([&] { step.tp_allgather(part, std::span(full).first(3)); }),
                      "tp_allgather with a wrong size is a flashrec::Error");
                check(throws_error([&] { step.pp_send(part, me.pp); }), "pp_send to its own stage is a flashrec::Error");
                check(throws_error([&] { step.pp_recv(msg, P); }), "pp_recv from a stage beyond job.pp is a flashrec::Error");
                // Stages that disagree on a message's size: a typed error, not a failure.
                if (me.pp + 1 < P) {
                    step.pp_send(values(s, me.dp, me.tp, me.pp, 3), me.pp + 1);
                    step.pp_send(values(s, me.dp, me.tp, me.pp, 9), me.pp + 1);
                }
                if (me.pp > 0) {
                    check(throws_error([&] { step.pp_recv(msg, me.pp - 1); }), "pp_recv of a shorter message is a flashrec::Error");
                    check(throws_error([&] { step.pp_recv(msg, me.pp - 1); }), "pp_recv of a longer message is a flashrec::Error");
                    check(!step.abandoned(), "a size mismatch does not abandon the step");
                }
            }
            if (s == abandon_at && me.dp == 1 && me.tp == 1 && me.pp == 1 && !abandoned_once) {
                abandoned_once = true;
                step.abandon("the step_collectives test asked for it");
                check(step.abandoned(), "abandon: the step is abandoned at once");
            }

            // DP: in place and averaged, with uneven shards.
            std::vector<float> dp_sum(n), g = values(s, me.dp, me.tp, me.pp, n);
            for (std::size_t i = 0; i < n; ++i) {
                float sum = value(s, 0, me.tp, me.pp, i);
                for (int j = 1; j < D; ++j) sum += value(s, j, me.tp, me.pp, i);
                dp_sum[i] = sum;
            }
            const std::vector<float> g_before = g;
            step.reduce_scatter(g);  // in place, sum
            bool in_place = same_bits(std::span(g).subspan(first, last - first),
                                      std::span(dp_sum).subspan(first, last - first));
            for (std::size_t i = 0; i < n; ++i)
                if (i < first || i >= last) in_place = in_place && std::memcmp(&g[i], &g_before[i], sizeof(float)) == 0;
            if (!step.abandoned()) check(in_place, "reduce_scatter in place: the dp-order sum in this role's part, the rest untouched");

            std::vector<float> dp_mean(n);
            for (std::size_t i = 0; i < n; ++i) dp_mean[i] = dp_sum[i] / static_cast<float>(D);
            g = values(s, me.dp, me.tp, me.pp, n);
            step.reduce_scatter(g, flashrec::Reduce::mean);
            if (!step.abandoned())
                check(same_bits(std::span(g).subspan(first, last - first), std::span(dp_mean).subspan(first, last - first)),
                      "reduce_scatter in place, Reduce::mean: the sum divided by dp");
            std::vector<float> shard(last - first);
            const std::vector<float> src = values(s, me.dp, me.tp, me.pp, n);
            step.reduce_scatter(src, shard, flashrec::Reduce::mean);
            if (!step.abandoned())
                check(same_bits(shard, std::span(dp_mean).subspan(first, last - first)), "reduce_scatter into a shard, Reduce::mean");
            std::vector<float> all = values(s, me.dp, me.tp, me.pp, n);
            step.allreduce(all, flashrec::Reduce::mean);
            if (!step.abandoned()) check(same_bits(all, dp_mean), "allreduce, Reduce::mean: every DP peer has the mean");

            step.update([&] {
                for (std::size_t i = 0; i < shard.size(); ++i) acc[i] = acc[i] * 0.5f + shard[i] + x[first + i];
                for (std::size_t i = 0; i < n; ++i) params[i] += all[i] + msg[i % msg.size()];
                ++steps_done[0];
            });
        }
        if (abandon_at >= 0) check(repeated, "abandon: the loop repaired the job and repeated the step");
        if (abandon_at < 0) check(!repeated, "no step repeated without a failure");
        const std::string sum = rt.state_checksum();
        for (const auto& [what, ok] : checks)
            std::printf("%s rank %d: %s\n", ok ? "OK" : "FAIL", world_rank, what.c_str());
        if (rt.is_leader()) std::printf("final_checksum=%s\n", sum.c_str());
        std::printf("DONE rank %d\n", world_rank);
        std::fflush(stdout);
    } catch (const std::exception& e) {
        std::printf("FAIL rank %d: %s\n", world_rank, e.what());
        return 1;
    }
    return 0;
}
