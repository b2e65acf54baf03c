#pragma once
// BatchNorm + activation over a convolution's output on the CPU (conv_bn_act_contract.h), float and
// double. x is viewed as (M, C), C its last dimension; per-channel tensors are length C. The
// statistics and the backward's reductions are batchnorm_cpu.h's (double accumulation over a split
// fixed by M and C: bitwise the same at any thread count).
#include <cstdint>

namespace kiln::cpu {

template <class T>
struct BnActForwardTensors {
  const T* x = nullptr;
  const T* gamma = nullptr;
  const T* beta = nullptr;
  T* y = nullptr;
  T* saved_mean = nullptr;     // batch mean
  T* saved_inv_std = nullptr;  // 1 / sqrt(biased batch variance + eps)
  T* scale = nullptr;          // gamma * inv_std: the pre-activation is x * scale + shift
  T* shift = nullptr;          // beta - mean * scale
  T* running_mean = nullptr;   // updated in place, as PyTorch's (unbiased variance)
  T* running_var = nullptr;
};

// Needs M > 1 (the unbiased variance divides by M - 1). y = act(x * scale + shift), computed from the
// scale and shift as stored, the values the backward reads.
template <class T>
void bn_act_forward(const BnActForwardTensors<T>& t, int64_t M, int64_t C, int activation, double alpha, double eps,
                    double momentum);

template <class T>
struct BnActBackwardTensors {
  const T* dy = nullptr;
  const T* x = nullptr;
  const T* gamma = nullptr;
  const T* saved_mean = nullptr;
  const T* saved_inv_std = nullptr;
  const T* scale = nullptr;
  const T* shift = nullptr;
  const T* gate = nullptr;       // optional (N, C): dy is the gradient of y * gate (an SE block's)
  const T* dy_pooled = nullptr;  // optional (N, C): a global average pool's gradient, over M / N rows each
  int64_t samples = 1;           // N, with gate or dy_pooled
  T* dx = nullptr;               // may be dy
  T* dgamma = nullptr;
  T* dbeta = nullptr;
};

// g = (dy * gate[n, c] + dy_pooled[n, c] / (M / N)) * act'(x * scale + shift), row m of sample
// n = m / (M / N), each term present where given (dy alone without them), written to dx; then
// BatchNorm's backward of g in place:
// dbeta = sum g, dgamma = sum g * xhat, dx = gamma * inv_std * (g - dbeta / M - xhat * dgamma / M).
template <class T>
void bn_act_backward(const BnActBackwardTensors<T>& t, int64_t M, int64_t C, int activation, double alpha);

// db[n, c] = sum over sample n's M / N rows of dy * act(x * scale + shift), the product and the sum
// in double, rows in order, rounded once (mul_cpu.h's gate gradient of the y the forward stored).
template <class T>
void bn_act_gate_gradient(const T* dy, const T* x, const T* scale, const T* shift, int64_t N, int64_t M, int64_t C,
                          int activation, double alpha, T* db);

// y = act(x * scale + shift) with the running statistics' scale and shift. y may be x.
template <class T>
void bn_act_inference(const T* x, const T* gamma, const T* beta, const T* running_mean, const T* running_var,
                      int64_t M, int64_t C, int activation, double alpha, double eps, T* y);

}  // namespace kiln::cpu
