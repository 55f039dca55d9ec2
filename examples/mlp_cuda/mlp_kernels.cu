// Kernels of the CUDA example trainer (declarations and the contract in mlp_kernels.hpp).
// Simple on purpose: one thread per output element, loops in a fixed order, no atomics, so
// the same inputs always give the same bits.
#include "mlp_kernels.hpp"

namespace mlp_cuda {

namespace {

// Parameter block offsets, computed on the device (Shape's methods are host code).
struct Dims {
    unsigned long long in, hidden, out;
    __device__ unsigned long long w1() const { return 0; }
    __device__ unsigned long long b1() const { return hidden * in; }
    __device__ unsigned long long w2() const { return b1() + hidden; }
    __device__ unsigned long long b2() const { return w2() + out * hidden; }
    __device__ unsigned long long size() const { return b2() + out; }
};

Dims dims_of(const Shape& s) { return {s.in, s.hidden, s.out}; }

constexpr unsigned kThreads = 128;

unsigned blocks_for(std::size_t n) {
    return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

__device__ unsigned long long thread_index() {
    return static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// One thread per (sample n, hidden unit j), then one per (n, output k): h must be complete
// before out, so these are two kernels.
__global__ void hidden_kernel(Dims d, const float* p, const float* x, float* h, unsigned long long batch) {
    const unsigned long long t = thread_index();
    if (t >= batch * d.hidden) return;
    const unsigned long long n = t / d.hidden, j = t % d.hidden;
    float a = p[d.b1() + j];
    for (unsigned long long i = 0; i < d.in; ++i) a += p[d.w1() + j * d.in + i] * x[n * d.in + i];
    h[t] = tanhf(a);
}

__global__ void output_kernel(Dims d, const float* p, const float* h, float* out, unsigned long long batch) {
    const unsigned long long t = thread_index();
    if (t >= batch * d.out) return;
    const unsigned long long n = t / d.out, k = t % d.out;
    float a = p[d.b2() + k];
    for (unsigned long long j = 0; j < d.hidden; ++j) a += p[d.w2() + k * d.hidden + j] * h[n * d.hidden + j];
    out[t] = a;
}

// One thread per sample: dout and the sample's loss.
__global__ void dout_kernel(Dims d, const float* out, const float* y, float* dout, double* loss,
                            unsigned long long batch) {
    const unsigned long long n = thread_index();
    if (n >= batch) return;
    double sum = 0;
    for (unsigned long long k = 0; k < d.out; ++k) {
        const float diff = out[n * d.out + k] - y[n * d.out + k];
        sum += 0.5 * static_cast<double>(diff) * diff;
        dout[n * d.out + k] = diff;
    }
    loss[n] = sum;
}

// One thread per (n, j): the error at the hidden pre-activation.
__global__ void da_kernel(Dims d, const float* p, const float* h, const float* dout, float* da,
                          unsigned long long batch) {
    const unsigned long long t = thread_index();
    if (t >= batch * d.hidden) return;
    const unsigned long long n = t / d.hidden, j = t % d.hidden;
    float dh = 0;
    for (unsigned long long k = 0; k < d.out; ++k) dh += dout[n * d.out + k] * p[d.w2() + k * d.hidden + j];
    const float hj = h[t];
    da[t] = dh * (1 - hj * hj);
}

// One thread per parameter: its gradient summed over the samples in order.
__global__ void grad_kernel(Dims d, const float* x, const float* h, const float* dout, const float* da,
                            float* g, unsigned long long batch) {
    const unsigned long long i = thread_index();
    if (i >= d.size()) return;
    float sum = 0;
    if (i < d.b1()) {  // W1[j, in]
        const unsigned long long j = i / d.in, c = i % d.in;
        for (unsigned long long n = 0; n < batch; ++n) sum += da[n * d.hidden + j] * x[n * d.in + c];
    } else if (i < d.w2()) {  // b1[j]
        const unsigned long long j = i - d.b1();
        for (unsigned long long n = 0; n < batch; ++n) sum += da[n * d.hidden + j];
    } else if (i < d.b2()) {  // W2[k, j]
        const unsigned long long k = (i - d.w2()) / d.hidden, j = (i - d.w2()) % d.hidden;
        for (unsigned long long n = 0; n < batch; ++n) sum += dout[n * d.out + k] * h[n * d.hidden + j];
    } else {  // b2[k]
        const unsigned long long k = i - d.b2();
        for (unsigned long long n = 0; n < batch; ++n) sum += dout[n * d.out + k];
    }
    g[i] = sum;
}

__global__ void adam_kernel(AdamStep a, const float* grads, float* m, float* v, double* master,
                            float* params, unsigned long long count) {
    const unsigned long long i = thread_index();
    if (i >= count) return;
    const float g = grads[i] * a.norm;
    m[i] = static_cast<float>(a.beta1 * m[i] + (1 - a.beta1) * g);
    v[i] = static_cast<float>(a.beta2 * v[i] + (1 - a.beta2) * g * g);
    master[i] -= a.lr * (m[i] / a.c1) / (sqrt(v[i] / a.c2) + a.eps);
    params[i] = static_cast<float>(master[i]);
}

__global__ void ema_kernel(const float* grads, unsigned long long shard, float* ema, unsigned long long count) {
    for (unsigned long long i = thread_index(); i < count; i += static_cast<unsigned long long>(gridDim.x) * blockDim.x)
        ema[i] = 0.9f * ema[i] + 0.1f * grads[i % shard];
}

__device__ unsigned long long global_timer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void busy_wait_kernel(unsigned long long ns) {
    const unsigned long long start = global_timer_ns();
    while (global_timer_ns() - start < ns) {
#if __CUDA_ARCH__ >= 700
        __nanosleep(10000);
#endif
    }
}

cudaError_t launched() { return cudaGetLastError(); }

}  // namespace

cudaError_t forward(const Shape& s, const float* params, const float* x, float* h, float* out,
                    std::size_t batch, cudaStream_t stream) {
    if (batch == 0) return cudaSuccess;
    const Dims d = dims_of(s);
    hidden_kernel<<<blocks_for(batch * s.hidden), kThreads, 0, stream>>>(d, params, x, h, batch);
    if (const cudaError_t rc = launched(); rc != cudaSuccess) return rc;
    output_kernel<<<blocks_for(batch * s.out), kThreads, 0, stream>>>(d, params, h, out, batch);
    return launched();
}

cudaError_t output_and_hidden_error(const Shape& s, const float* params, const float* h,
                                    const float* out, const float* y, float* dout, float* da,
                                    double* loss, std::size_t batch, cudaStream_t stream) {
    if (batch == 0) return cudaSuccess;
    const Dims d = dims_of(s);
    dout_kernel<<<blocks_for(batch), kThreads, 0, stream>>>(d, out, y, dout, loss, batch);
    if (const cudaError_t rc = launched(); rc != cudaSuccess) return rc;
    da_kernel<<<blocks_for(batch * s.hidden), kThreads, 0, stream>>>(d, params, h, dout, da, batch);
    return launched();
}

cudaError_t parameter_gradients(const Shape& s, const float* x, const float* h, const float* dout,
                                const float* da, float* grads, std::size_t batch, cudaStream_t stream) {
    grad_kernel<<<blocks_for(s.size()), kThreads, 0, stream>>>(dims_of(s), x, h, dout, da, grads, batch);
    return launched();
}

cudaError_t adam(const AdamStep& a, const float* grads_shard, float* m, float* v, double* master,
                 float* params_shard, std::size_t count, cudaStream_t stream) {
    if (count == 0) return cudaSuccess;
    adam_kernel<<<blocks_for(count), kThreads, 0, stream>>>(a, grads_shard, m, v, master, params_shard,
                                                            count);
    return launched();
}

cudaError_t ema(const float* grads_shard, std::size_t shard, float* ema, std::size_t count,
                cudaStream_t stream) {
    if (shard == 0 || count == 0) return cudaSuccess;
    // Grid-stride, a bounded grid: 1 GiB of floats is 2^28 elements.
    const unsigned blocks = blocks_for(count) < 4096 ? blocks_for(count) : 4096;
    ema_kernel<<<blocks, kThreads, 0, stream>>>(grads_shard, shard, ema, count);
    return launched();
}

cudaError_t busy_wait(unsigned long long ns, cudaStream_t stream) {
    if (ns == 0) return cudaSuccess;
    busy_wait_kernel<<<1, 1, 0, stream>>>(ns);
    return launched();
}

}  // namespace mlp_cuda
