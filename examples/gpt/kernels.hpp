// The GPT example's CPU kernels: plain single-threaded loops in a fixed order, so every result
// is a pure function of the inputs (bitwise, wherever the process runs). Matrices are
// row-major; a linear layer's weight w is [out, in], as in PyTorch.
#pragma once
#include <cstddef>

namespace gpt {

// y[n, o] = b[o] + sum_i x[n, i] w[o, i]   (b may be null)
void linear_forward(const float* x, const float* w, const float* b, float* y, std::size_t n,
                    std::size_t in, std::size_t out);
// dx = dy w (overwritten; skipped if dx is null); dw += dy^T x; db += column sums of dy.
void linear_backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                     std::size_t n, std::size_t in, std::size_t out);

// Layer norm over the last dimension; keeps each row's mean and 1/std for the backward pass.
void layernorm_forward(const float* x, const float* g, const float* b, float* y, float* mean, float* rstd,
                       std::size_t n, std::size_t c);
// dx += d(input); dg, db accumulate.
void layernorm_backward(const float* dy, const float* x, const float* mean, const float* rstd, const float* g,
                        float* dx, float* dg, float* db, std::size_t n, std::size_t c);

// GELU (tanh approximation), elementwise; the backward multiplies dy by GELU'(a) in place.
void gelu_forward(const float* a, float* y, std::size_t count);
void gelu_backward(const float* a, float* dy, std::size_t count);

// Causal self-attention over `heads` heads of size `hd`, for `batch` sequences of `seq`
// tokens. qkv rows are [q | k | v], each heads*hd wide; out is [batch*seq, heads*hd];
// att keeps the softmax weights [batch, heads, seq, seq] for the backward pass.
void attention_forward(const float* qkv, float* out, float* att, std::size_t batch, std::size_t seq,
                       std::size_t heads, std::size_t hd);
// dqkv is overwritten.
void attention_backward(const float* dout, const float* qkv, const float* att, float* dqkv, std::size_t batch,
                        std::size_t seq, std::size_t heads, std::size_t hd);

// Mean cross-entropy contribution: returns the sum over rows of -log softmax(logits)[target],
// and sets dlogits = (softmax - onehot) * scale.
double cross_entropy(const float* logits, const int* targets, float* dlogits, std::size_t n, std::size_t vocab,
                     float scale);

}  // namespace gpt
