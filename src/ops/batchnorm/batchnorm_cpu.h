#pragma once
// Batch normalization kernels on the CPU. Any input is viewed as (M, C) with C = last dim
// (NHWC feature maps: M = N*H*W; flat activations: M = N). Semantics are PyTorch's:
// the batch is normalized with the biased variance, running_var is updated with the unbiased
// variance M/(M-1)*var, and running = (1 - momentum) * running + momentum * batch.
//
// Per-channel reductions accumulate in double over a fixed split of the rows (it depends on
// M and C only), so results are bitwise identical whatever the thread count.
//
// The pieces (statistics, finalize, apply, backward reduce/apply) are exposed separately so
// that the fused CBR op can run them in its own order; the whole-op kernels at the bottom
// are compositions of them.
#include <cstdint>

namespace kiln::cpu {

// ReLU bitmask layout shared with CBR: element i (flat index into the (M, C) tensor) is
// bit (i % 8) of byte i / 8, least significant bit first. A set bit means "passed the ReLU".
inline bool bitmask_get(const uint8_t* mask, int64_t i) { return (mask[i >> 3] >> (i & 7)) & 1; }
inline int64_t bitmask_bytes(int64_t elements) { return (elements + 7) / 8; }

// --- Statistics (per channel, length-C outputs) ---

// Mean and biased variance, two passes (mean first, then centered squares): robust when
// |mean| >> std, where sum-of-squares minus mean^2 cancels.
template <class T>
void bn_channel_moments(const T* x, int64_t M, int64_t C, double* mean, double* var);

// Sum and sum of squares in one pass (the "genstats" form docs/cbr.md describes); feed to
// bn_finalize.
template <class T>
void bn_channel_sums(const T* x, int64_t M, int64_t C, double* sum, double* sqsum);

// --- Finalize (docs/cbr.md, forward stage 2) ---
// From batch mean and biased variance over `count` values per channel: writes saved_mean,
// saved_inv_std (kept for backward), scale = gamma * inv_std, shift = beta - mean * scale,
// and updates running_mean / running_var in place. scale/shift stay in double: they are
// length C, and double keeps x * scale + shift accurate. count must be > 1 for the unbiased
// variance; with count == 1 the biased variance is used (op wrappers reject that case).
template <class T>
void bn_finalize_moments(const double* mean, const double* var, int64_t count, const T* gamma,
                         const T* beta, double eps, double momentum, T* running_mean,
                         T* running_var, T* saved_mean, T* saved_inv_std, double* scale,
                         double* shift, int64_t C);

// Same from sum and sum of squares: mean = sum/count, var = max(sqsum/count - mean^2, 0).
template <class T>
void bn_finalize(const double* sum, const double* sqsum, int64_t count, const T* gamma,
                 const T* beta, double eps, double momentum, T* running_mean, T* running_var,
                 T* saved_mean, T* saved_inv_std, double* scale, double* shift, int64_t C);

// --- Apply (docs/cbr.md, forward stage 3) ---
// y = x * scale + shift per channel. y may alias x.
template <class T>
void bn_apply(const T* x, const double* scale, const double* shift, int64_t M, int64_t C, T* y);

// y = relu(x * scale + shift); bitmask (nullable, bitmask_bytes(M*C) bytes) gets the
// "> 0" bits in the layout above. y may alias x.
template <class T>
void bn_apply_relu(const T* x, const double* scale, const double* shift, int64_t M, int64_t C,
                   T* y, uint8_t* bitmask);

// --- Backward pieces ---
// With xhat = (x - saved_mean) * saved_inv_std and g = dy (times the ReLU bit when
// relu_bitmask is given, so the masked gradient never goes to memory):
//   sum_dy = sum over rows of g       (= dbeta)
//   sum_dy_xhat = sum of g * xhat     (= dgamma)
// dy2 (nullable) is a second term of the gradient: dy + dy2 takes dy's place, added element by
// element in T as GRAD_SUM adds two terms, so the results are those of the summed tensor.
template <class T>
void bn_backward_reduce(const T* dy, const uint8_t* relu_bitmask /*nullable*/, const T* x,
                        const T* saved_mean, const T* saved_inv_std, int64_t M, int64_t C,
                        double* sum_dy, double* sum_dy_xhat, const T* dy2 = nullptr);

// dx = gamma * inv_std * (g - sum_dy/M - xhat * sum_dy_xhat/M). dx may alias dy (or dy2) or x.
template <class T>
void bn_backward_apply(const T* dy, const uint8_t* relu_bitmask /*nullable*/, const T* x,
                       const T* gamma, const T* saved_mean, const T* saved_inv_std,
                       const double* sum_dy, const double* sum_dy_xhat, int64_t M, int64_t C,
                       T* dx, const T* dy2 = nullptr);

// out = a + b, element by element in T (the sum GRAD_SUM stores for two terms).
template <class T>
void add_terms_row(const T* a, const T* b, int64_t n, T* out);

// --- Whole ops ---
template <class T>
void bn_forward_train(const T* x, const T* gamma, const T* beta, int64_t M, int64_t C, double eps,
                      double momentum, T* y, T* saved_mean, T* saved_inv_std, T* running_mean,
                      T* running_var);

// dx may be nullptr (no input gradient wanted).
template <class T>
void bn_backward(const T* dy, const T* x, const T* gamma, const T* saved_mean,
                 const T* saved_inv_std, int64_t M, int64_t C, T* dx, T* dgamma, T* dbeta);

template <class T>
void bn_inference(const T* x, const T* gamma, const T* beta, const T* running_mean,
                  const T* running_var, int64_t M, int64_t C, double eps, T* y);

}  // namespace kiln::cpu
