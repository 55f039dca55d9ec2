#include "model.hpp"

#include <cmath>
#include <random>

#include "kernels.hpp"

namespace gpt {

Layout make_layout(const Config& c) {
    Layout l;
    std::size_t at = 0;
    auto take = [&](std::size_t n) {
        const std::size_t off = at;
        at += n;
        return off;
    };
    const std::size_t C = c.d_model, W = c.local_width(), F = c.local_mlp();
    if (c.first()) {
        l.wte = take(c.vocab * C);
        l.wpe = take(c.seq * C);
    }
    for (std::size_t b = 0; b < c.local_layers(); ++b) {
        BlockOffsets o{};
        o.ln1_g = take(C), o.ln1_b = take(C);
        o.qkv_w = take(3 * W * C), o.qkv_b = take(3 * W);
        o.proj_w = take(C * W), o.proj_b = take(C);
        o.ln2_g = take(C), o.ln2_b = take(C);
        o.fc_w = take(F * C), o.fc_b = take(F);
        o.fc2_w = take(C * F), o.fc2_b = take(C);
        l.blocks.push_back(o);
    }
    if (c.last()) {
        l.lnf_g = take(C), l.lnf_b = take(C);
        l.lm_w = take(c.vocab * C);
    }
    l.size = at;
    return l;
}

namespace {

std::uint64_t mix(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void fill_normal(float* p, std::size_t n, float stddev, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.0f, stddev);
    for (std::size_t i = 0; i < n; ++i) p[i] = normal(rng);
}

}  // namespace

std::vector<float> init_params(const Config& c, const Layout& l, std::uint64_t seed) {
    std::vector<float> p(l.size, 0.0f);
    const std::size_t C = c.d_model, W = c.local_width(), F = c.local_mlp();
    // tensor id, global block index, and the TP rank for tensors divided over TP
    auto tensor_seed = [&](int id, std::size_t block, bool divided) {
        return mix(seed ^ mix(static_cast<std::uint64_t>(id) * 1000003ULL + block * 7919ULL +
                              (divided ? static_cast<std::uint64_t>(c.tp_rank + 1) << 40 : 0)));
    };
    const float s = 1.0f / std::sqrt(static_cast<float>(C));
    const float s_out = s / std::sqrt(2.0f * static_cast<float>(c.layers));
    if (c.first()) {
        fill_normal(&p[l.wte], c.vocab * C, 0.5f, tensor_seed(1, 0, false));
        fill_normal(&p[l.wpe], c.seq * C, 0.1f, tensor_seed(2, 0, false));
    }
    for (std::size_t b = 0; b < l.blocks.size(); ++b) {
        const auto& o = l.blocks[b];
        const std::size_t g = static_cast<std::size_t>(c.stage) * c.local_layers() + b;
        for (std::size_t i = 0; i < C; ++i) p[o.ln1_g + i] = p[o.ln2_g + i] = 1.0f;
        fill_normal(&p[o.qkv_w], 3 * W * C, s, tensor_seed(3, g, true));
        fill_normal(&p[o.proj_w], C * W, s_out, tensor_seed(4, g, true));
        fill_normal(&p[o.fc_w], F * C, s, tensor_seed(5, g, true));
        fill_normal(&p[o.fc2_w], C * F, s_out / 2, tensor_seed(6, g, true));
    }
    if (c.last()) {
        for (std::size_t i = 0; i < C; ++i) p[l.lnf_g + i] = 1.0f;
        fill_normal(&p[l.lm_w], c.vocab * C, s, tensor_seed(7, 0, false));
    }
    return p;
}

void make_micro_batch(const Config& c, std::uint64_t seed, std::vector<int>& tokens, std::vector<int>& targets) {
    std::mt19937_64 rng(seed);
    tokens.resize(c.tokens());
    targets.resize(c.tokens());
    const auto V = static_cast<std::uint64_t>(c.vocab);
    for (std::size_t b = 0; b < c.batch; ++b) {
        const std::uint64_t start = rng() % V, stride = 1 + rng() % 4;
        for (std::size_t t = 0; t < c.seq; ++t) {
            tokens[b * c.seq + t] = static_cast<int>((start + t * stride) % V);
            targets[b * c.seq + t] = static_cast<int>((start + (t + 1) * stride) % V);
        }
    }
}

double Stage::forward(const float* p, float* g, MicroBatch& mb, std::span<const float> in, float scale,
                      const TpSum& tp_sum) const {
    const std::size_t N = c_.tokens(), C = c_.d_model, W = c_.local_width(), F = c_.local_mlp();
    std::vector<float> x(N * C);
    if (c_.first()) {
        for (std::size_t r = 0; r < N; ++r) {
            const float* e = p + l_.wte + static_cast<std::size_t>(mb.tokens[r]) * C;
            const float* pos = p + l_.wpe + (r % c_.seq) * C;
            for (std::size_t i = 0; i < C; ++i) x[r * C + i] = e[i] + pos[i];
        }
    } else {
        x.assign(in.begin(), in.end());
    }
    mb.blocks.resize(l_.blocks.size());
    std::vector<float> y(N * C);
    for (std::size_t b = 0; b < l_.blocks.size(); ++b) {
        const auto& o = l_.blocks[b];
        auto& a = mb.blocks[b];
        a.x = x;
        a.h.resize(N * C), a.mean1.resize(N), a.rstd1.resize(N);
        layernorm_forward(x.data(), p + o.ln1_g, p + o.ln1_b, a.h.data(), a.mean1.data(), a.rstd1.data(), N, C);
        a.qkv.resize(N * 3 * W);
        linear_forward(a.h.data(), p + o.qkv_w, p + o.qkv_b, a.qkv.data(), N, C, 3 * W);
        a.att.resize(c_.batch * c_.local_heads() * c_.seq * c_.seq), a.attn.resize(N * W);
        attention_forward(a.qkv.data(), a.attn.data(), a.att.data(), c_.batch, c_.seq, c_.local_heads(), c_.head_dim());
        linear_forward(a.attn.data(), p + o.proj_w, nullptr, y.data(), N, W, C);
        tp_sum(y);  // row-parallel: the heads' partial projections, summed over TP
        a.x2.resize(N * C);
        for (std::size_t i = 0; i < N * C; ++i) a.x2[i] = x[i] + (y[i] + p[o.proj_b + i % C]);
        a.h2.resize(N * C), a.mean2.resize(N), a.rstd2.resize(N);
        layernorm_forward(a.x2.data(), p + o.ln2_g, p + o.ln2_b, a.h2.data(), a.mean2.data(), a.rstd2.data(), N, C);
        a.a.resize(N * F), a.f.resize(N * F);
        linear_forward(a.h2.data(), p + o.fc_w, p + o.fc_b, a.a.data(), N, C, F);
        gelu_forward(a.a.data(), a.f.data(), N * F);
        linear_forward(a.f.data(), p + o.fc2_w, nullptr, y.data(), N, F, C);
        tp_sum(y);  // row-parallel MLP output
        for (std::size_t i = 0; i < N * C; ++i) x[i] = a.x2[i] + (y[i] + p[o.fc2_b + i % C]);
    }
    mb.out = x;
    if (!c_.last()) return 0;
    // The head on the last stage, forward and backward (identical on every TP rank).
    std::vector<float> xf(N * C), meanf(N), rstdf(N), logits(N * c_.vocab), dlogits(N * c_.vocab), dxf(N * C);
    layernorm_forward(x.data(), p + l_.lnf_g, p + l_.lnf_b, xf.data(), meanf.data(), rstdf.data(), N, C);
    linear_forward(xf.data(), p + l_.lm_w, nullptr, logits.data(), N, C, c_.vocab);
    const double loss = cross_entropy(logits.data(), mb.targets.data(), dlogits.data(), N, c_.vocab, scale);
    linear_backward(dlogits.data(), xf.data(), p + l_.lm_w, dxf.data(), g + l_.lm_w, nullptr, N, C, c_.vocab);
    mb.dout.assign(N * C, 0.0f);
    layernorm_backward(dxf.data(), x.data(), meanf.data(), rstdf.data(), p + l_.lnf_g, mb.dout.data(), g + l_.lnf_g,
                       g + l_.lnf_b, N, C);
    return loss;
}

void Stage::backward(const float* p, float* g, MicroBatch& mb, std::vector<float>& d, const TpSum& tp_sum) const {
    const std::size_t N = c_.tokens(), C = c_.d_model, W = c_.local_width(), F = c_.local_mlp();
    std::vector<float> df(N * F), dh(N * C), dattn(N * W), dqkv(N * 3 * W), dx2(N * C);
    for (std::size_t bi = l_.blocks.size(); bi-- > 0;) {
        const auto& o = l_.blocks[bi];
        const auto& a = mb.blocks[bi];
        // MLP: d is the gradient at the block's output (x3 = x2 + mlp).
        linear_backward(d.data(), a.f.data(), p + o.fc2_w, df.data(), g + o.fc2_w, g + o.fc2_b, N, F, C);
        gelu_backward(a.a.data(), df.data(), N * F);
        linear_backward(df.data(), a.h2.data(), p + o.fc_w, dh.data(), g + o.fc_w, g + o.fc_b, N, C, F);
        tp_sum(dh);  // column-parallel input gradient, summed over TP
        dx2 = d;
        layernorm_backward(dh.data(), a.x2.data(), a.mean2.data(), a.rstd2.data(), p + o.ln2_g, dx2.data(),
                           g + o.ln2_g, g + o.ln2_b, N, C);
        // Attention.
        linear_backward(dx2.data(), a.attn.data(), p + o.proj_w, dattn.data(), g + o.proj_w, g + o.proj_b, N, W, C);
        attention_backward(dattn.data(), a.qkv.data(), a.att.data(), dqkv.data(), c_.batch, c_.seq, c_.local_heads(),
                           c_.head_dim());
        linear_backward(dqkv.data(), a.h.data(), p + o.qkv_w, dh.data(), g + o.qkv_w, g + o.qkv_b, N, C, 3 * W);
        tp_sum(dh);
        d = dx2;
        layernorm_backward(dh.data(), a.x.data(), a.mean1.data(), a.rstd1.data(), p + o.ln1_g, d.data(), g + o.ln1_g,
                           g + o.ln1_b, N, C);
    }
    if (!c_.first()) return;
    for (std::size_t r = 0; r < N; ++r) {
        float* e = g + l_.wte + static_cast<std::size_t>(mb.tokens[r]) * C;
        float* pos = g + l_.wpe + (r % c_.seq) * C;
        for (std::size_t i = 0; i < C; ++i) {
            e[i] += d[r * C + i];
            pos[i] += d[r * C + i];
        }
    }
}

}  // namespace gpt
