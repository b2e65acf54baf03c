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
// Mixed precision (`ComputeCopies`): the parameters whose fp16/bf16 copies the convolutions and
// GEMMs read are a prefix of the region; the update reads their gradients in that dtype and
// writes their new values, rounded, into the copies, saving a cast pass over each.
//
// With dynamic loss scaling (ops/loss_scale/) the update reads the scale and the found-inf/NaN
// flag from device memory (`LossScaleInputs`): a set flag skips the step (parameters, state and
// copies untouched), else each gradient is multiplied by 1 / scale as it is read.
//
// Any alignment works; 16-byte aligned regions take the vectorized path. All calls are
// asynchronous on `stream` and throw kiln::Error naming `where`.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/dtype.h"
#include "ops/optimizer/lars_segment.h"

namespace kiln::cuda {

// Elements [0, prefix) of the update have tensors in `dtype` (F16 or BF16; F32 for a plain copy).
// With `grad`, their gradients are read there instead, and the fp32 gradients passed beside it
// hold only elements [prefix, n): element i reads them at i - prefix (they may be nullptr when
// prefix == n). With `param`, each new parameter of the prefix is also written there, rounded.
// prefix must be a multiple of 8 (the kernels' group of elements) unless it is n.
struct ComputeCopies {
  int64_t prefix = 0;
  DType dtype = DType::F16;
  const void* grad = nullptr;  // nullptr: every gradient is in the fp32 region, at its own index
  void* param = nullptr;       // nullptr: no copy written
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
                const SgdScalars* device_scalars = nullptr, ComputeCopies compute = {},
                LossScaleInputs scaling = {});

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
                  const AdamWScalars* device_scalars = nullptr, ComputeCopies compute = {},
                  LossScaleInputs scaling = {});

void derive_adamw_scalars(const float* lr, const int64_t* step, double beta1, double beta2, double eps,
                          double weight_decay, AdamWScalars* out, cudaStream_t stream, const std::string& where);

// LARS over the parameter tensors `segments` of the n-element region (LarsUpdate in
// optimizer_contract.h states the rule; every segment lies in [0, n), in order, and wholly inside
// or wholly past the compute prefix). The tensors go in batches of up to lars_batch_tensors(), two
// launches each: the first sums the squares of each tensor's parameters and gradients, over a
// fixed number of blocks per tensor (lars_blocks), into the workspace; the second adds each
// tensor's block sums in a fixed order (so every step repeats bit for bit), forms its trust ratio
// and updates. The batch's table of tensors is a kernel argument, so a captured CUDA Graph
// replays it with nothing copied from the host. `lr` is read at `device_lr` when given (a replayed
// graph's step scalars), else `s.lr`. Skipped whole, both launches, when the loss-scaling flag is set.
struct LarsScalars {
  float lr = 0, momentum = 0, weight_decay = 0, trust_coefficient = 0.001f;
};
LarsScalars lars_scalars(double lr, double momentum, double weight_decay, double trust_coefficient);
int lars_batch_tensors();
// Blocks of each launch for a tensor of `length` elements: one per 8192, at least 1, at most 256.
int lars_blocks(int64_t length);
// The workspace the update needs for `segments` tensors (their block sums).
size_t lars_workspace_bytes(size_t segments);
void lars_update(const std::vector<LarsSegment>& segments, int64_t n, const float* grad, float* param,
                 float* momentum_buf, const LarsScalars& s, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream, const std::string& where, const float* device_lr = nullptr,
                 ComputeCopies compute = {}, LossScaleInputs scaling = {});

// copy = master rounded to dtype (F16 / BF16, or F32 for a plain copy): what the update leaves
// in ComputeCopies::param, for the weights the host wrote (the program's refresh_copies CAST).
void copy_master_params(int64_t n, const float* master, DType dtype, void* copy,
                        cudaStream_t stream, const std::string& where);

}  // namespace kiln::cuda
