#include <cmath>
#include <initializer_list>
#include <type_traits>

#include "ops/common/flat_cuda.cuh"
#include "ops/elementwise/elementwise_cuda.h"
#include "ops/optimizer/optimizer_cuda.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/dtype_cuda.h"

namespace kiln::cuda {
namespace {

// Writes the updated parameters to the optional low-precision copy (C = void: no copy).
template <class C>
__device__ __forceinline__ void store_copy(C* copy, int64_t i0, int64_t n, bool vec,
                                           const float (&p)[8]) {
  if constexpr (!std::is_void_v<C>) store8(copy, i0, n, vec, p);
}

// Loss scaling: false when the step is skipped; else `inv` is what gradients are multiplied by.
__device__ __forceinline__ bool take_step(const LossScaleInputs& scaling, float& inv) {
  if (scaling.found_nonfinite && *scaling.found_nonfinite != 0) return false;
  inv = scaling.scale ? 1.f / *scaling.scale : 1.f;
  return true;
}

template <class C>
struct Sgd {
  const float* grad;
  float* param;
  float* buf;  // nullptr: no momentum
  SgdScalars host;
  const SgdScalars* dev;
  C* copy;
  LossScaleInputs scaling;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float inv;
    if (!take_step(scaling, inv)) return;
    const SgdScalars s = dev ? *dev : host;
    float g[8], p[8], b[8];
    load8(grad, i0, n, vec, g);
    load8(param, i0, n, vec, p);
#pragma unroll
    for (int j = 0; j < 8; ++j) g[j] *= inv;
    if (s.weight_decay != 0.f) {
#pragma unroll
      for (int j = 0; j < 8; ++j) g[j] += s.weight_decay * p[j];
    }
    if (buf) {
      load8(buf, i0, n, vec, b);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        b[j] = s.momentum * b[j] + g[j];
        g[j] = s.nesterov ? g[j] + s.momentum * b[j] : b[j];
      }
      store8(buf, i0, n, vec, b);
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) p[j] -= s.lr * g[j];
    store8(param, i0, n, vec, p);
    store_copy(copy, i0, n, vec, p);
  }
};

template <class C>
struct AdamW {
  const float* grad;
  float* param;
  float* m;
  float* v;
  AdamWScalars host;
  const AdamWScalars* dev;
  C* copy;
  LossScaleInputs scaling;
  __device__ void operator()(int64_t i0, int64_t n, bool vec) const {
    float inv;
    if (!take_step(scaling, inv)) return;
    const AdamWScalars s = dev ? *dev : host;
    float g[8], p[8], mi[8], vi[8];
    load8(grad, i0, n, vec, g);
#pragma unroll
    for (int j = 0; j < 8; ++j) g[j] *= inv;
    load8(param, i0, n, vec, p);
    load8(m, i0, n, vec, mi);
    load8(v, i0, n, vec, vi);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      mi[j] = s.beta1 * mi[j] + s.one_minus_beta1 * g[j];
      vi[j] = s.beta2 * vi[j] + s.one_minus_beta2 * g[j] * g[j];
      const float denom = sqrtf(vi[j]) / s.bias2_sqrt + s.eps;
      p[j] = p[j] * s.keep - s.step_size * (mi[j] / denom);
    }
    store8(m, i0, n, vec, mi);
    store8(v, i0, n, vec, vi);
    store8(param, i0, n, vec, p);
    store_copy(copy, i0, n, vec, p);
  }
};

void check_regions(const char* fn, int64_t n, std::initializer_list<const void*> required,
                   const std::string& where) {
  if (n < 0) fail("{}: {} got n = {} parameters; n must be >= 0", where, fn, n);
  for (const void* p : required)
    if (n > 0 && !p)
      fail(
          "{}: {} got a nullptr region (gradient, parameter or optimizer state); bind every "
          "region of the update",
          where, fn);
}

// The host's sgd_scalars / adamw_scalars, on one thread, from device-resident lr and step
// (the same fp64 formulas, so a replayed step updates as an uncaptured one does).
__global__ void derive_sgd_kernel(const float* lr, float momentum, float weight_decay, int nesterov, SgdScalars* out) {
  *out = SgdScalars{*lr, momentum, weight_decay, nesterov};
}

__global__ void derive_adamw_kernel(const float* lr, const int64_t* step, double beta1, double beta2, double eps,
                                    double weight_decay, AdamWScalars* out) {
  const double rate = *lr, t = static_cast<double>(*step + 1);
  AdamWScalars s;
  s.keep = static_cast<float>(1 - rate * weight_decay);
  s.beta1 = static_cast<float>(beta1), s.one_minus_beta1 = static_cast<float>(1 - beta1);
  s.beta2 = static_cast<float>(beta2), s.one_minus_beta2 = static_cast<float>(1 - beta2);
  s.step_size = static_cast<float>(rate / (1 - pow(beta1, t)));
  s.bias2_sqrt = static_cast<float>(sqrt(1 - pow(beta2, t)));
  s.eps = static_cast<float>(eps);
  *out = s;
}

// Calls f(C*) with the copy's element type, or f((void*)nullptr) without a copy.
template <class F>
void dispatch_copy(const ParamCopy& copy, const char* fn, F&& f) {
  if (!copy.data) return f(static_cast<void*>(nullptr));
  dispatch_activation(copy.dtype, fn, [&](auto zero) {
    using C = decltype(zero);
    f(static_cast<C*>(copy.data));
  });
}

}  // namespace

SgdScalars sgd_scalars(double lr, double momentum, double weight_decay, bool nesterov) {
  return SgdScalars{static_cast<float>(lr), static_cast<float>(momentum),
                    static_cast<float>(weight_decay), nesterov ? 1 : 0};
}

AdamWScalars adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                           int64_t step) {
  if (step < 1) fail("adamw_scalars: step {} must be >= 1 (it counts this update)", step);
  const double t = static_cast<double>(step);
  AdamWScalars s;
  s.keep = static_cast<float>(1 - lr * weight_decay);
  s.beta1 = static_cast<float>(beta1), s.one_minus_beta1 = static_cast<float>(1 - beta1);
  s.beta2 = static_cast<float>(beta2), s.one_minus_beta2 = static_cast<float>(1 - beta2);
  s.step_size = static_cast<float>(lr / (1 - std::pow(beta1, t)));
  s.bias2_sqrt = static_cast<float>(std::sqrt(1 - std::pow(beta2, t)));
  s.eps = static_cast<float>(eps);
  return s;
}

void derive_sgd_scalars(const float* lr, double momentum, double weight_decay, bool nesterov, SgdScalars* out,
                        cudaStream_t stream, const std::string& where) {
  // Rounded to float as sgd_scalars rounds them.
  derive_sgd_kernel<<<1, 1, 0, stream>>>(lr, static_cast<float>(momentum), static_cast<float>(weight_decay),
                                         nesterov ? 1 : 0, out);
  KILN_CUDA(cudaGetLastError(), where);
}

void derive_adamw_scalars(const float* lr, const int64_t* step, double beta1, double beta2, double eps,
                          double weight_decay, AdamWScalars* out, cudaStream_t stream, const std::string& where) {
  derive_adamw_kernel<<<1, 1, 0, stream>>>(lr, step, beta1, beta2, eps, weight_decay, out);
  KILN_CUDA(cudaGetLastError(), where);
}

void sgd_update(int64_t n, const float* grad, float* param, float* momentum_buf,
                const SgdScalars& s, cudaStream_t stream, const std::string& where,
                const SgdScalars* device_scalars, ParamCopy copy, LossScaleInputs scaling) {
  check_regions("sgd_update", n, {grad, param}, where);
  if ((s.momentum != 0.f) != (momentum_buf != nullptr))
    fail(
        "{}: sgd_update got momentum {} {} a momentum buffer; the buffer is needed exactly when "
        "momentum != 0",
        where, s.momentum, momentum_buf ? "with" : "without");
  dispatch_copy(copy, "sgd_update (parameter copy)", [&](auto* out) {
    using C = std::remove_pointer_t<decltype(out)>;
    Sgd<C> op{grad, param, momentum_buf, s, device_scalars, out, scaling};
    launch_flat(op, n, flat_vectorizable({grad, param, momentum_buf, out}), stream, where);
  });
}

void adamw_update(int64_t n, const float* grad, float* param, float* exp_avg, float* exp_avg_sq,
                  const AdamWScalars& s, cudaStream_t stream, const std::string& where,
                  const AdamWScalars* device_scalars, ParamCopy copy, LossScaleInputs scaling) {
  check_regions("adamw_update", n, {grad, param, exp_avg, exp_avg_sq}, where);
  dispatch_copy(copy, "adamw_update (parameter copy)", [&](auto* out) {
    using C = std::remove_pointer_t<decltype(out)>;
    AdamW<C> op{grad, param, exp_avg, exp_avg_sq, s, device_scalars, out, scaling};
    launch_flat(op, n, flat_vectorizable({grad, param, exp_avg, exp_avg_sq, out}), stream, where);
  });
}

void copy_master_params(int64_t n, const float* master, DType dtype, void* copy,
                        cudaStream_t stream, const std::string& where) {
  cast(DType::F32, master, dtype, copy, n, stream, where);
}

}  // namespace kiln::cuda
