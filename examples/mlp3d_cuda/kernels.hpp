// The GPU side of the 3-D example's math (model.hpp's elements, one thread each), enqueued on
// `stream`; each returns the launch's error code. Plain declarations: no CUDA syntax.
#pragma once
#include <cuda_runtime_api.h>

#include "model.hpp"

namespace mlp3d {

cudaError_t forward(const Dims& d, const float* p, const float* x, float* h, float* z, cudaStream_t stream);
// grads = [dW1 | dW2]; dx (may be null: the first stage needs none) the partial input gradient.
cudaError_t backward(const Dims& d, const float* p, const float* x, const float* h, const float* dz, float* da,
                     float* grads, float* dx, cudaStream_t stream);
cudaError_t adam(const Adam& a, const float* grad_shard, float* m, float* v, float* params_shard,
                 std::size_t count, cudaStream_t stream);

}  // namespace mlp3d
