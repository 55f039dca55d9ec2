// The model of the 3-D CUDA example (mlp3d_trainer.cpp): one Megatron MLP block per pipeline
// stage, z = W2 tanh(W1 x), on `width`-wide rows, its `hidden` units divided over the TP group:
// W1 is column-parallel (this TP rank holds hidden/tp rows of it), W2 row-parallel (the matching
// hidden/tp columns), so each TP rank's z is a partial sum that Step::tp_allreduce completes;
// in backward the input gradient is likewise a partial sum. The last stage's z is the output,
// trained towards a fixed random teacher (0.5 squared error).
//
// Each element below is one thread's work on the GPU (mlp3d_kernels.cu) and one loop iteration
// on the CPU (cpu loops in mlp3d_trainer.cpp): the same function, summing in the same order.
// The CPU and GPU runs still differ in the last bits (nvcc contracts a*b+c into FMAs, tanhf
// differs from glibc's), which is why they are compared with a tolerance, not bitwise.
#pragma once
#include <cmath>
#include <cstddef>

#ifdef __CUDACC__
#define MLP3D_HD __host__ __device__
#else
#define MLP3D_HD
#endif

namespace mlp3d {

struct Dims {
    std::size_t width = 16;   // rows of x, z
    std::size_t local = 8;    // this TP rank's hidden units (hidden / tp)
    std::size_t batch = 8;    // rows per step per DP rank
    MLP3D_HD std::size_t w1() const { return local * width; }         // W1 [local, width]
    MLP3D_HD std::size_t params() const { return 2 * local * width; }  // W1 then W2 [width, local]
};

// a[n, j] = sum_i x[n, i] W1[j, i]; h = tanh(a)
MLP3D_HD inline float hidden(const Dims& d, const float* p, const float* x, std::size_t n, std::size_t j) {
    float acc = 0.0f;
    for (std::size_t i = 0; i < d.width; ++i) acc += x[n * d.width + i] * p[j * d.width + i];
    return tanhf(acc);
}
// z_partial[n, k] = sum_j h[n, j] W2[k, j]
MLP3D_HD inline float output(const Dims& d, const float* p, const float* h, std::size_t n, std::size_t k) {
    const float* w2 = p + d.w1();
    float acc = 0.0f;
    for (std::size_t j = 0; j < d.local; ++j) acc += h[n * d.local + j] * w2[k * d.local + j];
    return acc;
}
// dW2[k, j] = sum_n dz[n, k] h[n, j]
MLP3D_HD inline float grad_w2(const Dims& d, const float* dz, const float* h, std::size_t k, std::size_t j) {
    float acc = 0.0f;
    for (std::size_t n = 0; n < d.batch; ++n) acc += dz[n * d.width + k] * h[n * d.local + j];
    return acc;
}
// da[n, j] = (sum_k dz[n, k] W2[k, j]) (1 - h[n, j]^2)
MLP3D_HD inline float grad_a(const Dims& d, const float* p, const float* dz, const float* h, std::size_t n,
                             std::size_t j) {
    const float* w2 = p + d.w1();
    float acc = 0.0f;
    for (std::size_t k = 0; k < d.width; ++k) acc += dz[n * d.width + k] * w2[k * d.local + j];
    const float hj = h[n * d.local + j];
    return acc * (1.0f - hj * hj);
}
// dW1[j, i] = sum_n da[n, j] x[n, i]
MLP3D_HD inline float grad_w1(const Dims& d, const float* da, const float* x, std::size_t j, std::size_t i) {
    float acc = 0.0f;
    for (std::size_t n = 0; n < d.batch; ++n) acc += da[n * d.local + j] * x[n * d.width + i];
    return acc;
}
// dx_partial[n, i] = sum_j da[n, j] W1[j, i]
MLP3D_HD inline float grad_x(const Dims& d, const float* p, const float* da, std::size_t n, std::size_t i) {
    float acc = 0.0f;
    for (std::size_t j = 0; j < d.local; ++j) acc += da[n * d.local + j] * p[j * d.width + i];
    return acc;
}

struct Adam {
    float norm;  // 1 / (batch * dp): the mean over the DP group's rows
    float lr, beta1, beta2, eps, c1, c2;
};
// One element of ZeRO-1 Adam: m, v, the parameter (float master = parameter).
MLP3D_HD inline void adam(const Adam& a, float g_sum, float& m, float& v, float& param) {
    const float g = g_sum * a.norm;
    m = a.beta1 * m + (1.0f - a.beta1) * g;
    v = a.beta2 * v + (1.0f - a.beta2) * g * g;
    param -= a.lr * (m / a.c1) / (sqrtf(v / a.c2) + a.eps);
}

}  // namespace mlp3d
