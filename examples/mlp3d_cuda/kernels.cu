#include "kernels.hpp"

namespace mlp3d {
namespace {

constexpr unsigned kThreads = 128;
unsigned blocks(std::size_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

__global__ void hidden_kernel(Dims d, const float* p, const float* x, float* h) {
    const std::size_t t = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (t < d.batch * d.local) h[t] = hidden(d, p, x, t / d.local, t % d.local);
}
__global__ void output_kernel(Dims d, const float* p, const float* h, float* z) {
    const std::size_t t = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (t < d.batch * d.width) z[t] = output(d, p, h, t / d.width, t % d.width);
}
__global__ void grad_a_kernel(Dims d, const float* p, const float* dz, const float* h, float* da) {
    const std::size_t t = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (t < d.batch * d.local) da[t] = grad_a(d, p, dz, h, t / d.local, t % d.local);
}
__global__ void grad_params_kernel(Dims d, const float* x, const float* h, const float* dz, const float* da,
                                   float* grads) {
    const std::size_t t = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (t < d.w1())
        grads[t] = grad_w1(d, da, x, t / d.width, t % d.width);
    else if (t < d.params())
        grads[t] = grad_w2(d, dz, h, (t - d.w1()) / d.local, (t - d.w1()) % d.local);
}
__global__ void grad_x_kernel(Dims d, const float* p, const float* da, float* dx) {
    const std::size_t t = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (t < d.batch * d.width) dx[t] = grad_x(d, p, da, t / d.width, t % d.width);
}
__global__ void adam_kernel(Adam a, const float* g, float* m, float* v, float* params, std::size_t count) {
    const std::size_t t = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (t < count) adam(a, g[t], m[t], v[t], params[t]);
}

}  // namespace

cudaError_t forward(const Dims& d, const float* p, const float* x, float* h, float* z, cudaStream_t stream) {
    hidden_kernel<<<blocks(d.batch * d.local), kThreads, 0, stream>>>(d, p, x, h);
    output_kernel<<<blocks(d.batch * d.width), kThreads, 0, stream>>>(d, p, h, z);
    return cudaGetLastError();
}

cudaError_t backward(const Dims& d, const float* p, const float* x, const float* h, const float* dz, float* da,
                     float* grads, float* dx, cudaStream_t stream) {
    grad_a_kernel<<<blocks(d.batch * d.local), kThreads, 0, stream>>>(d, p, dz, h, da);
    grad_params_kernel<<<blocks(d.params()), kThreads, 0, stream>>>(d, x, h, dz, da, grads);
    if (dx != nullptr) grad_x_kernel<<<blocks(d.batch * d.width), kThreads, 0, stream>>>(d, p, da, dx);
    return cudaGetLastError();
}

cudaError_t adam(const Adam& a, const float* grad_shard, float* m, float* v, float* params_shard,
                 std::size_t count, cudaStream_t stream) {
    if (count == 0) return cudaSuccess;
    adam_kernel<<<blocks(count), kThreads, 0, stream>>>(a, grad_shard, m, v, params_shard, count);
    return cudaGetLastError();
}

}  // namespace mlp3d
