#include "kernels.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace gpt {

void linear_forward(const float* x, const float* w, const float* b, float* y, std::size_t n,
                    std::size_t in, std::size_t out) {
    for (std::size_t r = 0; r < n; ++r) {
        const float* xr = x + r * in;
        for (std::size_t o = 0; o < out; ++o) {
            const float* wo = w + o * in;
            float a = b ? b[o] : 0.0f;
            for (std::size_t i = 0; i < in; ++i) a += xr[i] * wo[i];
            y[r * out + o] = a;
        }
    }
}

void linear_backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                     std::size_t n, std::size_t in, std::size_t out) {
    if (dx) {
        for (std::size_t r = 0; r < n; ++r) {
            float* dxr = dx + r * in;
            std::fill(dxr, dxr + in, 0.0f);
            for (std::size_t o = 0; o < out; ++o) {
                const float d = dy[r * out + o];
                const float* wo = w + o * in;
                for (std::size_t i = 0; i < in; ++i) dxr[i] += d * wo[i];
            }
        }
    }
    for (std::size_t r = 0; r < n; ++r) {
        const float* xr = x + r * in;
        for (std::size_t o = 0; o < out; ++o) {
            const float d = dy[r * out + o];
            float* dwo = dw + o * in;
            for (std::size_t i = 0; i < in; ++i) dwo[i] += d * xr[i];
            if (db) db[o] += d;
        }
    }
}

void layernorm_forward(const float* x, const float* g, const float* b, float* y, float* mean, float* rstd,
                       std::size_t n, std::size_t c) {
    for (std::size_t r = 0; r < n; ++r) {
        const float* xr = x + r * c;
        float m = 0;
        for (std::size_t i = 0; i < c; ++i) m += xr[i];
        m /= static_cast<float>(c);
        float v = 0;
        for (std::size_t i = 0; i < c; ++i) v += (xr[i] - m) * (xr[i] - m);
        v /= static_cast<float>(c);
        const float s = 1.0f / std::sqrt(v + 1e-5f);
        for (std::size_t i = 0; i < c; ++i) y[r * c + i] = (xr[i] - m) * s * g[i] + b[i];
        mean[r] = m;
        rstd[r] = s;
    }
}

void layernorm_backward(const float* dy, const float* x, const float* mean, const float* rstd, const float* g,
                        float* dx, float* dg, float* db, std::size_t n, std::size_t c) {
    for (std::size_t r = 0; r < n; ++r) {
        const float* xr = x + r * c;
        const float* dyr = dy + r * c;
        float mean_d = 0, mean_dx = 0;
        for (std::size_t i = 0; i < c; ++i) {
            const float xhat = (xr[i] - mean[r]) * rstd[r];
            const float d = dyr[i] * g[i];
            mean_d += d;
            mean_dx += d * xhat;
        }
        mean_d /= static_cast<float>(c);
        mean_dx /= static_cast<float>(c);
        for (std::size_t i = 0; i < c; ++i) {
            const float xhat = (xr[i] - mean[r]) * rstd[r];
            dg[i] += dyr[i] * xhat;
            db[i] += dyr[i];
            dx[r * c + i] += rstd[r] * (dyr[i] * g[i] - mean_d - xhat * mean_dx);
        }
    }
}

namespace {
constexpr float kGeluK = 0.7978845608f;  // sqrt(2 / pi)
}

void gelu_forward(const float* a, float* y, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) {
        const float u = a[i];
        y[i] = 0.5f * u * (1.0f + std::tanh(kGeluK * (u + 0.044715f * u * u * u)));
    }
}

void gelu_backward(const float* a, float* dy, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) {
        const float u = a[i];
        const float t = std::tanh(kGeluK * (u + 0.044715f * u * u * u));
        const float grad = 0.5f * (1.0f + t) + 0.5f * u * (1.0f - t * t) * kGeluK * (1.0f + 3.0f * 0.044715f * u * u);
        dy[i] *= grad;
    }
}

void attention_forward(const float* qkv, float* out, float* att, std::size_t batch, std::size_t seq,
                       std::size_t heads, std::size_t hd) {
    const std::size_t width = heads * hd, row = 3 * width;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (std::size_t b = 0; b < batch; ++b)
        for (std::size_t h = 0; h < heads; ++h)
            for (std::size_t t = 0; t < seq; ++t) {
                const float* q = qkv + (b * seq + t) * row + h * hd;
                float* a = att + ((b * heads + h) * seq + t) * seq;
                float top = -INFINITY;
                for (std::size_t u = 0; u <= t; ++u) {
                    const float* k = qkv + (b * seq + u) * row + width + h * hd;
                    float s = 0;
                    for (std::size_t d = 0; d < hd; ++d) s += q[d] * k[d];
                    a[u] = s * scale;
                    top = std::max(top, a[u]);
                }
                float sum = 0;
                for (std::size_t u = 0; u <= t; ++u) {
                    a[u] = std::exp(a[u] - top);
                    sum += a[u];
                }
                for (std::size_t u = 0; u <= t; ++u) a[u] /= sum;
                for (std::size_t u = t + 1; u < seq; ++u) a[u] = 0;
                float* o = out + (b * seq + t) * width + h * hd;
                for (std::size_t d = 0; d < hd; ++d) o[d] = 0;
                for (std::size_t u = 0; u <= t; ++u) {
                    const float* v = qkv + (b * seq + u) * row + 2 * width + h * hd;
                    for (std::size_t d = 0; d < hd; ++d) o[d] += a[u] * v[d];
                }
            }
}

void attention_backward(const float* dout, const float* qkv, const float* att, float* dqkv, std::size_t batch,
                        std::size_t seq, std::size_t heads, std::size_t hd) {
    const std::size_t width = heads * hd, row = 3 * width;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::fill(dqkv, dqkv + batch * seq * row, 0.0f);
    std::vector<float> datt(seq);
    for (std::size_t b = 0; b < batch; ++b)
        for (std::size_t h = 0; h < heads; ++h)
            for (std::size_t t = 0; t < seq; ++t) {
                const float* a = att + ((b * heads + h) * seq + t) * seq;
                const float* d_o = dout + (b * seq + t) * width + h * hd;
                const float* q = qkv + (b * seq + t) * row + h * hd;
                float* dq = dqkv + (b * seq + t) * row + h * hd;
                float dot = 0;
                for (std::size_t u = 0; u <= t; ++u) {
                    const float* v = qkv + (b * seq + u) * row + 2 * width + h * hd;
                    float* dv = dqkv + (b * seq + u) * row + 2 * width + h * hd;
                    float s = 0;
                    for (std::size_t d = 0; d < hd; ++d) {
                        s += d_o[d] * v[d];
                        dv[d] += a[u] * d_o[d];
                    }
                    datt[u] = s;
                    dot += a[u] * s;
                }
                for (std::size_t u = 0; u <= t; ++u) {
                    const float dpre = a[u] * (datt[u] - dot) * scale;
                    const float* k = qkv + (b * seq + u) * row + width + h * hd;
                    float* dk = dqkv + (b * seq + u) * row + width + h * hd;
                    for (std::size_t d = 0; d < hd; ++d) {
                        dq[d] += dpre * k[d];
                        dk[d] += dpre * q[d];
                    }
                }
            }
}

double cross_entropy(const float* logits, const int* targets, float* dlogits, std::size_t n, std::size_t vocab,
                     float scale) {
    double loss = 0;
    for (std::size_t r = 0; r < n; ++r) {
        const float* l = logits + r * vocab;
        float* dl = dlogits + r * vocab;
        float top = l[0];
        for (std::size_t v = 1; v < vocab; ++v) top = std::max(top, l[v]);
        float sum = 0;
        for (std::size_t v = 0; v < vocab; ++v) {
            dl[v] = std::exp(l[v] - top);
            sum += dl[v];
        }
        const auto target = static_cast<std::size_t>(targets[r]);
        loss += -(static_cast<double>(l[target] - top) - std::log(static_cast<double>(sum)));
        for (std::size_t v = 0; v < vocab; ++v) dl[v] = (dl[v] / sum - (v == target ? 1.0f : 0.0f)) * scale;
    }
    return loss;
}

}  // namespace gpt
