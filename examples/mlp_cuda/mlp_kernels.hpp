// Device math of the CUDA example trainer: the MLP of examples/mlp on the GPU. Plain C++
// declarations (the kernels are in mlp_kernels.cu, compiled by nvcc); each launcher enqueues
// on `stream` and returns the launch's error code.
//
// Every result is deterministic: one thread computes one output element, and sums run in a
// fixed order (over samples n = 0..batch-1), never with atomics. The gradient sum over the DP
// group is the runtime's (Step::reduce_scatter on device memory: NCCL + a fixed-order sum).
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>

#include "mlp_shape.hpp"

namespace mlp_cuda {

using Shape = mlp::Shape;  // the same layout as examples/mlp

// h[n, :] = tanh(W1 x[n] + b1), out[n, :] = W2 h[n] + b2 for n < batch.
cudaError_t forward(const Shape& s, const float* params, const float* x, float* h, float* out,
                    std::size_t batch, cudaStream_t stream);

// dout = out - y; loss[n] = sum_k 0.5 dout[n, k]^2 (double, as the CPU trainer sums it);
// da[n, j] = (sum_k dout[n, k] W2[k, j]) (1 - h[n, j]^2).
cudaError_t output_and_hidden_error(const Shape& s, const float* params, const float* h,
                                    const float* out, const float* y, float* dout, float* da,
                                    double* loss, std::size_t batch, cudaStream_t stream);

// grads[i] = this batch's gradient of parameter i (sum over samples in order).
cudaError_t parameter_gradients(const Shape& s, const float* x, const float* h, const float* dout,
                                const float* da, float* grads, std::size_t batch,
                                cudaStream_t stream);

struct AdamStep {
    float norm;     // 1 / (batch * dp)
    double lr, beta1, beta2, eps;
    double c1, c2;  // bias corrections 1 - beta^t
};

// ZeRO-1 Adam on this rank's shard [first, first + count) of the parameters:
// grads_shard, m, v, master have `count` elements; params_shard = params + first.
cudaError_t adam(const AdamStep& a, const float* grads_shard, float* m, float* v, double* master,
                 float* params_shard, std::size_t count, cudaStream_t stream);

// trainer.extra_device_mib: ema[i] = 0.9 ema[i] + 0.1 grads_shard[i % shard] for i < count, the
// CPU trainer's "ema" (examples/mlp), so the state depends on every step. Nothing for shard 0.
cudaError_t ema(const float* grads_shard, std::size_t shard, float* ema, std::size_t count,
                cudaStream_t stream);

// trainer.device_ms: one thread of one block that sleeps on the GPU until `ns` nanoseconds of
// the device's global timer have passed, standing for a model's compute on `stream` (the D2H
// snapshot copy can overlap it); it reads and writes nothing.
cudaError_t busy_wait(unsigned long long ns, cudaStream_t stream);

}  // namespace mlp_cuda
