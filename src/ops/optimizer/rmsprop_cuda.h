#pragma once
// The fused RMSprop update on the GPU over whole fp32 regions (RmspropUpdate in
// optimizer_contract.h states the rule): one launch updates every parameter of the model, per
// element in fp32 with the step's scalars rounded to fp32 as the host forms them; in mixed
// precision it reads the compute-dtype gradients of the copied prefix and rewrites the copies
// (ComputeCopies), and under loss scaling it divides the scale out or skips the step
// (LossScaleInputs), as the other updates do (optimizer_cuda.h).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "ops/optimizer/optimizer_cuda.h"

namespace kiln::cuda {

struct RmspropScalars {
  float lr = 0, alpha = 0.99f, one_minus_alpha = 0.01f, eps = 1e-8f, weight_decay = 0, momentum = 0;
};
RmspropScalars rmsprop_scalars(double lr, double alpha, double eps, double weight_decay, double momentum);

// momentum_buf is nullptr exactly when s.momentum == 0, grad_avg exactly when not centered. The
// learning rate is read at `device_lr` when given (a replayed CUDA Graph's step scalars), else
// s.lr. Asynchronous on `stream`; throws kiln::Error naming `where`.
void rmsprop_update(int64_t n, const float* grad, float* param, float* square_avg, float* momentum_buf,
                    float* grad_avg, const RmspropScalars& s, cudaStream_t stream, const std::string& where,
                    const float* device_lr = nullptr, ComputeCopies compute = {}, LossScaleInputs scaling = {});

}  // namespace kiln::cuda
