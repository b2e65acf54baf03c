#pragma once
// Fused optimizer updates on the GPU over whole fp32 regions: the compiler lays parameters,
// gradients and each optimizer-state slot out contiguously in the same order, so one launch
// updates every parameter of the model. Semantics match the CPU kernels (optimizer_cpu.h) and
// PyTorch (torch.optim.SGD with dampening 0, torch.optim.AdamW); per-element math is fp32 with
// the step's scalar factors formed in fp64 on the host (as the CPU kernel forms them).
//
// Per-step scalars come in a small struct. For CUDA Graph replay, where kernel arguments are
// frozen at capture, pass `device_scalars`: a device copy of the struct that the host rewrites
// (cudaMemcpyAsync) before each replay; the kernel then reads it instead of `s`.
//
// Optionally the update also writes the new parameters to `copy` (an F16/BF16/F32 copy, e.g.
// the half-precision weights the convolutions read), saving a separate cast pass.
//
// With dynamic loss scaling (ops/loss_scale/) the update reads the scale and the found-inf/NaN
// flag from device memory (`LossScaleInputs`): a set flag skips the step (parameters, state and
// copy untouched), else each gradient is multiplied by 1 / scale as it is read.
//
// Any alignment works; 16-byte aligned regions take the vectorized path. All calls are
// asynchronous on `stream` and throw kiln::Error naming `where`.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kiln/dtype.h"

namespace kiln::cuda {

struct ParamCopy {
  void* data = nullptr;  // nullptr: no copy
  DType dtype = DType::F16;
};

struct LossScaleInputs {
  const float* scale = nullptr;              // nullptr: gradients are not scaled
  const int32_t* found_nonfinite = nullptr;  // nullptr: never skip
};

struct SgdScalars {
  float lr = 0, momentum = 0, weight_decay = 0;
  int nesterov = 0;  // 0 or 1 (an int keeps the struct trivially copyable to the device)
};
SgdScalars sgd_scalars(double lr, double momentum, double weight_decay, bool nesterov);

// g = grad + weight_decay * p; buf = momentum * buf + g; g = nesterov ? g + momentum * buf : buf;
// p -= lr * g. momentum_buf == nullptr means no momentum (p -= lr * g); it must then be absent
// exactly when s.momentum == 0. Buffers start at zero, which reproduces PyTorch's first step.
void sgd_update(int64_t n, const float* grad, float* param, float* momentum_buf,
                const SgdScalars& s, cudaStream_t stream, const std::string& where,
                const SgdScalars* device_scalars = nullptr, ParamCopy copy = {}, LossScaleInputs scaling = {});

struct AdamWScalars {
  float keep = 1;  // 1 - lr * weight_decay
  float beta1 = 0.9f, one_minus_beta1 = 0.1f, beta2 = 0.999f, one_minus_beta2 = 0.001f;
  float step_size = 0;   // lr / (1 - beta1^step)
  float bias2_sqrt = 1;  // sqrt(1 - beta2^step)
  float eps = 1e-8f;
};
// step is 1-based (the number of this update).
AdamWScalars adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                           int64_t step);

// The same scalars formed on the device, from the learning rate and step count that the step's
// scalars hold in device memory (`lr`, `step`: this update is step + 1), into `out`: what a
// replayed CUDA Graph uses, since the arguments of a captured launch stay those of the capture.
void derive_sgd_scalars(const float* lr, double momentum, double weight_decay, bool nesterov, SgdScalars* out,
                        cudaStream_t stream, const std::string& where);

// p *= 1 - lr * wd; m = b1 * m + (1 - b1) * g; v = b2 * v + (1 - b2) * g^2;
// p -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps).
void adamw_update(int64_t n, const float* grad, float* param, float* exp_avg, float* exp_avg_sq,
                  const AdamWScalars& s, cudaStream_t stream, const std::string& where,
                  const AdamWScalars* device_scalars = nullptr, ParamCopy copy = {},
                  LossScaleInputs scaling = {});

void derive_adamw_scalars(const float* lr, const int64_t* step, double beta1, double beta2, double eps,
                          double weight_decay, AdamWScalars* out, cudaStream_t stream, const std::string& where);

// copy = master rounded to dtype (F16 / BF16, or F32 for a plain copy): refreshes the
// low-precision weights from the fp32 master parameters (e.g. after loading a checkpoint).
void copy_master_params(int64_t n, const float* master, DType dtype, void* copy,
                        cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
